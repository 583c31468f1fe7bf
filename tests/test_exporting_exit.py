"""Process exit with OTLP export to a collector that accepts connections and never answers."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from pathlib import Path

_APP = textwrap.dedent("""
    import sys
    from aegis_probe.capture.probe import ProbeSetup
    tracer = ProbeSetup.resolve(store=sys.argv[1]).provider.get_tracer("t")
    for i in range(1200):
        tracer.start_span(f"s{i}").end()
    print("spans made", flush=True)
""")


def _run_app(endpoint: str, store: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64",  # 19 batches queued at exit
           "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    env.pop("OTEL_EXPORTER_OTLP_TIMEOUT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", None)
    return subprocess.run([sys.executable, "-c", _APP, str(store)], env=env, capture_output=True, text=True, timeout=60)


class _Collector(http.server.BaseHTTPRequestHandler):
    """Answers every export at once."""

    posts: list[int] = []

    def do_POST(self) -> None:
        self.posts.append(len(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_exit_with_a_live_collector_sends_everything_quietly(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        done = _run_app(f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "store")
    finally:
        server.shutdown()
    assert done.returncode == 0 and "spans made" in done.stdout, done.stderr[-2000:]
    assert "shutdown" not in done.stderr and "Failed to export" not in done.stderr, done.stderr[-2000:]
    assert len(_Collector.posts) >= 1200 // 64  # every batch went out


def test_exit_waits_about_one_export_timeout_not_one_per_batch(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []  # accepted and never answered

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    begin = time.monotonic()
    try:
        done = _run_app(f"http://127.0.0.1:{server.getsockname()[1]}", tmp_path / "store")
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert done.returncode == 0 and "spans made" in done.stdout, done.stderr[-2000:]
    assert time.monotonic() - begin < 22  # one 5 s export timeout plus start-up; it was over 30 s
    assert held  # the exporter did reach the collector


_CHILDREN_APP = textwrap.dedent("""
    import multiprocessing, sys
    from aegis_probe.capture.probe import ProbeSetup

    def work(store, i):
        tracer = ProbeSetup.resolve(store=store).provider.get_tracer("t")
        for j in range(3):
            tracer.start_span(f"child-{i}-{j}").end()

    if __name__ == "__main__":
        store, method, made_in = sys.argv[1:]
        if made_in == "parent":  # the children inherit the provider, its queue and its exporter
            ProbeSetup.resolve(store=store).provider.get_tracer("t").start_span("parent").end()
        ctx = multiprocessing.get_context(method)
        children = [ctx.Process(target=work, args=(store, i)) for i in range(3)]
        for child in children:
            child.start()
        for child in children:
            child.join(30)
        print("exit codes", [c.exitcode for c in children], flush=True)
""")


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP protobuf receiver: keeps the name of every span it is sent."""

    names: list[str] = []

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        body = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.names.extend(s.name for rs in body.resource_spans for ss in rs.scope_spans for s in ss.spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.mark.parametrize(("method", "made_in"), [("fork", "parent"), ("fork", "child"), ("forkserver", "child")])
def test_spans_of_multiprocessing_children_are_exported(tmp_path: Path, method: str, made_in: str) -> None:
    """A multiprocessing child ends with os._exit: no atexit handler sends what its batch
    processor still holds (5 s schedule delay), so the children's spans never reached the collector."""
    _Receiver.names = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    script = tmp_path / "children_app.py"
    script.write_text(_CHILDREN_APP)
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}
    try:
        done = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), method, made_in], env=env,
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        server.shutdown()
    assert done.returncode == 0 and "exit codes [0, 0, 0]" in done.stdout, done.stderr[-2000:]
    children = sorted(n for n in _Receiver.names if n.startswith("child-"))
    assert children == sorted(f"child-{i}-{j}" for i in range(3) for j in range(3)), _Receiver.names
    assert _Receiver.names.count("parent") == (made_in == "parent")
