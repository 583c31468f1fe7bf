"""A collector that is down or hung never holds the app: leaving ``with instrument(app)`` and
``probe.flush()`` return within a small bound (0.5 s by default; asserted here against the 5 s
export timeout), and spans still pending are sent at process exit, within one export timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

import aegis_probe
from aegis_probe.demos import autogen as demo
from aegis_probe.storage.exporting import EXPORT_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 2.0  # well under one export timeout (5 s): the exit did not wait for the exporter


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def hung_collector() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def _leave_timed(base_url: str) -> tuple[float, float, str]:
    """Run the demo team inside ``with instrument(app)``; seconds to leave the block, and to flush again."""
    app = demo.build_app(base_url, "aegis-scripted", "sk-test")
    with aegis_probe.instrument(app) as probe:
        demo.run_app(app, demo.TASK)
        started = time.perf_counter()
    left = time.perf_counter() - started
    started = time.perf_counter()
    probe.flush()
    return left, time.perf_counter() - started, probe.last_trace_id


@pytest.mark.parametrize("collector", ["down", "hung"])
def test_leaving_instrument_does_not_wait_for_a_dead_collector(collector, model_server, hung_collector, monkeypatch):
    endpoint = f"http://127.0.0.1:{_closed_port()}" if collector == "down" else hung_collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    server = model_server(demo.policy)
    left, flushed, trace_id = _leave_timed(server.base_url)
    assert left < BOUND_S and flushed < BOUND_S, (left, flushed)
    # The local store has the whole trace anyway.
    steps = aegis_probe.load_trajectories(os.environ["AEGIS_TRACE_DIR"])[-1].steps
    assert trace_id and [s.agent for s in steps] == list(demo.AGENTS)


_EXIT_SCRIPT = textwrap.dedent("""
    import sys, time
    import aegis_probe
    from aegis_probe.demos import autogen as demo
    from aegis_probe.modelserver import ModelServer

    with ModelServer(demo.policy) as server:
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        with aegis_probe.instrument(app):
            demo.run_app(app, demo.TASK)
    print("LEFT", time.time(), flush=True)
""")


class _SlowReceiver(ThreadingHTTPServer):
    """An OTLP/HTTP receiver that answers each export after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(delay)
                receiver.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def _run_script(endpoint: str, tmp_path: Path) -> tuple[float, str]:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "AEGIS_TRACE_DIR": str(tmp_path / "traces")}
    proc = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    ended = time.time()
    assert proc.returncode == 0, proc.stderr[-2000:]
    left = float(next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("LEFT")))
    return ended - left, proc.stderr


def test_pending_spans_are_sent_at_exit(tmp_path):
    receiver = _SlowReceiver(delay=1.0)  # slower than the flush wait: the spans are still pending at exit
    thread = threading.Thread(target=receiver.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        exit_s, _ = _run_script(f"http://127.0.0.1:{receiver.server_address[1]}", tmp_path)
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert receiver.bodies and any(b"invoke_workflow" in body for body in receiver.bodies)
    assert exit_s < EXPORT_TIMEOUT_S + BOUND_S


def test_exit_with_a_hung_collector_takes_at_most_one_export_timeout(hung_collector, tmp_path):
    exit_s, _ = _run_script(hung_collector, tmp_path)
    assert exit_s < EXPORT_TIMEOUT_S + BOUND_S
