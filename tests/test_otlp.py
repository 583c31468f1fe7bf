"""OTLP export: a round trip through a real receiver (Arize Phoenix), and a collector that is down or slow.

Phoenix runs from its own venv (``scripts/start-phoenix.sh --install-only`` creates
``.venv-phoenix``); the ``phoenix`` fixture (tests/phoenix_server.py, registered by conftest.py)
starts it once per session on free ports and stops it at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from aegis_probe.storage import exporting
from aegis_probe.config import ProbeConfig
from aegis_probe.storage.exporting import otlp_exporter
from aegis_probe.storage.store import TraceStore
from phoenix_server import free_port  # the session's Phoenix is the `phoenix` fixture of conftest.py
from toyrun import default_probe, run_script, sample_steps

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ["http/protobuf", "grpc"]


def span_tree(records) -> set[tuple[str, str, str, str | None]]:
    return {(r.trace_id, r.span_id, r.name, r.parent_span_id) for r in records}


# -- round trip through Phoenix ----------------------------------------------------------------


@pytest.mark.phoenix
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_round_trip_through_phoenix(phoenix, protocol, tmp_path, monkeypatch):
    project = f"aegis-{protocol.replace('/', '-')}-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.endpoint(protocol))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    config = ProbeConfig.resolve()
    probe = default_probe(config, TraceStore(tmp_path / "store"))
    try:
        run = run_script(probe, "add six sevens", sample_steps(), answer="42", outcome=True)
        assert probe.flush(10_000)
        local = probe.store.trace(run.trace_id)  # type: ignore[union-attr]
        remote = phoenix.spans(project, len(local))
    finally:
        probe.provider.shutdown()
    assert len(local) == 1 + 4 + 4 + 2  # run, steps, chat calls, tool calls
    got = {(s["context"]["trace_id"], s["context"]["span_id"], s["name"], s["parent_id"]) for s in remote}
    assert got == span_tree(local), "names, span ids, parent ids and the trace id survive the trip"
    assert {s["context"]["trace_id"] for s in remote} == {run.trace_id}
    remote_attrs = {s["context"]["span_id"]: s["attributes"] for s in remote}
    for rec in local:  # Phoenix adds its own keys; ours must all be there, unchanged
        assert {k: remote_attrs[rec.span_id].get(k) for k in rec.attributes} == rec.attributes, rec.name
    by_name = {s["name"]: s for s in remote}
    assert by_name["execute_tool search"]["status_code"] == "ERROR"
    assert by_name["invoke_workflow toy-team"]["parent_id"] is None


@pytest.mark.phoenix
def test_spans_are_flushed_at_exit(phoenix, tmp_path):
    """A process that never flushes still delivers its run: the provider flushes at exit."""
    project = f"aegis-exit-{uuid.uuid4().hex[:8]}"
    script = (
        "from aegis_probe.config import ProbeConfig\n"
        "from aegis_probe.storage.store import TraceStore\n"
        "from toyrun import default_probe, run_script, sample_steps\n"
        "probe = default_probe(ProbeConfig.resolve(), TraceStore(ProbeConfig.resolve().trace_dir))\n"
        "print(run_script(probe, 't', sample_steps()).trace_id)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
               OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.base, AEGIS_TRACE_DIR=str(tmp_path / "store"),
               OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    trace_id = out.stdout.split()[-1]
    remote = phoenix.spans(project, 11)
    assert {s["context"]["trace_id"] for s in remote} == {trace_id} and len(remote) == 11


# -- a collector that is down or slow ------------------------------------------------------------


class BlackHole:
    """A 'collector' that accepts connections and never answers (a hung backend)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[float] = []
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("collector", ["down", "hung"])
def test_collector_trouble_never_blocks_or_breaks_the_app(protocol, collector, tmp_path, monkeypatch):
    """20 runs take a small fraction of one export timeout while the exporter is stuck on the collector."""
    timeout = 2
    monkeypatch.setattr(exporting, "EXPORT_TIMEOUT_S", timeout)  # shorter than the default 5 s: faster test
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")  # export at once: the exporter is busy while the app runs
    hole = BlackHole() if collector == "hung" else None
    port = hole.port if hole else free_port()  # "down": nothing listens on the port
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    config = ProbeConfig.resolve()
    probe = default_probe(config, TraceStore(tmp_path / "store"))
    try:
        run_script(probe, "warm-up", sample_steps("w"))
        if hole:  # wait until the exporter is stuck in a request to the hung collector
            deadline = time.monotonic() + 5
            while not hole.accepted and time.monotonic() < deadline:
                time.sleep(0.01)
            assert hole.accepted, "the exporter never tried to reach the collector"
        else:
            time.sleep(0.2)  # the first export attempt has been refused and is now backing off
        start = time.monotonic()
        ids = [run_script(probe, f"t{i}", sample_steps(str(i))).trace_id for i in range(20)]
        elapsed = time.monotonic() - start
        if hole:
            assert time.monotonic() - hole.accepted[0] < timeout, "the export was still in flight"
    finally:
        t0 = time.monotonic()
        probe.provider.shutdown()
        shutdown_s = time.monotonic() - t0
        if hole:
            hole.close()
    print(f"\n{protocol} collector {collector}: 20 runs (220 spans) in {elapsed * 1000:.0f} ms; "
          f"provider shutdown {shutdown_s:.2f} s (export timeout {timeout} s)")
    # Blocking on the exporter would cost at least one export timeout; 20 runs finish well before.
    assert elapsed < timeout, f"the app waited on the collector: {elapsed:.2f}s for 20 runs"
    # Shutdown (at exit) waits for each pending batch's export: two here, the warm-up's and the rest.
    assert shutdown_s < 3 * timeout + 2, "flushing at exit is bounded by the export timeout"
    stored = {t for t in probe.store.traces()}  # type: ignore[union-attr]
    assert set(ids) <= stored and len(stored) == 21, "the local store is unaffected"


def test_otlp_exporter_kinds(monkeypatch):
    """The exporters resolve OTel's variables themselves; only the protocol picks the class."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")
    http = otlp_exporter(ProbeConfig.resolve())
    assert type(http).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
    assert http._endpoint == "http://c:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    grpc = otlp_exporter(ProbeConfig.resolve())
    assert type(grpc).__module__.startswith("opentelemetry.exporter.otlp.proto.grpc")
    assert grpc._endpoint == "c:4317" and grpc._insecure is True
    assert grpc._timeout == exporting.EXPORT_TIMEOUT_S
    grpc.shutdown()
