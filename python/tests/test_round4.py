"""Issue 42, a new user's fourth try, through the Python package: what
``dir()`` offers."""

import safetensors_stream as sts


def test_dir_lists_the_api_and_nothing_it_imports():
    public = [n for n in dir(sts) if not n.startswith("_")]
    assert public == sorted(sts.__all__)
    assert "__version__" in dir(sts)
    # What dir() leaves out stays reachable.
    assert sts.IOError is sts.EnvironmentIOError
