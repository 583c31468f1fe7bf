"""A real Arize Phoenix (an OTLP receiver and trace UI) for the tests: the session fixture ``phoenix``,
registered once by conftest.py so that every test module shares one server (started once, on free
ports, from ``.venv-phoenix``: ``scripts/start-phoenix.sh --install-only`` creates it)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
PHOENIX = ROOT / ".venv-phoenix" / "bin" / "phoenix"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, None


class Phoenix:
    def __init__(self, http_port: int, grpc_port: int, log: Path) -> None:
        self.base = f"http://127.0.0.1:{http_port}"
        self.grpc = f"http://127.0.0.1:{grpc_port}"
        self.log = log

    def endpoint(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.base

    def spans(self, project: str, count: int, timeout: float = 20.0) -> list[dict]:
        """The project's spans once ``count`` have landed (404 until the first one does)."""
        deadline = time.monotonic() + timeout
        data: list[dict] = []
        while time.monotonic() < deadline:
            status, body = get_json(f"{self.base}/v1/projects/{project}/spans?limit=1000")
            if status == 200:
                data = body["data"]  # type: ignore[index]
                if len(data) >= count:
                    return data
            time.sleep(0.2)
        raise AssertionError(f"Phoenix holds {len(data)} of {count} spans for {project} after {timeout}s")


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory) -> Iterator[Phoenix]:
    if not PHOENIX.exists():
        pytest.skip("Arize Phoenix not installed: run scripts/start-phoenix.sh --install-only (creates .venv-phoenix)")
    work = tmp_path_factory.mktemp("phoenix")
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(http_port), PHOENIX_GRPC_PORT=str(grpc_port),
               PHOENIX_WORKING_DIR=str(work), PHOENIX_TELEMETRY_ENABLED="false")
    server = Phoenix(http_port, grpc_port, work / "phoenix.log")
    with open(server.log, "wb") as log:
        proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while get_json_ok(f"{server.base}/healthz") is False:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = server.log.read_text(errors="replace")[-3000:]
                pytest.fail(f"Phoenix did not become healthy (exit code {proc.poll()}):\n{tail}")
            time.sleep(0.1)
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def get_json_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
