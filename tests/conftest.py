"""Shared fixtures: an in-memory span exporter, a loopback model server, clean instrumentation."""

from __future__ import annotations

import socket
import threading
import urllib.parse
from typing import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aegis_probe
from aegis_probe.modelserver import ModelServer, Policy
from phoenix_server import phoenix  # noqa: F401 - one real Phoenix for the whole session


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    yield exp
    exp.clear()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


@pytest.fixture
def model_server() -> Iterator[Callable[[Policy], ModelServer]]:
    """Factory: ``model_server(policy)`` starts an OpenAI-compatible server on 127.0.0.1."""
    servers: list[ModelServer] = []

    def start(policy: Policy) -> ModelServer:
        server = ModelServer(policy).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        _stop_now(server)


def _stop_now(server: ModelServer) -> None:
    """``server.stop()`` without waiting out the half-second poll of its ``serve_forever`` loop: a
    connection wakes the loop, which then sees the shutdown request (about 0.45 s saved a test)."""
    failed: list[BaseException] = []

    def stop() -> None:
        try:
            server.stop()
        except BaseException as exc:  # raised again below, in the fixture's teardown
            failed.append(exc)

    stopping = threading.Thread(target=stop, name="model-server-stop")
    stopping.start()
    host, port = urllib.parse.urlsplit(server.base_url).netloc.rsplit(":", 1)
    while stopping.is_alive():
        try:
            socket.create_connection((host, int(port)), timeout=0.2).close()
        except OSError:
            pass  # already closed: the loop has ended
        stopping.join(0.02)
    if failed:
        raise failed[0]


@pytest.fixture(autouse=True)
def _clean_instrumentation(tmp_path, monkeypatch) -> Iterator[None]:
    """Every test starts uninstrumented, with its own trace dir, and leaves nothing patched."""
    monkeypatch.setenv("AEGIS_TRACE_DIR", str(tmp_path / "aegis-traces"))
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    yield
    aegis_probe.uninstrument()
