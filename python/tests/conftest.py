import pathlib

import pytest

# The repository's fixtures, shared with the Rust tests.
FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def fixtures() -> pathlib.Path:
    return FIXTURES
