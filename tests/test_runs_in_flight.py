"""Runs in flight as the probe sees them: every run scope (an adapter's too) is in flight from
its start, and a run the app abandons (never ended) is not held as in flight once it is gone."""

from __future__ import annotations

import gc
import logging
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider

from aegis_probe.capture.probe import AmbiguousRun
from aegis_probe.capture.spans import attached, start_run
from aegis_probe.storage.store import TraceStore
from toyrun import make_probe


@pytest.fixture
def probe(tmp_path):
    provider = TracerProvider()
    yield make_probe(provider, TraceStore(tmp_path / "s"))
    provider.shutdown()


def _finished_run_elsewhere(probe) -> str:
    """A run opened and ended in a worker thread; its trace id."""
    ids: list[str] = []

    def work() -> None:
        run = start_run(probe, "toy-team", framework="toy", task="finished")
        with attached(run):
            ids.append(run.trace_id)
        run.finish()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return ids[0]


def test_an_abandoned_run_is_in_flight_only_while_it_exists(probe):
    """A run scope opened and dropped unended (an app that gave up on its run) makes the main
    thread's choice ambiguous while it exists; once collected, the lone finished run is found again."""
    finished = _finished_run_elsewhere(probe)
    abandoned = start_run(probe, "toy-team", framework="toy", task="abandoned")
    with pytest.raises(AmbiguousRun, match="are in flight"):
        probe.set_outcome(True)
    del abandoned
    gc.collect()
    probe.set_outcome(True, answer="done")
    assert probe.trajectory().trace_id == finished
    assert probe.trajectory().outcome.success is True


def test_a_failing_run_start_hook_never_reaches_the_app(probe, caplog, monkeypatch):
    """An error in the probe's run-start bookkeeping is logged as the ``run start`` hook's and
    swallowed: the run opens, ends and is stored as ever."""
    def broken(run: object) -> None:
        raise RuntimeError("bookkeeping broke")

    monkeypatch.setattr(probe, "_run_started", broken)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        run = start_run(probe, "toy-team", framework="toy", task="t")
    assert "error in run start hook, ignored" in caplog.text
    run.finish()
    assert probe.last_run is run and probe.store.flush()
    assert list(probe.store.traces()) == [run.trace_id]
