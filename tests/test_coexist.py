"""Living beside other instrumentations: a framework's own entry point (so
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` turns aegis-probe off for one framework), the tracer's
``schema_url``, and, with OpenInference's or OTel's own GenAI instrumentation of the same framework
active, one ``invoke_agent``/``chat`` span and one token count per step and call (the other yields
inside aegis's runs; outside them it works as before)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import ADAPTERS
from aegis_probe.capture.instrumentor import ENTRY_POINT, FRAMEWORK_INSTRUMENTORS, AegisInstrumentor, entry_point
from aegis_probe.demos import autogen as demo
from aegis_probe.storage.store import TraceStore

AEGIS_SCOPE = "aegis_probe"


def _scopes(spans: tuple[ReadableSpan, ...], op: str) -> list[str]:
    """The instrumentation scope of each span of GenAI operation ``op`` (or OpenInference kind)."""
    out = []
    for span in spans:
        attrs = span.attributes or {}
        if attrs.get(sc.OPERATION) == op or attrs.get("openinference.span.kind") == {"chat": "LLM",
                                                                                     "invoke_agent": "AGENT"}[op]:
            out.append(span.instrumentation_scope.name if span.instrumentation_scope else "")
    return out


def _run_demo(server_url: str, **options) -> str:
    app = demo.build_app(server_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, **options)
    assert "126" in demo.run_app(app, demo.TASK)
    assert probe.last_trace_id
    return probe.last_trace_id


# -- entry points ------------------------------------------------------------------------------------
def test_every_framework_has_its_entry_point_and_the_all_frameworks_one_stays():
    eps = {ep.name: ep.value for ep in entry_points(group="opentelemetry_instrumentor") if ep.name.startswith(ENTRY_POINT)}
    assert eps[ENTRY_POINT] == "aegis_probe.capture.instrumentor:AegisInstrumentor"
    assert set(FRAMEWORK_INSTRUMENTORS) == set(ADAPTERS)
    for name, cls in FRAMEWORK_INSTRUMENTORS.items():
        assert eps.get(entry_point(name)) == f"aegis_probe.capture.instrumentor:{cls.__name__}", (
            f"a new adapter needs its entry point: {entry_point(name)} = "
            f'"aegis_probe.capture.instrumentor:{cls.__name__}" in pyproject.toml (then pip install --no-deps -e .)')
        assert cls() is cls() and cls() is not AegisInstrumentor()  # a singleton of its own
        assert list(cls().instrumentation_dependencies()) == [ADAPTERS[name].requires]


def _load_as_opentelemetry_instrument_does(**kwargs) -> list[AegisInstrumentor]:
    """aegis's entry points, those ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` lists left out, instrumented."""
    import os

    disabled = {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}
    loaded = []
    for ep in entry_points(group="opentelemetry_instrumentor"):
        if ep.name.startswith(ENTRY_POINT) and ep.name not in disabled:
            instrumentor = ep.load()()
            instrumentor.instrument(**kwargs)
            loaded.append(instrumentor)
    return loaded


@pytest.fixture
def uninstrument_all() -> Iterator[None]:
    yield
    for cls in (AegisInstrumentor, *FRAMEWORK_INSTRUMENTORS.values()):
        cls().uninstrument()


@pytest.mark.parametrize("disabled,traced", [("", True), ("aegis_probe_autogen", False), ("aegis_probe", False),
                                             ("aegis_probe_camel,aegis_probe_langgraph", True)])
def test_disabling_one_frameworks_entry_point_turns_it_off(disabled, traced, monkeypatch, model_server, tmp_path,
                                                           uninstrument_all):
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", disabled)
    server = model_server(demo.policy)
    _load_as_opentelemetry_instrument_does(store=tmp_path / "store")
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    assert "126" in demo.run_app(app, demo.TASK)
    probe = AegisInstrumentor().probe("autogen")
    assert (probe is not None) is traced
    if traced:
        probe.flush()
        traces = TraceStore(tmp_path / "store").traces()
        assert len(traces) == 1  # both entry points of AutoGen loaded: traced once
        [spans] = traces.values()
        assert sum(1 for r in spans if r.parent_span_id is None) == 1


def test_the_tracer_has_the_semconv_schema_url(model_server, provider, exporter):
    from opentelemetry.semconv.schemas import Schemas

    _run_demo(model_server(demo.policy).base_url, tracer_provider=provider)
    scopes = {s.instrumentation_scope for s in exporter.get_finished_spans()
              if s.instrumentation_scope and s.instrumentation_scope.name == AEGIS_SCOPE}
    assert scopes and {s.schema_url for s in scopes} == {list(Schemas)[-1].value} == {sc.SCHEMA_URL}


# -- beside OpenInference's AutoGen instrumentor ------------------------------------------------------
def test_openinference_autogen_yields_inside_aegis_runs(model_server, provider, exporter):
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    server = model_server(demo.policy)
    AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)
    try:
        # Without aegis the other instrumentation is really on: its agent and model-call spans ...
        plain = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        assert "126" in demo.run_app(plain, demo.TASK)
        theirs = exporter.get_finished_spans()
        assert _scopes(theirs, "invoke_agent") and _scopes(theirs, "chat")
        assert AEGIS_SCOPE not in _scopes(theirs, "chat")
        exporter.clear()
        # ... with aegis, one span per step and per model call: aegis's.
        trace_id = _run_demo(server.base_url, tracer_provider=provider)
    finally:  # in the reverse order of instrumenting: each restores what it found (docs/otel.md)
        aegis_probe.uninstrument()
        AutogenAgentChatInstrumentor().uninstrument()
    spans = exporter.get_finished_spans()
    run = tuple(s for s in spans if format(s.context.trace_id, "032x") == trace_id)
    assert set(_scopes(run, "invoke_agent")) == {AEGIS_SCOPE} and len(_scopes(run, "invoke_agent")) >= 3
    assert set(_scopes(run, "chat")) == {AEGIS_SCOPE}
    assert not [s for s in spans if s.instrumentation_scope and "openinference" in s.instrumentation_scope.name
                and format(s.context.trace_id, "032x") == trace_id]


# -- beside OTel's own OpenAI instrumentation (openai-v2): spans and token metrics ---------------------
def _token_points(reader: InMemoryMetricReader) -> dict[str, int]:
    """Data points of ``gen_ai.client.token.usage`` (count of recordings) by instrumentation scope."""
    out: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "gen_ai.client.token.usage":
                    out[sm.scope.name] = out.get(sm.scope.name, 0) + sum(p.count for p in metric.data.data_points)
    return out


def test_opentelemetry_openai_v2_yields_inside_aegis_runs(model_server, provider, exporter):
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    server = model_server(demo.policy)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    OpenAIInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)
    try:
        plain = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        assert "126" in demo.run_app(plain, demo.TASK)
        theirs = _token_points(reader)
        assert _scopes(exporter.get_finished_spans(), "chat") and sum(theirs.values()) > 0  # it is on
        exporter.clear()
        trace_id = _run_demo(server.base_url, tracer_provider=provider, meter_provider=meters)
    finally:
        aegis_probe.uninstrument()
        OpenAIInstrumentor().uninstrument()
    run = tuple(s for s in exporter.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id)
    chats = _scopes(run, "chat")
    assert chats and set(chats) == {AEGIS_SCOPE}
    after = _token_points(reader)
    # One duration and one input/output token count per call: openai-v2's (aegis leaves them to it).
    assert {k: v - theirs.get(k, 0) for k, v in after.items() if v != theirs.get(k, 0)} == {
        "opentelemetry.instrumentation.openai_v2": 2 * len(chats)}


# -- beside OpenInference's LangChain instrumentor (LangGraph) ----------------------------------------
def test_openinference_langchain_yields_inside_aegis_langgraph_runs(model_server, provider, exporter):
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from aegis_probe.demos import langgraph as lg

    server = model_server(lg.policy)
    LangChainInstrumentor().instrument(tracer_provider=provider)
    try:
        plain = lg.build_app(server.base_url, "aegis-scripted", "sk-test")
        assert lg.EXPECTED in lg.run_app(plain, lg.TASK)
        assert [s for s in exporter.get_finished_spans() if "openinference" in s.instrumentation_scope.name]
        exporter.clear()
        app = lg.build_app(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, tracer_provider=provider)
        assert lg.EXPECTED in lg.run_app(app, lg.TASK)
    finally:
        aegis_probe.uninstrument()
        LangChainInstrumentor().uninstrument()
    spans = exporter.get_finished_spans()
    run = tuple(s for s in spans if format(s.context.trace_id, "032x") == probe.last_trace_id)
    assert set(_scopes(run, "invoke_agent")) == {AEGIS_SCOPE} and set(_scopes(run, "chat")) == {AEGIS_SCOPE}
    assert not [s for s in run if "openinference" in s.instrumentation_scope.name]
