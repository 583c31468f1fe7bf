"""Two runs in one session are one session in a real Arize Phoenix (its REST API, ``GET
/v1/sessions/{session_id}``), a run of another session is not in it; Phoenix reads ``session.id``
from the spans alone."""

from __future__ import annotations

import time
import uuid

import pytest

import aegis_probe
from aegis_probe.capture.probe import ProbeSetup
from aegis_probe.storage.store import TraceStore
from phoenix_server import get_json
from toyrun import ToyAdapter, ToyApp, run_script, sample_steps


def session_traces(phoenix, session_id: str, count: int, timeout: float = 30.0) -> list[str]:
    """The trace ids Phoenix lists for ``session_id`` once it holds ``count`` (404 until the first lands)."""
    deadline, traces = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        status, body = get_json(f"{phoenix.base}/v1/sessions/{session_id}")
        if status == 200:
            traces = [t["trace_id"] for t in body["data"]["traces"]]  # type: ignore[index]
            if len(traces) >= count:
                return traces
        time.sleep(0.2)
    raise AssertionError(f"Phoenix lists {len(traces)} of {count} traces for session {session_id} after {timeout}s")


@pytest.mark.phoenix
def test_two_runs_of_a_session_are_one_phoenix_session(phoenix, tmp_path, monkeypatch):
    project = f"aegis-sessions-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.base)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    setup = ProbeSetup.resolve(store=TraceStore(tmp_path / "store"), service_name=f"sessions-{project}")
    probe = setup.probe(ToyAdapter())
    probe.apps.append(probe.adapter.register(ToyApp(), probe))
    session, other = f"s-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    with aegis_probe.using_attributes(session_id=session, user_id="ann"):
        first = run_script(probe, "first question", sample_steps("1"))
        second = run_script(probe, "follow-up", sample_steps("2"))
    with aegis_probe.using_attributes(session_id=other):
        third = run_script(probe, "elsewhere", sample_steps("3"))
    assert probe.flush(10_000)
    assert sorted(session_traces(phoenix, session, 2)) == sorted([first.trace_id, second.trace_id])
    assert session_traces(phoenix, other, 1) == [third.trace_id]
