"""Trace stores across processes: a process forked while a thread of its parent writes to the store
(multiprocessing's fork start method, a pre-fork server) leaves no lock held, and multiprocessing
children, which end with os._exit, still write their runs."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

from aegis_probe.storage.store import SPANS_FILE, TraceStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_fork_during_a_store_write_leaves_no_lock_held(tmp_path):
    store = TraceStore(tmp_path)
    fifo = tmp_path / SPANS_FILE
    os.mkfifo(fifo)  # a write into it blocks until it is read: the fork lands inside the write
    big = "x" * 1_000_000
    writing = threading.Thread(target=store.write_line, args=(big,), daemon=True)
    writing.start()
    time.sleep(0.3)
    assert writing.is_alive(), "the write holds the store's locks"
    pid = os.fork()
    if pid == 0:  # the child writes a line of its own (its thread: the parent's writer is not here)
        mine = threading.Thread(target=store.write_line, args=("child",), daemon=True)
        mine.start()
        mine.join(5)
        os._exit(1 if mine.is_alive() else 0)
    try:
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        got = bytearray()
        deadline = time.monotonic() + 10
        while len(got) < len(big) + 1 and time.monotonic() < deadline:
            try:
                got += os.read(reader, 1 << 16)
            except BlockingIOError:
                time.sleep(0.01)
        writing.join(5)
        assert not writing.is_alive() and got[: len(big) + 1] == big.encode() + b"\n"
        fd = os.open(fifo, os.O_RDWR)
        try:  # the parent's next write could take the file's lock (the child's copy of the
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # descriptor kept it for its lifetime)
        except BlockingIOError:
            pytest.fail("the forked child holds the store file's lock: the parent's writes wait for it")
        finally:
            os.close(fd)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(reader)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's own write waited for its parent's locks"


def _run_in_child(store_dir: str, i: int, size: int = 20_000) -> None:
    """A multiprocessing child's work: one run, then return (the child ends with os._exit)."""
    from aegis_probe.config import ProbeConfig
    from toyrun import StepSpec, default_probe, run_script

    probe = default_probe(ProbeConfig.resolve(capture_content=True), TraceStore(store_dir))
    run_script(probe, f"task {i}", [StepSpec("a", f"{j} " + "x" * size + str(i), "y", usage=[(1, 1)]) for j in range(30)])


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_runs_of_multiprocessing_children_are_stored(tmp_path, method):
    """A multiprocessing child ends with os._exit, so no atexit handler writes its queued traces:
    its runs were lost (all of them when it returned right after)."""
    import multiprocessing

    ctx = multiprocessing.get_context(method)
    children = [ctx.Process(target=_run_in_child, args=(str(tmp_path), i)) for i in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [c.exitcode for c in children] == [0, 0, 0]
    traces = TraceStore(tmp_path).traces()
    assert len(traces) == 3 and all(len(spans) == 61 for spans in traces.values())


def test_runs_of_pool_workers_are_stored_when_the_pool_is_left(tmp_path):
    """Leaving ``with Pool()`` terminates its workers (SIGTERM, no finalizer): each run's trace
    is written before its work returns (the last runs of each worker were lost)."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.starmap(_run_in_child, [(str(tmp_path), i, 100_000) for i in range(4)])  # 6 MB lines: long writes
    traces = TraceStore(tmp_path).traces()
    assert len(traces) == 4 and all(len(spans) == 61 for spans in traces.values())
