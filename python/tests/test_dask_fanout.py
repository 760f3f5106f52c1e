"""deploy/dask_fanout.py's logic, with the binary but without Dask: the
binary check, the plan id every run is given, which failures are final, and
a fan-out whose input is replaced between two shards never committing."""

import importlib.util
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

REPO = Path(__file__).resolve().parents[2]
CLI = os.environ.get("CONVERT_BIN") or str(
    REPO / os.environ.get("CARGO_TARGET_DIR", "target") / "debug/safetensors-convert"
)

pytestmark = pytest.mark.skipif(not os.path.exists(CLI), reason=f"the CLI is not built ({CLI}): cargo build")


def driver():
    spec = importlib.util.spec_from_file_location("dask_fanout", REPO / "deploy/dask_fanout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model(path: Path, fill: float) -> None:
    save_file({f"w{i}": np.full((256,), fill + i, dtype=np.float32) for i in range(4)}, str(path))


def test_a_binary_that_is_not_ours_is_refused(tmp_path):
    fake = tmp_path / "convert"
    fake.write_text("#!/bin/sh\necho 'Version: ImageMagick 6.9.11-60 Q16'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(SystemExit, match="not safetensors-stream's safetensors-convert"):
        driver().check_binary(str(fake))
    driver().check_binary(CLI)  # ours passes


def test_a_replaced_input_makes_the_later_shards_and_the_index_refuse(tmp_path):
    d = driver()
    src = tmp_path / "in.safetensors"
    model(src, 0.0)
    args = [str(src), "--max-shard-size", "1100B", "-o", str(tmp_path / "out/model.safetensors")]
    n, plan_id = d.plan(CLI, args)
    assert n >= 2 and len(plan_id) == 32
    pinned = [*args, "--expect-plan", plan_id]
    assert d.shard_task(CLI, pinned, 1) == (1, 0, "")
    # Replaced: same names and length, other values, a later mtime.
    os.utime(src, (0, 0))
    model(src, 100.0)
    k, code, message = d.shard_task(CLI, pinned, 2)
    # Final (returned, not raised: Dask does not retry it), with convert's message.
    assert (k, code) == (2, 1) and "plan" in message
    with pytest.raises(d.ConvertFailed) as refused:
        d.convert_run(CLI, pinned, "--index-only", "--quiet")
    assert refused.value.code == 1
    assert not (tmp_path / "out/model.safetensors.index.json").exists()


def test_io_failures_are_raised_for_a_retry(tmp_path):
    d = driver()
    missing = [str(tmp_path / "gone.safetensors"), "-o", str(tmp_path / "o.safetensors")]
    with pytest.raises(d.ConvertFailed) as failed:
        d.shard_task(CLI, missing, 1)
    assert failed.value.code == 3
