"""Shared fixtures: an in-memory span exporter, a loopback model server, clean instrumentation."""

from __future__ import annotations

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
        server.stop()


@pytest.fixture(autouse=True)
def _clean_instrumentation(tmp_path, monkeypatch) -> Iterator[None]:
    """Every test starts uninstrumented, with its own trace dir, and leaves nothing patched."""
    monkeypatch.setenv("AEGIS_TRACE_DIR", str(tmp_path / "aegis-traces"))
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    yield
    aegis_probe.uninstrument()
