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
from pathlib import Path

_APP = textwrap.dedent("""
    import sys
    from aegis_probe.probe import ProbeSetup
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
    threading.Thread(target=server.serve_forever, daemon=True).start()
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
