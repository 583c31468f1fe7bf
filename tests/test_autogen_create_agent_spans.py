"""autogen-core opens a ``create_agent`` span in every agent's constructor, before any run: on a
global tracer provider (zero-code, Phoenix) each was a one-span trace beside the run's. While
aegis instruments AutoGen none is opened (``AEGIS_AUTOGEN_RUNTIME_SPANS=true`` keeps them), and
an app that is not traced gets them as before."""

from __future__ import annotations

from typing import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import aegis_probe
from aegis_probe.demos import autogen as demo

pytest.importorskip("autogen_agentchat")
MODEL, API_KEY = "aegis-scripted", "not-needed"


@pytest.fixture
def global_exporter(monkeypatch) -> Iterator[InMemorySpanExporter]:
    """The global SDK tracer provider 'the user' set (restored afterwards), and its exporter."""
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(tp)
    yield exp


def _create_agent_spans(exporter: InMemorySpanExporter) -> list[str]:
    return [s.name for s in exporter.get_finished_spans() if s.name.startswith("create_agent")]


def test_agents_built_while_instrumented_make_no_one_span_create_agent_traces(model_server, global_exporter, provider,
                                                                              exporter, monkeypatch):
    monkeypatch.delenv("AEGIS_AUTOGEN_RUNTIME_SPANS", raising=False)
    server = model_server(demo.policy)
    first = demo.build_app(server.base_url, MODEL, API_KEY)
    assert len(_create_agent_spans(global_exporter)) == 3  # not traced yet: autogen-core's own, as ever
    with aegis_probe.instrument(first, tracer_provider=provider):
        global_exporter.clear()
        team = demo.build_app(server.base_url, MODEL, API_KEY)  # as zero-code, inject and blame build their apps
        with aegis_probe.instrument(team, tracer_provider=provider):
            assert demo.run_app(team, demo.TASK)
        assert _create_agent_spans(global_exporter) == []
        run_traces = {s.context.trace_id for s in exporter.get_finished_spans()}
        assert len(run_traces) == 1
        strays = {s.context.trace_id for s in global_exporter.get_finished_spans()} - run_traces
        assert strays == set()
    demo.build_app(server.base_url, MODEL, API_KEY)  # uninstrumented again: the app untouched
    assert len(_create_agent_spans(global_exporter)) == 3


def test_runtime_spans_switch_keeps_create_agent_spans(model_server, global_exporter, provider, monkeypatch):
    monkeypatch.setenv("AEGIS_AUTOGEN_RUNTIME_SPANS", "true")
    server = model_server(demo.policy)
    with aegis_probe.instrument(demo.build_app(server.base_url, MODEL, API_KEY), tracer_provider=provider):
        global_exporter.clear()
        demo.build_app(server.base_url, MODEL, API_KEY)
        assert len(_create_agent_spans(global_exporter)) == 3
