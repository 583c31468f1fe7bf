"""Process exit with OTLP export to a collector that accepts connections and never answers."""

from __future__ import annotations

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
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.getsockname()[1]}",
           "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "64",  # 19 batches queued at exit, 5 s each before
           "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    env.pop("OTEL_EXPORTER_OTLP_TIMEOUT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", None)
    begin = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", _APP, str(tmp_path / "store")], env=env,
                              capture_output=True, text=True, timeout=60)
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert done.returncode == 0 and "spans made" in done.stdout, done.stderr[-2000:]
    assert time.monotonic() - begin < 22  # one 5 s export timeout plus start-up; it was over 30 s
    assert held  # the exporter did reach the collector
