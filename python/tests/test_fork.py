"""No runtime or thread outlives a call: a forked child can use the package
after its parent did (Airflow, Spark and multiprocessing fork)."""

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest
import safetensors.numpy as ref

import safetensors_stream as sts


def use_the_package(folder: str, tag: str, fixtures: str) -> int:
    path = os.path.join(folder, f"{tag}.safetensors")
    sts.save_file({"a": np.arange(1000, dtype=np.float32)}, path)
    report = sts.convert([os.path.join(fixtures, "example/model.npz")], os.path.join(folder, f"{tag}-c.safetensors"))
    with sts.Writer(os.path.join(folder, f"{tag}-w.safetensors"), [("x", "U8", (2,))]) as w:
        w.write("x", b"ok")
    return report["tensors"] + int(ref.load_file(path)["a"][-1])


def parent_uses_the_package_first(tmp_path, fixtures):
    expected = use_the_package(str(tmp_path), "parent", str(fixtures))
    # An open writer in the parent too: it must not hold a runtime either.
    open_writer = sts.Writer(tmp_path / "open.safetensors", [("y", "U8", (1,))])
    return expected, open_writer


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def threads_once_settled(at_most: int = 0, seconds: float = 2.0) -> int:
    """The thread count once exiting threads have left /proc/self/task.

    A thread's entry goes a moment after `join` returns (the kernel wakes the
    joiner before it reaps the thread), so a joined thread, ours or an earlier
    test's, may still be counted: wait, boundedly, for the count to reach
    `at_most`, or else to stop falling. A thread that outlives a call stays,
    and the count with it."""
    deadline = time.monotonic() + seconds
    count = native_threads()
    while time.monotonic() < deadline and count > at_most:
        time.sleep(0.02)
        now = native_threads()
        if now == count and at_most == 0:
            break
        count = now
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_no_thread_outlives_a_call(tmp_path, fixtures):
    before = threads_once_settled()  # numpy's own (OpenBLAS) are there already
    _, open_writer = parent_uses_the_package_first(tmp_path, fixtures)
    assert threads_once_settled(at_most=before) <= before
    open_writer.abort()


def test_os_fork_child(tmp_path, fixtures):
    expected, open_writer = parent_uses_the_package_first(tmp_path, fixtures)
    assert threading.active_count() == 1
    pid = os.fork()
    if pid == 0:  # the child: report by exit code, never return into pytest
        code = 1
        try:
            code = 0 if use_the_package(str(tmp_path), "child", str(fixtures)) == expected else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "child-w.safetensors").read_bytes().endswith(b"ok")
    open_writer.write("y", b"1")
    open_writer.finish()


@pytest.mark.parametrize("method", ["fork"])
def test_multiprocessing_fork_pool(tmp_path, fixtures, method):
    expected, open_writer = parent_uses_the_package_first(tmp_path, fixtures)
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        results = pool.starmap(use_the_package, [(str(tmp_path), f"w{i}", str(fixtures)) for i in range(4)])
    assert results == [expected] * 4
    open_writer.abort()
