"""A run whose coroutine is closed by the garbage collector outside its task's context (a
hand-driven event loop closed with the run's task pending, the task dropped): its scopes give
the context back silently (it is discarded with the task), as the uninstrumented app does."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from aegis_probe.capture.spans import await_in_scope, start_run, start_step
from aegis_probe.storage.store import TraceStore
from toyrun import make_probe


@pytest.fixture
def probe(tmp_path):
    provider = TracerProvider()
    yield make_probe(provider, TraceStore(tmp_path / "s"))
    provider.shutdown()


async def _never() -> None:
    await asyncio.get_running_loop().create_future()  # never set: the task stays pending


def _pending_then_collected(main: Any, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Run ``main()`` as a task of a hand-driven loop until it waits, close the loop with the task
    pending, drop the task and collect it; the ERROR lines OpenTelemetry's context logged."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(main())
    loop.run_until_complete(asyncio.sleep(0.01))  # the task runs up to its wait
    assert not task.done()
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        loop.close()
        del task
        gc.collect()
    return [r.getMessage() for r in caplog.records if r.name == "opentelemetry.context"]


def test_a_pending_run_collected_outside_its_task_logs_no_detach_error(probe, caplog):
    """The run's and its step's ``await_in_scope`` closed by gc: no "Failed to detach context"
    (only asyncio's own "Task was destroyed but it is pending!"); the run ends, failed, and is stored."""
    runs: list[Any] = []

    async def main() -> None:
        run = start_run(probe, "toy-team", framework="toy", task="pending")
        runs.append(run)

        async def worker() -> None:
            step = start_step(probe, "worker", run=run)
            await await_in_scope(step, _never, lambda _: step.finish(), "step")

        await await_in_scope(run, worker, lambda _: run.finish(), "run")

    assert _pending_then_collected(main, caplog) == []
    (run,) = runs
    assert run._ended and probe.last_run is run
    assert probe.store.flush()
    assert sorted(s.name for s in probe.store.trace(run.trace_id)) == ["invoke_agent worker", "invoke_workflow toy-team"]
