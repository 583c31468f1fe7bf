"""Living beside other instrumentations (docs/otel.md, "Another GenAI instrumentation"), framework
by framework: each GenAI instrumentation installed in one of the environments, active on the same
tracer and meter providers while aegis-probe runs the framework's demo. Those that yield: one
``invoke_agent`` span per step and one ``chat`` span per model call (aegis's), one token count per
call (OpenLLMetry's CrewAI and LangGraph wrappers, which ignore the suppression key, bypassed in
aegis's runs; uninstrumented in either order); those that cannot be made to yield: what does happen.

The CrewAI, OpenAI Agents SDK, AG2 and Google ADK cases run in the framework's own environment
(``run_in_own_env``); in the main environment only their wrappers run, beside the main
environment's own cases (smolagents, LangGraph, Pydantic AI, Agent Framework).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from own_env import INSIDE, importable, run_in_own_env

import aegis_probe
from aegis_probe.capture import coexist

AEGIS = "aegis_probe"
#: CrewAI's and LiteLLM's opt-outs, for the environments that need them (aegis_probe.demos.crewai's).
QUIET = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false", "CREWAI_DISABLE_VERSION_CHECK": "true",
         "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
#: Set in the process a case that cannot clean up after itself runs in (see its docstring).
ISOLATED = "AEGIS_COEXIST_ISOLATED"
#: Their undo, given the tracer and meter providers: what instruments the other side.
On = Callable[[TracerProvider, MeterProvider], Callable[[], None]]


# -- in the main environment: each framework's own environment runs its cases ---------------------------
@pytest.mark.parametrize("venv,module,keyword", [
    (".venv-crewai", "crewai", "coexist_crewai"), (".venv-openai-agents", "agents", "coexist_openai_agents"),
    (".venv-ag2", "autogen.agentchat", "coexist_ag2"), (".venv-google-adk", "google.adk", "coexist_google_adk")])
def test_in_own_environment(venv, module, keyword, tmp_path):
    if importable(module):
        pytest.skip(INSIDE)
    run_in_own_env(venv, "tests/test_coexist_frameworks.py", keyword, env={**QUIET, "XDG_DATA_HOME": str(tmp_path)})


# -- the check ------------------------------------------------------------------------------------------
def _kind(span: ReadableSpan) -> str | None:
    """``invoke_agent`` or ``chat`` for an agent-step or model-call span of any instrumentation
    (GenAI's operation name, OpenInference's span kind), else None."""
    attrs = span.attributes or {}
    op = attrs.get("gen_ai.operation.name")
    if op in ("invoke_agent", "chat"):
        return str(op)
    return {"AGENT": "invoke_agent", "LLM": "chat"}.get(str(attrs.get("openinference.span.kind")))


def _scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


def _token_points(reader: InMemoryMetricReader) -> dict[str, int]:
    """Recordings of ``gen_ai.client.token.usage`` so far, by instrumentation scope."""
    out: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "gen_ai.client.token.usage":
                    out[sm.scope.name] = out.get(sm.scope.name, 0) + sum(p.count for p in metric.data.data_points)
    return out


@dataclass
class Seen:
    """What the other instrumentation made alone, and what an aegis-instrumented run made beside it."""

    alone: list[ReadableSpan]  #: spans of a run without aegis (the other side is really on)
    spans: list[ReadableSpan]  #: every span that ended during the instrumented run
    trace_id: str  #: the instrumented run's trace
    calls: int  #: model calls the server answered in the instrumented run
    tokens: dict[str, int]  #: token-usage recordings in the instrumented run, by scope
    outside: list[ReadableSpan]  #: spans of a run of an app aegis does not trace, aegis on (``outside``)

    def of(self, kind: str, *, run_only: bool = True) -> list[str]:
        """Scopes of the ``kind`` spans (of the run's trace, or all spans of the run's time)."""
        return [_scope(s) for s in self.spans if _kind(s) == kind
                and (not run_only or format(s.context.trace_id, "032x") == self.trace_id)]

    def assert_yielded(self) -> None:
        """One invoke_agent per step and one chat per model call, aegis's; one token count per call."""
        assert self.of("chat") == [AEGIS] * self.calls and self.calls >= 2
        assert set(self.of("invoke_agent")) == {AEGIS} and len(self.of("invoke_agent")) >= 2
        assert set(self.of("invoke_agent", run_only=False)) | set(self.of("chat", run_only=False)) == {AEGIS}
        assert self.tokens == {AEGIS: 2 * self.calls}  # an input and an output count per call


def _beside(demo: ModuleType, on: On, model_server: Any, *, first: SpanProcessor | None = None,
            outside: bool = False, theirs_off_first: bool = False,
            run_app: Callable[[Any, str], Any] | None = None) -> Seen:
    """Run ``demo`` with the other side on (``on``): alone, then instrumented by aegis-probe; with
    ``first``, a span processor added before the exporter (one that rewrites spans as they end);
    with ``outside``, then an app aegis does not trace, aegis still on. Uninstrumented in the reverse
    order of instrumenting, or the other side first (``theirs_off_first``). ``run_app``: instead of
    the demo's."""
    from aegis_probe.demos.task import EXPECTED

    run = run_app or demo.run_app
    bodies: list[Any] = []
    server = model_server(lambda body: bodies.append(body) or demo.policy(body))
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider, meters = TracerProvider(), MeterProvider(metric_readers=[reader])
    if first is not None:
        provider.add_span_processor(first)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    undo = on(provider, meters)
    try:
        assert EXPECTED in str(run(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), demo.TASK))
        alone = list(exporter.get_finished_spans())
        exporter.clear()
        bodies.clear()
        before = _token_points(reader)
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        probe = aegis_probe.instrument(app, tracer_provider=provider, meter_provider=meters, store=False)
        assert EXPECTED in str(run(app, demo.TASK))
        calls = len(bodies)
        tokens = {k: v - before.get(k, 0) for k, v in _token_points(reader).items() if v != before.get(k, 0)}
        spans = list(exporter.get_finished_spans())
        exporter.clear()
        if outside:
            assert EXPECTED in str(run(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), demo.TASK))
    finally:  # in the reverse order of instrumenting (docs/otel.md), unless asked otherwise
        for off in ((undo, aegis_probe.uninstrument) if theirs_off_first else (aegis_probe.uninstrument, undo)):
            off()
    tops = [s for s in spans if _scope(s) == AEGIS and s.parent is None]
    assert len(tops) == 1  # the run: one trace
    root = tops[-1]  # the run's root ends last
    assert probe is not None
    return Seen(alone, spans, format(root.context.trace_id, "032x"), calls, tokens,
                list(exporter.get_finished_spans()))


def _instrumentor(module: str, cls: str, init: dict[str, Any] | None = None, **kwargs: Any) -> On:
    """An ``opentelemetry-instrumentation`` instrumentor of ``module`` (constructed with ``init``)."""

    def on(provider: TracerProvider, meters: MeterProvider) -> Callable[[], None]:
        instrumentor = getattr(__import__(module, fromlist=[cls]), cls)(**(init or {}))
        instrumentor.instrument(tracer_provider=provider, meter_provider=meters, **kwargs)
        assert any(coexist.active(o) for o in coexist.OTHERS if o.module == module) or module not in {
            o.module for o in coexist.OTHERS}
        return instrumentor.uninstrument

    return on


def _theirs(spans: list[ReadableSpan], module: str) -> list[ReadableSpan]:
    return [s for s in spans if _scope(s).startswith(module)]


# -- CrewAI (.venv-crewai) ------------------------------------------------------------------------------
CREWAI = importable("crewai")
needs_crewai = pytest.mark.skipif(not CREWAI, reason="crewai runs in .venv-crewai")


@needs_crewai
def test_coexist_crewai_openinference_yields(model_server):
    from aegis_probe.demos import crewai as demo

    seen = _beside(demo, _instrumentor("openinference.instrumentation.crewai", "CrewAIInstrumentor"), model_server)
    assert "invoke_agent" in {_kind(s) for s in _theirs(seen.alone, "openinference")}  # (no LLM span: native provider)
    seen.assert_yielded()


def _entries(attributes: list[tuple[Any, str]]) -> list[int]:
    """The ids of the raw ``__dict__`` entries of ``(owner, name)`` attributes (a wrapt proxy compares
    equal to what it wraps)."""
    return [id(vars(owner).get(name)) for owner, name in attributes]


def _watched(module: str, cls: str, attributes: list[tuple[Any, str]], theirs_off_first: bool) -> On:
    """:func:`_instrumentor`, checking that it wraps ``attributes`` and, turned off after aegis, that
    aegis put back exactly its wrappers."""

    def on(provider: TracerProvider, meters: MeterProvider) -> Callable[[], None]:
        undo = _instrumentor(module, cls)(provider, meters)
        theirs = _entries(attributes)
        assert all(type(vars(o)[n]).__name__ == "FunctionWrapper" for o, n in attributes)

        def off() -> None:
            if not theirs_off_first:
                assert _entries(attributes) == theirs
            undo()

        return off

    return on


def _crewai_attributes() -> list[tuple[Any, str]]:
    """What OpenLLMetry's CrewAI instrumentor wraps (0.62.4)."""
    from crewai.agent import Agent
    from crewai.crew import Crew
    from crewai.llm import LLM
    from crewai.task import Task

    return [(Crew, "kickoff"), (Agent, "execute_task"), (Task, "execute_sync"), (LLM, "call")]


@needs_crewai
@pytest.mark.parametrize("theirs_off_first", [False, True])
def test_coexist_crewai_openllmetry_bypassed(model_server, theirs_off_first):
    """OpenLLMetry's CrewAI instrumentor ignores the suppression key: inside aegis's runs its
    wrappers are bypassed (coexist), outside them it works; either order of uninstrumenting
    restores every original, and aegis never puts back a wrapper of an instrumentor turned off."""
    from aegis_probe.demos import crewai as demo

    module = "opentelemetry.instrumentation.crewai"
    attributes = _crewai_attributes()
    originals = _entries(attributes)
    seen = _beside(demo, _watched(module, "CrewAIInstrumentor", attributes, theirs_off_first), model_server,
                   outside=True, theirs_off_first=theirs_off_first)
    assert "invoke_agent" in {_kind(s) for s in _theirs(seen.alone, module)}
    seen.assert_yielded()  # no invoke_agent span and no per-agent token sums of its own in the run
    assert "invoke_agent" in {_kind(s) for s in _theirs(seen.outside, module)}  # on outside aegis's runs
    assert not [s for s in seen.outside if _scope(s) == AEGIS]
    assert _entries(attributes) == originals


@needs_crewai
def test_coexist_crewai_openllmetry_after_aegis_is_warned_about(model_server, caplog):
    """Turned on after aegis-probe's patches, its wrappers sit over aegis's: not bypassed, one warning."""
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor

    from aegis_probe.demos import crewai as demo

    server = model_server(demo.policy)
    originals = _entries(_crewai_attributes())
    provider = TracerProvider()
    try:
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        aegis_probe.instrument(app, tracer_provider=provider, store=False)
        CrewAIInstrumentor().instrument(tracer_provider=provider)
        for _ in range(2):
            assert demo.EXPECTED in str(demo.run_app(app, demo.TASK))
    finally:
        CrewAIInstrumentor().uninstrument()
        aegis_probe.uninstrument()
    warned = [r.getMessage() for r in caplog.records if "instrument aegis-probe last" in r.getMessage()]
    assert len(warned) == 1 and "opentelemetry.instrumentation.crewai" in warned[0]
    assert _entries(_crewai_attributes()) == originals


# -- OpenAI Agents SDK (.venv-openai-agents) ------------------------------------------------------------
AGENTS = importable("agents")
needs_agents = pytest.mark.skipif(not AGENTS, reason="openai-agents runs in .venv-openai-agents")


def _agents_sdk_tracing(on: On) -> On:
    """The SDK's tracing on while the other side is (its processor the only one: nothing is sent to
    OpenAI's backend), off again after."""

    def tracing(provider: TracerProvider, meters: MeterProvider) -> Callable[[], None]:
        from agents import set_trace_processors, set_tracing_disabled

        set_tracing_disabled(False)
        undo = on(provider, meters)

        def off() -> None:
            undo()
            set_trace_processors([])
            set_tracing_disabled(True)

        return off

    return tracing


@needs_agents
def test_coexist_openai_agents_openinference_yields(model_server):
    from aegis_probe.demos import openai_agents as demo

    module = "openinference.instrumentation.openai_agents"
    seen = _beside(demo, _agents_sdk_tracing(_instrumentor(module, "OpenAIAgentsInstrumentor",
                                                           exclusive_processor=True)), model_server)
    assert _theirs(seen.alone, "openinference") and {_kind(s) for s in seen.alone} >= {"invoke_agent", "chat"}
    seen.assert_yielded()


@needs_agents
def test_coexist_openai_agents_openllmetry_yields(model_server):
    from aegis_probe.demos import openai_agents as demo

    module = "opentelemetry.instrumentation.openai_agents"
    seen = _beside(demo, _agents_sdk_tracing(_instrumentor(module, "OpenAIAgentsInstrumentor",
                                                                              {"replace_existing_processors": True})), model_server)
    assert _theirs(seen.alone, module)
    seen.assert_yielded()  # the SDK's tracing is off inside aegis's runs: its trace processor sees nothing


# -- AG2 (.venv-ag2) ------------------------------------------------------------------------------------
@pytest.mark.skipif(not importable("autogen.agentchat"), reason="ag2 runs in .venv-ag2")
def test_coexist_ag2_openinference_yields(model_server):
    from aegis_probe.demos import ag2 as demo

    seen = _beside(demo, _instrumentor("openinference.instrumentation.ag2", "AG2Instrumentor"), model_server)
    assert _theirs(seen.alone, "openinference") and "invoke_agent" in {_kind(s) for s in seen.alone}
    seen.assert_yielded()


# -- Google ADK (.venv-google-adk) ----------------------------------------------------------------------
@pytest.mark.skipif(not importable("google.adk"), reason="google-adk runs in .venv-google-adk")
def test_coexist_google_adk_openinference_yields(model_server):
    """Its spans yield, and the run is one trace: ADK's workflow and node spans, which it sends to
    its own tracer, stand for the current span inside aegis's runs (they made the steps roots)."""
    os.environ.update(QUIET)
    from aegis_probe.demos import google_adk as demo

    seen = _beside(demo, _instrumentor("openinference.instrumentation.google_adk", "GoogleADKInstrumentor"),
                   model_server)
    assert "invoke_agent" in {_kind(s) for s in _theirs(seen.alone, "openinference")}  # (no LLM span: own BaseLlm)
    assert {"invoke_workflow", "invoke_node"} & {s.name.split()[0] for s in _theirs(seen.alone, "openinference")}
    seen.assert_yielded()


# -- the main environment -------------------------------------------------------------------------------
@pytest.mark.skipif(not importable("smolagents"), reason="smolagents is not installed here")
def test_coexist_main_smolagents_openinference_yields(model_server):
    from aegis_probe.demos import smolagents as demo

    seen = _beside(demo, _instrumentor("openinference.instrumentation.smolagents", "SmolagentsInstrumentor"),
                   model_server)
    assert _theirs(seen.alone, "openinference") and {_kind(s) for s in seen.alone} >= {"invoke_agent", "chat"}
    seen.assert_yielded()


@pytest.mark.skipif(not importable("langgraph"), reason="langgraph is not installed here")
@pytest.mark.parametrize("theirs_off_first,asynchronous", [(False, False), (True, True)])
def test_coexist_main_langgraph_openllmetry_bypassed(model_server, theirs_off_first, asynchronous, request):
    """OpenLLMetry's LangChain callback spans honour the key; its LangGraph wrappers (``Pregel.stream``
    and ``astream``, a graph's invocation) do not, and are bypassed inside aegis's runs (coexist);
    outside them it works.

    Its ``uninstrument()`` leaves ``Pregel.stream``/``astream`` and ``BaseCallbackManager.__init__``
    wrapped (0.62.4), which breaks every later LangGraph run of the process: each case runs in a
    process of its own. Turned off first, the ``Pregel`` wrappers it left are taken off by aegis's
    ``uninstrument()`` (never putting back a wrapper of an instrumentor turned off); turned off last,
    they stay. Run with ``invoke`` (its sync ``stream`` wrapper) and ``ainvoke`` (``astream``)."""
    if not os.environ.get(ISOLATED):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"{__file__}::{request.node.name}"],
                              cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=600,
                              env={**os.environ, ISOLATED: "1"})
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
        return
    from langgraph.pregel import Pregel

    from aegis_probe.demos import langgraph as demo

    module = "opentelemetry.instrumentation.langchain"
    attributes = [(Pregel, "stream"), (Pregel, "astream")]
    originals = _entries(attributes)
    loop = asyncio.new_event_loop()  # one for every run: langchain-openai shares its async HTTP client

    def ainvoke(app: Any, task: str) -> str:
        config = {"configurable": {"thread_id": demo.THREAD_ID}, "recursion_limit": 25}
        return str(loop.run_until_complete(app.ainvoke({"messages": [("user", task)]}, config))["messages"][-1].content)

    try:
        seen = _beside(demo, _watched(module, "LangchainInstrumentor", attributes, theirs_off_first), model_server,
                       outside=True, theirs_off_first=theirs_off_first, run_app=ainvoke if asynchronous else None)
    finally:
        loop.close()
    assert {"chat", "invoke_agent"} <= {_kind(s) for s in _theirs(seen.alone, module)}
    seen.assert_yielded()
    graphs = sorted(s.name for s in _theirs(seen.outside, module) if s.name.startswith("invoke_agent "))
    assert graphs == ["invoke_agent arithmetic", "invoke_agent calculator"]  # its Pregel.stream spans: the team's
    # graph, the agent's subgraph
    assert (_entries(attributes) == originals) is theirs_off_first


@pytest.mark.skipif(not importable("pydantic_ai"), reason="pydantic-ai is not installed here")
def test_coexist_main_pydantic_ai_openinference_processor(model_server):
    from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from aegis_probe.demos import pydantic_ai as demo

    def own(provider: TracerProvider, meters: MeterProvider) -> Callable[[], None]:
        Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, meter_provider=meters))
        return lambda: Agent.instrument_all(False)

    seen = _beside(demo, own, model_server, first=OpenInferenceSpanProcessor())
    assert {"invoke_agent", "chat"} <= {_kind(s) for s in seen.alone if _scope(s) == "pydantic-ai"}
    # no span or token count of pydantic-ai's own in the run (aegis silences its tracer and histograms);
    # the processor rewrites aegis's spans
    seen.assert_yielded()
    kinds = {s.name.split()[0]: s.attributes.get("openinference.span.kind") for s in seen.spans}
    assert kinds["chat"] == "LLM" and kinds["invoke_agent"] == "AGENT"


@pytest.mark.skipif(not importable("agent_framework"), reason="agent-framework is not installed here")
def test_coexist_main_agent_framework_openinference_processor(model_server):
    from agent_framework import observability
    from openinference.instrumentation.agent_framework import AgentFrameworkToOpenInferenceProcessor

    from aegis_probe.demos import agent_framework as demo

    def own(provider: TracerProvider, meters: MeterProvider) -> Callable[[], None]:
        original, tracer = observability.get_tracer, provider.get_tracer("agent_framework")
        observability.get_tracer = lambda *args, **kwargs: tracer
        return lambda: setattr(observability, "get_tracer", original)

    seen = _beside(demo, own, model_server, first=AgentFrameworkToOpenInferenceProcessor())
    assert {"invoke_agent", "chat"} <= {_kind(s) for s in seen.alone if _scope(s) == "agent_framework"}
    seen.assert_yielded()  # its tracer is silent inside aegis's runs; the processor rewrites aegis's spans
    kinds = {s.name.split()[0]: s.attributes.get("openinference.span.kind") for s in seen.spans}
    assert kinds["chat"] == "LLM" and kinds["invoke_agent"] == "AGENT"
