"""OpenTelemetry-native behaviour: the instrumentor and its entry point, zero-code runs, OTel's
content-capture and OTLP variables, the global provider, suppression, GenAI attributes and metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
from collections import Counter
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import ADAPTERS, AUTO_PROBES
from aegis_probe.config import ProbeConfig
from aegis_probe.storage.exporting import otlp_exporter
from aegis_probe.capture.instrumentor import ENTRY_POINT, AegisInstrumentor
from aegis_probe.storage.metrics import MetricsSpanProcessor
from aegis_probe.capture.probe import ProbeSetup
from aegis_probe.capture.spans import current_run, start_run
from aegis_probe.storage.store import TraceStore
from toyrun import ToyAdapter, ToyApp, run_script, sample_steps

ROOT = Path(__file__).resolve().parent.parent
APP = Path(__file__).with_name("zerocode_app.py")
CAPTURE_VARS = ("AEGIS_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "OTEL_SEMCONV_STABILITY_OPT_IN")
OTLP_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")


@pytest.fixture
def env(monkeypatch):
    for name in CAPTURE_VARS + OTLP_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def global_tracer_provider(monkeypatch) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A global SDK provider set as the user (or the OTel distro) would; unset again afterwards."""
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(tp)
    yield tp, exp


@pytest.fixture
def instrumentor() -> Iterator[AegisInstrumentor]:
    inst = AegisInstrumentor()
    yield inst
    if inst.is_instrumented_by_opentelemetry:
        inst.uninstrument()


def toy_probe(setup: ProbeSetup) -> aegis_probe.Probe:
    probe = setup.probe(ToyAdapter())
    probe.apps.append(probe.adapter.register(ToyApp(), probe))
    return probe


# -- content capture: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT as OTel defines it ------------
@pytest.mark.parametrize("opt_in,raw,expected,warns", [
    # without the GenAI opt-in: the legacy boolean (OTel's "true"), and the mode names
    (None, "true", True, False), (None, "TRUE", True, False), (None, "false", False, False),
    (None, "SPAN_ONLY", True, False), (None, "span_and_event", True, False),
    (None, "NO_CONTENT", False, False), (None, "event_only", False, False),
    (None, "1", False, True), (None, "bogus", False, True),
    # with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: only the mode names
    ("gen_ai_latest_experimental", "span_only", True, False),
    ("http, gen_ai_latest_experimental", "SPAN_AND_EVENT", True, False),
    ("gen_ai_latest_experimental", "NO_CONTENT", False, False),
    ("gen_ai_latest_experimental", "EVENT_ONLY", False, False),
    ("gen_ai_latest_experimental", "true", False, True),
    # unset or empty: aegis-probe's own default (on)
    (None, None, True, False), ("gen_ai_latest_experimental", "", True, False),
])
def test_otel_capture_variable_value_forms(env, caplog, opt_in, raw, expected, warns):
    if opt_in is not None:
        env.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    if raw is not None:
        env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raw)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        assert ProbeConfig.resolve().capture_content is expected
    assert (raw is not None and any(raw in r.getMessage() for r in caplog.records)) is warns


@pytest.mark.parametrize("aegis,otel,arg,expected", [
    ("false", "SPAN_ONLY", None, False),  # aegis's own variable wins over OTel's
    ("true", "NO_CONTENT", None, True),
    ("0", None, None, False),
    (None, "NO_CONTENT", True, True),  # the argument wins over both
    ("true", "SPAN_ONLY", False, False),
])
def test_capture_precedence(env, aegis, otel, arg, expected):
    if aegis is not None:
        env.setenv("AEGIS_CAPTURE_CONTENT", aegis)
    if otel is not None:
        env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", otel)
    assert ProbeConfig.resolve(capture_content=arg).capture_content is expected


@pytest.mark.parametrize("raw,captured", [("NO_CONTENT", False), ("SPAN_ONLY", True)])
def test_capture_mode_reaches_the_spans(env, provider, exporter, raw, captured):
    env.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raw)
    run_script(toy_probe(ProbeSetup.resolve(tracer_provider=provider)), "secret task", sample_steps())
    spans = exporter.get_finished_spans()
    content = {k for s in spans for k in s.attributes if k in (sc.INPUT_MESSAGES, sc.OUTPUT_MESSAGES, sc.TASK,
                                                                sc.TOOL_CALL_ARGUMENTS, sc.TOOL_CALL_RESULT)}
    assert bool(content) is captured
    assert len(spans) == 11


# -- OTLP: the exporters read OTel's variables; only the protocol choice is aegis's --------------------
def test_otlp_variables_are_the_exporters_own(env):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")  # no protocol guessed from the port
    exp = otlp_exporter(ProbeConfig.resolve())
    assert type(exp).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
    assert exp._endpoint == "http://collector:4317/v1/traces"
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom/path")
    assert otlp_exporter(ProbeConfig.resolve())._endpoint == "http://t:4318/custom/path"
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")  # the signal's own protocol wins
    grpc = otlp_exporter(ProbeConfig.resolve())
    assert type(grpc).__module__.startswith("opentelemetry.exporter.otlp.proto.grpc")
    grpc.shutdown()
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2")  # OTel's timeout variable beats aegis's default
    grpc = otlp_exporter(ProbeConfig.resolve())
    assert grpc._timeout == 2
    grpc.shutdown()


def test_bad_otlp_protocol_warns_and_falls_back(env, caplog, tmp_path):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "bogus")
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        setup = ProbeSetup.resolve(store=tmp_path / "store")  # aegis's own provider, with OTLP export
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='bogus'" in caplog.text and "http/protobuf" in caplog.text
    assert setup.config.otlp_protocol == "http/protobuf"
    processors = setup.provider._active_span_processor._span_processors
    exporters = [p._batch_processor._exporter for p in processors if isinstance(p, BatchSpanProcessor)]
    assert [type(e).__module__.split(".")[4] for e in exporters] == ["http"]
    try:
        run = run_script(toy_probe(setup), "t", sample_steps())  # the app runs; the store has the run
        assert setup.store.trace(run.trace_id)
    finally:
        setup.provider.shutdown()  # nothing listens on port 9: no retries left for the end of the session


@pytest.mark.parametrize("name,value", [("OTEL_EXPORTER_OTLP_COMPRESSION", "bogus"), ("OTEL_EXPORTER_OTLP_TIMEOUT", "abc")])
def test_a_value_the_exporter_refuses_turns_otlp_off_with_a_warning(env, caplog, tmp_path, name, value):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")  # the grpc exporter raises on both values
    env.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        setup = ProbeSetup.resolve(store=tmp_path / f"store-{value}")
    assert "OTLP export is off" in caplog.text and value in caplog.text
    run = run_script(toy_probe(setup), "t", sample_steps())
    assert len(setup.store.trace(run.trace_id)) == 11


# -- provider precedence --------------------------------------------------------------------------------
def test_global_provider_is_used_and_store_added_only_on_request(env, global_tracer_provider, tmp_path, provider,
                                                                  exporter):
    tp, global_exporter = global_tracer_provider
    setup = ProbeSetup.resolve()
    assert setup.provider is tp and setup.store is None
    run_script(toy_probe(setup), "t", sample_steps())
    assert len(global_exporter.get_finished_spans()) == 11

    stored = ProbeSetup.resolve(store=tmp_path / "store")
    assert stored.provider is tp and stored.store is not None
    run = run_script(toy_probe(stored), "t", sample_steps())
    assert len(stored.store.trace(run.trace_id)) == 11

    passed = ProbeSetup.resolve(tracer_provider=provider)  # an argument beats the global provider
    assert passed.provider is provider
    run_script(toy_probe(passed), "t", sample_steps())
    assert len(exporter.get_finished_spans()) == 11


def test_without_global_provider_aegis_makes_its_own_with_the_store(env, tmp_path):
    setup = ProbeSetup.resolve(store=tmp_path / "own")
    assert not isinstance(setup.provider, trace.ProxyTracerProvider) and setup.store is not None
    run = run_script(toy_probe(setup), "t", sample_steps())
    assert len(setup.store.trace(run.trace_id)) == 11


# -- suppression ---------------------------------------------------------------------------------------
def test_suppressed_context_hides_the_run(provider):
    probe = toy_probe(ProbeSetup.resolve(tracer_provider=provider))
    run = start_run(probe, "toy", framework="toy", task=None)
    token = run.attach()
    try:
        assert current_run() is run
        with suppress_instrumentation():
            assert current_run() is None
            assert ToyAdapter().run_probe(ToyApp()) is None
    finally:
        run.detach(token)
        run.finish()


class ReentrantExporter(SpanExporter):
    """An exporter that itself runs an instrumented app (as a reporting hook might)."""

    def __init__(self, app_call: Any) -> None:
        self.app_call, self.answers = app_call, []

    def export(self, spans):  # type: ignore[no-untyped-def]
        if not self.answers:
            self.answers.append(self.app_call())
        return SpanExportResult.SUCCESS


@pytest.mark.autogen
def test_sdk_export_thread_opens_no_trace(instrumentor, model_server, provider, exporter):
    """Trace-every-app mode: an app run from the SDK's export thread is not traced (no feedback loop)."""
    pytest.importorskip("autogen_agentchat")
    zerocode = _load_app()
    server = model_server(_demo_policy())

    def run_other_team() -> str:
        return asyncio.run(zerocode.run(server.base_url))

    reentrant = ReentrantExporter(run_other_team)
    provider.add_span_processor(BatchSpanProcessor(reentrant))
    instrumentor.instrument(tracer_provider=provider)
    assert "126" in asyncio.run(zerocode.run(server.base_url))
    assert provider.force_flush(60_000)
    assert reentrant.answers and "126" in reentrant.answers[0], "the exporter's own app run worked"
    roots = [s for s in exporter.get_finished_spans() if s.parent is None and s.instrumentation_scope.name == "aegis_probe"]
    assert [r.name for r in roots] == ["invoke_workflow RoundRobinGroupChat"], "only the app's own run is traced"


# -- the instrumentor ------------------------------------------------------------------------------------
def test_entry_point_loads_the_instrumentor():
    eps = {ep.name: ep for ep in entry_points(group="opentelemetry_instrumentor")}
    assert eps[ENTRY_POINT].load() is AegisInstrumentor
    assert ENTRY_POINT != "autogen_agentchat"  # openinference's AutoGen instrumentor's name
    assert AegisInstrumentor().instrumentation_dependencies() == tuple(e.requires for e in ADAPTERS.values())


def _load_app() -> Any:
    pytest.importorskip("autogen_agentchat")
    spec = importlib.util.spec_from_file_location("zerocode_app", APP)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _demo_policy() -> Any:
    from aegis_probe.demos import autogen as demo

    return demo.policy


def _run_instrumented(zerocode: Any, base_url: str, provider: TracerProvider) -> aegis_probe.Probe:
    """One run of the app's team under ``aegis_probe.instrument(team)``."""

    async def main() -> aegis_probe.Probe:
        team, client = zerocode.build_team(base_url)
        probe = aegis_probe.instrument(team, tracer_provider=provider)
        try:
            await team.run(task=zerocode.TASK)
        finally:
            await client.close()
        return probe

    return asyncio.run(main())


def _tree(spans: list[dict[str, Any]]) -> Counter:
    """The aegis trace's spans as (names from the root down, sorted attribute keys), counted."""
    by_id = {s["span_id"]: s for s in spans}

    def path(s: dict[str, Any]) -> tuple[str, ...]:
        parent = by_id.get(s["parent_id"])
        return (*path(parent), s["name"]) if parent else (s["name"],)

    return Counter((path(s), tuple(sorted(s["attributes"]))) for s in spans)


def _sdk_spans(spans: Any) -> list[dict[str, Any]]:
    return [{"name": s.name, "span_id": s.context.span_id, "trace_id": s.context.trace_id,
             "parent_id": s.parent.span_id if s.parent else None, "attributes": dict(s.attributes)} for s in spans]


def _console_spans(text: str) -> list[dict[str, Any]]:
    """Spans the SDK's ConsoleSpanExporter printed (one JSON object per span)."""
    decoder, spans, i = json.JSONDecoder(), [], text.find("{")
    while 0 <= i < len(text):
        obj, end = decoder.raw_decode(text, i)
        if isinstance(obj, dict) and "context" in obj:
            spans.append({"name": obj["name"], "span_id": int(obj["context"]["span_id"], 16),
                          "trace_id": int(obj["context"]["trace_id"], 16),
                          "parent_id": int(obj["parent_id"], 16) if obj.get("parent_id") else None,
                          "attributes": obj.get("attributes") or {}})
        i = text.find("{", end)
    return spans


def _aegis_trace(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    roots = [s for s in spans if s["name"] == "invoke_workflow RoundRobinGroupChat"]
    assert len(roots) == 1, [s["name"] for s in spans]
    return [s for s in spans if s["trace_id"] == roots[0]["trace_id"]]


@pytest.mark.autogen
def test_instrumentor_traces_unregistered_apps_like_instrument(instrumentor, model_server, provider, exporter):
    zerocode = _load_app()
    server = model_server(_demo_policy())
    _run_instrumented(zerocode, server.base_url, provider).uninstrument()
    registered = _aegis_trace(_sdk_spans(exporter.get_finished_spans()))
    exporter.clear()

    from autogen_agentchat.agents import BaseChatAgent
    from autogen_agentchat.teams import BaseGroupChat, RoundRobinGroupChat

    patched = [(BaseGroupChat, "run_stream"), (RoundRobinGroupChat, "run_stream"), (BaseChatAgent, "run"),
               (BaseChatAgent, "run_stream")]
    originals = {key: vars(key[0]).get(key[1]) for key in patched}
    instrumentor.instrument(tracer_provider=provider)
    assert instrumentor.probe("autogen") is AUTO_PROBES["autogen"]
    assert "126" in asyncio.run(zerocode.run(server.base_url))  # built after instrument(), never registered
    auto = _aegis_trace(_sdk_spans(exporter.get_finished_spans()))
    assert _tree(auto) == _tree(registered)
    steps = sorted((s["attributes"][sc.STEP_INDEX], s["attributes"][sc.AGENT_NAME]) for s in auto if sc.STEP_INDEX in s["attributes"])
    assert steps == [(0, "planner"), (1, "calculator"), (2, "reviewer")]

    _run_instrumented(zerocode, server.base_url, provider).uninstrument()  # a registered probe leaves...
    exporter.clear()
    asyncio.run(zerocode.run(server.base_url))  # ...and trace-every-app mode keeps its patches
    assert len(_aegis_trace(_sdk_spans(exporter.get_finished_spans()))) == len(auto)

    instrumentor.uninstrument()
    assert AUTO_PROBES == {} and {key: vars(key[0]).get(key[1]) for key in patched} == originals
    exporter.clear()
    asyncio.run(zerocode.run(server.base_url))
    assert exporter.get_finished_spans() == (), "nothing is traced after uninstrument()"


@pytest.mark.autogen
def test_unsupported_or_missing_framework_is_a_warning(instrumentor, monkeypatch, caplog, model_server, provider,
                                                       exporter):
    pytest.importorskip("autogen_agentchat")
    monkeypatch.setitem(ADAPTERS, "autogen", dataclasses.replace(ADAPTERS["autogen"], requires="autogen-agentchat >= 99"))
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        instrumentor.instrument(tracer_provider=provider)
    assert "autogen-agentchat 0.7.5 is installed but aegis-probe supports autogen-agentchat >= 99" in caplog.text
    zerocode = _load_app()
    assert "126" in asyncio.run(zerocode.run(model_server(_demo_policy()).base_url))
    assert exporter.get_finished_spans() == () and "autogen" not in AUTO_PROBES
    instrumentor.uninstrument()

    caplog.clear()
    for name, entry in list(ADAPTERS.items()):
        monkeypatch.setitem(ADAPTERS, name, dataclasses.replace(entry, requires=f"aegis-missing-{name} >= 1"))
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        instrumentor.instrument(tracer_provider=provider)
    assert "nothing is traced" in caplog.text and AUTO_PROBES == {}


@pytest.mark.autogen
@pytest.mark.skipif(shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent)) is None,
                    reason="opentelemetry-instrumentation is not installed (dev extra)")
def test_zero_code_run_has_the_span_tree_of_instrument(model_server, provider, exporter, tmp_path):
    """`opentelemetry-instrument python app.py` (console exporter): the app never imports aegis_probe."""
    assert "import aegis_probe" not in APP.read_text() and "from aegis_probe" not in APP.read_text()
    zerocode = _load_app()
    server = model_server(_demo_policy())
    _run_instrumented(zerocode, server.base_url, provider)
    registered = _aegis_trace(_sdk_spans(exporter.get_finished_spans()))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AEGIS_"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
               OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="autogen_agentchat", OTEL_SERVICE_NAME="zero-code")
    tool = str(Path(sys.executable).parent / "opentelemetry-instrument")

    def zero_code_run(**extra: str) -> list[dict[str, Any]]:
        out = subprocess.run([tool, sys.executable, str(APP), server.base_url], env={**env, **extra}, cwd=tmp_path,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "126" in out.stdout.split("ANSWER:", 1)[1]
        return _aegis_trace(_console_spans(out.stdout))

    zero_code = zero_code_run()
    assert _tree(zero_code) == _tree(registered)
    assert list(tmp_path.iterdir()) == [], "on the distro's global provider the store is added only on request"
    stored = zero_code_run(AEGIS_TRACE_DIR=str(tmp_path / "store"))  # the request, without arguments
    trace_id = format(stored[0]["trace_id"], "032x")
    assert len(TraceStore(tmp_path / "store").trace(trace_id)) == len(stored)


# -- GenAI attributes and metrics ------------------------------------------------------------------------
@pytest.mark.autogen
def test_request_response_and_server_attributes(model_server, provider, exporter):
    zerocode = _load_app()
    server = model_server(_demo_policy())
    _run_instrumented(zerocode, server.base_url, provider)
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.parent is None)
    run_id = root.attributes[sc.RUN_ID]
    assert root.attributes[sc.WORKFLOW_NAME] == "RoundRobinGroupChat"
    assert {s.attributes.get(sc.CONVERSATION_ID) for s in spans} == {run_id}
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    port = int(server.base_url.split(":")[2].split("/")[0])
    for chat in chats:
        assert chat.attributes[sc.REQUEST_TEMPERATURE] == 0.2 and chat.attributes[sc.REQUEST_SEED] == 7
        assert (chat.attributes[sc.SERVER_ADDRESS], chat.attributes[sc.SERVER_PORT]) == ("127.0.0.1", port)
        assert chat.attributes[sc.PROVIDER] == "openai"
    (tool,) = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert tool.attributes[sc.TOOL_TYPE] == "function"
    assert tool.attributes[sc.TOOL_DESCRIPTION] == "Evaluate an arithmetic expression."


def test_provider_detected_from_class_and_endpoint():
    assert sc.provider_name("https://my-res.openai.azure.com/openai", "openai") == "azure.ai.openai"
    assert sc.provider_name("https://api.deepseek.com/v1", "openai") == "deepseek"
    assert sc.provider_name("http://127.0.0.1:8000/v1", "openai") == "openai"
    autogen = pytest.importorskip("aegis_probe.adapters.autogen")
    from autogen_ext.models.openai import OpenAIChatCompletionClient
    from autogen_ext.models.replay import ReplayChatCompletionClient

    client = OpenAIChatCompletionClient(model="deepseek-chat", base_url="https://api.groq.com/openai/v1", api_key="k",
                                        model_info={"vision": False, "function_calling": True, "json_output": False,
                                                    "family": "unknown", "structured_output": False})
    codec = autogen.AutogenCodec(autogen.provider_of(type(client)))
    attrs = codec.request_attributes(client, ([],), {"extra_create_args": {"top_p": 0.5}})
    assert attrs[sc.PROVIDER] == "groq" and attrs[sc.REQUEST_TOP_P] == 0.5
    assert attrs[sc.SERVER_ADDRESS] == "api.groq.com" and attrs[sc.SERVER_PORT] == 443
    assert autogen.provider_of(ReplayChatCompletionClient) == "replay"  # a custom value, not the framework


def test_genai_metrics_from_a_run(provider):
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    setup = ProbeSetup.resolve(tracer_provider=provider, meter_provider=meters)
    ProbeSetup.resolve(tracer_provider=provider, meter_provider=meters)  # a second probe: no double counting
    run_script(toy_probe(setup), "t", sample_steps())
    points: dict[str, list[Any]] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = list(metric.data.data_points)
    durations = points["gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations) == 4  # one per chat call
    assert durations[0].attributes[sc.OPERATION] == "chat" and durations[0].attributes[sc.PROVIDER] == "toy"
    tokens = {p.attributes[sc.TOKEN_TYPE]: (p.count, p.sum) for p in points["gen_ai.client.token.usage"]}
    assert tokens == {"input": (4, 11 + 20 + 25 + 30), "output": (4, 3 + 7 + 9 + 2)}
    steps = {p.attributes[sc.AGENT_NAME]: p.value for p in points["aegis.agent.steps"]}
    assert steps == {"planner": 1, "coder": 2, "critic": 1}


@pytest.mark.parametrize("framework", ["camel", "metagpt"])
def test_instrumentor_traces_every_framework_like_instrument(framework, instrumentor, model_server, provider, exporter,
                                                             tmp_path, monkeypatch):
    """A CAMEL society and a MetaGPT company, never registered, traced as ``instrument(app)`` traces them."""
    pytest.importorskip(framework)
    monkeypatch.chdir(tmp_path)  # metagpt writes its workspace into the working directory
    demo = importlib.import_module(f"aegis_probe.demos.{framework}")
    server = model_server(demo.policy)

    def run(register: bool) -> list[dict[str, Any]]:
        app = demo.build_app(server.base_url, "aegis-scripted", "sk-test-not-a-secret-000000000")
        probe = aegis_probe.instrument(app, tracer_provider=provider) if register else None
        demo.run_app(app, demo.TASK)
        if probe is not None:
            probe.uninstrument()
        spans = _sdk_spans(exporter.get_finished_spans())
        exporter.clear()
        return spans

    registered = run(register=True)
    (root,) = [s for s in registered if s["parent_id"] is None]
    instrumentor.instrument(tracer_provider=provider)
    auto = run(register=False)
    auto_roots = [s for s in auto if s["parent_id"] is None and s["name"] == root["name"]]
    assert len(auto_roots) == 1, sorted(s["name"] for s in auto if s["parent_id"] is None)
    in_trace = [s for s in auto if s["trace_id"] == auto_roots[0]["trace_id"]]
    assert _tree(in_trace) == _tree([s for s in registered if s["trace_id"] == root["trace_id"]])


def test_global_meter_provider_gets_the_metrics(provider, monkeypatch):
    from opentelemetry import metrics
    from opentelemetry.metrics import _internal as metrics_internal

    reader = InMemoryMetricReader()
    monkeypatch.setattr(metrics_internal, "_METER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(metrics_internal, "_METER_PROVIDER", None)
    ProbeSetup.resolve(tracer_provider=provider)  # no meter provider given nor global: no metrics recorded
    assert not any(isinstance(p, MetricsSpanProcessor) for p in provider._active_span_processor._span_processors)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    run_script(toy_probe(ProbeSetup.resolve(tracer_provider=provider)), "t", sample_steps())
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for s in rm.scope_metrics for m in s.metrics}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= names
