"""Real use of the OpenTelemetry front door: zero-code runs of the core frameworks side by side,
collectors that refuse, hang or fail, the ``OTEL_*`` environment, and instrumentors that stack.

The apps are the built-in demos (AutoGen, CAMEL, MetaGPT, LangGraph) on the local model server;
the collector is a real OTLP/HTTP receiver on 127.0.0.1. ``opentelemetry-instrument`` runs are
subprocesses, few on purpose (each starts the frameworks anew).
"""

from __future__ import annotations

import asyncio
import http.server
import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import aegis_probe
from aegis_probe.capture.adapter import _MISSING, AUTO_PROBES, get_adapter
from aegis_probe.capture.instrumentor import AegisInstrumentor
from aegis_probe.modelserver import ModelServer
from aegis_probe.storage.store import TraceStore

TOOL = Path(sys.executable).parent / "opentelemetry-instrument"
ZEROCODE_APP = Path(__file__).with_name("zerocode_app.py")
KEY = "sk-test-not-a-secret-000000000"
CORE = ("autogen", "camel", "metagpt", "langgraph")
ROOTS = {"autogen": "invoke_workflow RoundRobinGroupChat", "camel": "invoke_workflow Calculator & Customer",
         "metagpt": "invoke_workflow Team", "langgraph": "invoke_workflow arithmetic"}

#: Two runs of each core demo in threads, and two more AutoGen runs as asyncio tasks of one loop.
SIDE_BY_SIDE_APP = textwrap.dedent("""
    import asyncio, sys, threading
    from aegis_probe.demos import autogen, camel, langgraph, metagpt

    URLS = dict(arg.split("=", 1) for arg in sys.argv[1:])
    KEY = "sk-test-not-a-secret-000000000"
    answers = {}

    def run(name, demo, i):
        answers[f"{name}-{i}"] = demo.run_app(demo.build_app(URLS[name], "aegis-scripted", KEY), demo.TASK)

    async def autogen_tasks():
        async def one(i):
            team = autogen.build_app(URLS["autogen"], "aegis-scripted", KEY)
            try:
                answers[f"autogen-task-{i}"] = (await team.run(task=autogen.TASK)).messages[-1].to_text()
            finally:
                await autogen._clients.pop(team).close()
        await asyncio.gather(one(0), one(1))

    threads = [threading.Thread(target=run, args=(name, demo, i)) for name, demo in
               (("camel", camel), ("metagpt", metagpt), ("langgraph", langgraph), ("autogen", autogen)) for i in range(2)]
    threads.append(threading.Thread(target=asyncio.run, args=(autogen_tasks(),)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key in sorted(answers):
        print(key, "->", str(answers[key])[-40:].replace("\\n", " "))
""")

needs_tool = pytest.mark.skipif(not TOOL.exists(), reason="opentelemetry-instrument is not installed (dev extra)")


# -- a real OTLP/HTTP receiver, and collectors in trouble ----------------------------------------------------
class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP (protobuf) trace receiver that keeps every span with its resource; or, with
    ``status``, a collector that answers every export with that HTTP error."""

    def __init__(self, status: int = 200) -> None:
        self.status, self.posts = status, 0
        self.spans: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts += 1
        if self.server.status == 200:
            request = ExportTraceServiceRequest.FromString(body)
            for rs in request.resource_spans:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    self.server.spans += [{
                        "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_id": s.parent_span_id.hex() or None, "scope": ss.scope.name, "resource": resource,
                        "attributes": {a.key: _value(a.value) for a in s.attributes}} for s in ss.spans]
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind in ("string_value", "int_value", "bool_value", "double_value") else str(value)


class Hung:
    """A collector that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def refused_endpoint() -> str:
    with socket.socket() as s:  # bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ModelServer]]:
    """The model server of each core demo whose framework is installed."""
    from aegis_probe.demos import REQUIREMENTS, demo_module

    started = {}
    for name in CORE:
        if importlib.util.find_spec(REQUIREMENTS[name][0]) is not None:
            started[name] = ModelServer(importlib.import_module(demo_module(name)).policy).start()
    yield started
    for server in started.values():
        server.stop()


# -- running an app as a user would -----------------------------------------------------------------------
def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AEGIS_"))}
    env.update(OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
               # the other GenAI instrumentations installed here (OpenInference's AutoGen and LangChain, OTel's openai-v2)
               OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="autogen_agentchat,langchain,openai")
    env.update(extra)
    return env


def _run(argv: list[str], cwd: Path, zero_code: bool, **env: str) -> subprocess.CompletedProcess[str]:
    command = [str(TOOL), sys.executable, *argv] if zero_code else [sys.executable, *argv]
    return subprocess.run(command, env=_clean_env(**env), cwd=cwd, capture_output=True, text=True, timeout=300)


def _lines(text: str) -> Counter:
    """The lines of an app's output, without what differs between two runs (digits: times, thread
    ids; MetaGPT's temporary directory)."""
    return Counter(re.sub(r"aegis-metagpt-\w+", "aegis-metagpt-*", re.sub(r"\d", "", line))
                   for line in text.splitlines() if line.strip())


def _same_output(plain: subprocess.CompletedProcess[str], traced: subprocess.CompletedProcess[str]) -> None:
    assert traced.returncode == plain.returncode == 0, traced.stderr[-3000:]
    assert _lines(traced.stdout) == _lines(plain.stdout)
    assert _lines(traced.stderr) == _lines(plain.stderr), traced.stderr[-3000:]


def _runs(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """aegis-probe's traces (one per run), by trace id."""
    traces = defaultdict(list)
    for span in spans:
        traces[span["trace_id"]].append(span)
    return {t: ss for t, ss in traces.items() if any(s["scope"] == "aegis_probe" for s in ss)}


def _shape(spans: list[dict[str, Any]]) -> Counter:
    by_id = {s["span_id"]: s for s in spans}

    def path(s: dict[str, Any]) -> tuple[str, ...]:
        parent = by_id.get(s["parent_id"])
        return (*path(parent), s["name"]) if parent else (s["name"],)

    return Counter(path(s) for s in spans)


@pytest.mark.autogen
@needs_tool
def test_zero_code_runs_side_by_side_are_whole_separate_traces_and_leave_the_app_unchanged(servers, tmp_path):
    """Four frameworks, ten runs in threads and asyncio tasks, under ``opentelemetry-instrument``
    with OTLP/HTTP: one trace per run, each whole (sent at exit only: the batch delay is longer
    than the app), none parented into another, the service's resource on every span, and the
    app's exit code and output as without instrumentation."""
    if set(servers) != set(CORE):
        pytest.skip(f"needs all of {CORE}; installed: {sorted(servers)}")
    app = tmp_path / "side_by_side.py"
    app.write_text(SIDE_BY_SIDE_APP)
    urls = [f"{name}={server.base_url}" for name, server in servers.items()]
    plain = _run([str(app), *urls], tmp_path, zero_code=False)
    receiver = Receiver()
    try:
        traced = _run([str(app), *urls], tmp_path, zero_code=True, OTEL_TRACES_EXPORTER="otlp",
                      OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                      OTEL_BSP_SCHEDULE_DELAY="600000", OTEL_SERVICE_NAME="shop",
                      OTEL_RESOURCE_ATTRIBUTES="deployment.environment=ci,team.name=qa")
    finally:
        receiver.close()
    _same_output(plain, traced)
    assert plain.stdout.count("126") == 10, plain.stdout

    runs = _runs(receiver.spans)
    roots = [s for spans in runs.values() for s in spans if s["parent_id"] is None]
    assert Counter(r["name"] for r in roots) == Counter({ROOTS["autogen"]: 4, ROOTS["camel"]: 2, ROOTS["metagpt"]: 2,
                                                         ROOTS["langgraph"]: 2})
    assert len(roots) == len(runs) == len({r["attributes"]["aegis.run.id"] for r in roots}), "one trace per run"
    shapes: dict[str, list[Counter]] = defaultdict(list)
    for spans in runs.values():
        ids = {s["span_id"] for s in spans}
        assert all(s["parent_id"] in ids for s in spans if s["parent_id"]), "a span parented outside its run"
        root = next(s for s in spans if s["parent_id"] is None)
        steps = sorted(int(s["attributes"]["aegis.step.index"]) for s in spans if "aegis.step.index" in s["attributes"])
        assert steps == list(range(len(steps))) and len(steps) >= 3, (root["name"], steps)
        shapes[root["name"]].append(_shape(spans))
    for name, same in shapes.items():
        assert all(shape == same[0] for shape in same), f"runs of {name} differ: one lost spans"
    assert all(s["resource"].get("service.name") == "shop" and s["resource"].get("deployment.environment") == "ci"
               and s["resource"].get("team.name") == "qa" for s in receiver.spans)


# -- collectors in trouble, and OTEL_* variants, under zero-code -------------------------------------------
@pytest.fixture(scope="module")
def plain_autogen(servers, tmp_path_factory) -> subprocess.CompletedProcess[str]:
    """One uninstrumented run of tests/zerocode_app.py: the output every zero-code run must keep."""
    if "autogen" not in servers:
        pytest.skip("autogen-agentchat is not installed")
    return _run([str(ZEROCODE_APP), servers["autogen"].base_url], tmp_path_factory.mktemp("plain"), zero_code=False)


@pytest.mark.autogen
@needs_tool
@pytest.mark.parametrize("case", ["refused-grpc", "hung-http", "500-http", "sdk-disabled", "exporter-none",
                                  "bad-capture"])
def test_zero_code_app_finishes_unchanged_whatever_the_collector_or_otel_setting(case, servers, plain_autogen, tmp_path):
    """A collector that refuses (gRPC: UNAVAILABLE), hangs or answers 500 costs the app nothing but
    the exporter's own bounded timeout at exit; its output is unchanged but for the exporter's
    own warnings (at most two lines). ``OTEL_SDK_DISABLED=true`` makes nothing (no store, no export);
    ``OTEL_TRACES_EXPORTER=none`` exports nothing while ``AEGIS_TRACE_DIR`` still stores the run.
    A capture mode OTel does not define is one warning, and no content (OTel's default for it)."""
    live = Receiver()
    collector: Any = {"hung-http": Hung, "500-http": lambda: Receiver(500)}.get(case, lambda: live)()
    endpoint = refused_endpoint() if case == "refused-grpc" else collector.endpoint
    env = dict(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_TIMEOUT="2",
               OTEL_EXPORTER_OTLP_PROTOCOL="grpc" if case.endswith("grpc") else "http/protobuf")
    if case == "sdk-disabled":
        env.update(OTEL_SDK_DISABLED="true")
    if case == "exporter-none":
        env.update(OTEL_TRACES_EXPORTER="none", AEGIS_TRACE_DIR=str(tmp_path / "store"))
    if case == "bad-capture":
        env.update(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="maybe",
                   OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental")
    try:
        traced = _run([str(ZEROCODE_APP), servers["autogen"].base_url], tmp_path, zero_code=True, **env)
    finally:
        live.close()
        if collector is not live:
            collector.close()
    assert traced.returncode == 0, traced.stderr[-3000:]
    assert _lines(traced.stdout) == _lines(plain_autogen.stdout)
    extra = _lines(traced.stderr) - _lines(plain_autogen.stderr)
    if case == "bad-capture":
        assert extra == Counter({"aegis-probe: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT='maybe' is not a "
                                 "valid value; using NO_CONTENT": 1}), traced.stderr[-3000:]
        assert sum(s["name"] == ROOTS["autogen"] for s in live.spans) == 1
        assert not [s for s in live.spans if {"gen_ai.input.messages", "aegis.task"} & set(s["attributes"])]
        return
    # the SDK exporter's own warnings (a retry, the failure), nothing of aegis-probe's
    assert sum(extra.values()) <= 2 and all("export" in line and "aegis" not in line for line in extra), extra
    assert live.spans == [] or case not in ("sdk-disabled", "exporter-none")
    if case == "hung-http":
        assert collector.held, "the exporter never reached the collector"
    if case == "500-http":
        assert collector.posts >= 1
    if case == "sdk-disabled":
        assert list(tmp_path.iterdir()) == [] and traced.stderr.count("aegis") == plain_autogen.stderr.count("aegis")
    if case == "exporter-none":
        (trace_id,) = TraceStore(tmp_path / "store").traces()
        assert {s.name for s in TraceStore(tmp_path / "store").trace(trace_id)} >= {
            ROOTS["autogen"], "invoke_agent planner", "invoke_agent calculator", "invoke_agent reviewer"}


# -- aegis-probe's own provider (in code, no global provider) --------------------------------------------------
@pytest.fixture
def no_global_provider(monkeypatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def _langgraph_run(servers: dict[str, ModelServer], **options: Any) -> aegis_probe.Probe:
    if "langgraph" not in servers:
        pytest.skip("langgraph is not installed")
    from aegis_probe.demos import langgraph as demo

    graph = demo.build_app(servers["langgraph"].base_url, "aegis-scripted", KEY)
    probe = aegis_probe.instrument(graph, **options)
    assert "126" in (demo.run_app(graph, demo.TASK) or "")
    return probe


@pytest.mark.parametrize("value", ["otlp", "none", "console", "console,otlp", "jaeger"])
def test_own_provider_exports_what_otel_traces_exporter_names(value, servers, no_global_provider, tmp_path, capfd,
                                                               caplog):
    """``OTEL_TRACES_EXPORTER`` on aegis-probe's own provider: ``none`` sends nothing to the
    configured endpoint (it used to), ``console`` prints the spans (it printed nothing), ``otlp``
    (the default) sends them with the environment's resource; a name it does not know warns
    once and means the default. The store keeps the run in every case."""
    receiver = Receiver()
    no_global_provider.setenv("OTEL_TRACES_EXPORTER", value)
    no_global_provider.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    no_global_provider.setenv("OTEL_RESOURCE_ATTRIBUTES", "team.name=qa")
    no_global_provider.setenv("OTEL_SERVICE_NAME", f"shop-{value}")  # a provider of its own per case
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        probe = _langgraph_run(servers, store=tmp_path / "store")
    try:
        assert probe.provider.force_flush()
    finally:
        receiver.close()
    printed = capfd.readouterr().out
    names = [s["name"] for s in receiver.spans]
    assert (ROOTS["langgraph"] in names) == (value in ("otlp", "console,otlp", "jaeger")), names
    assert (f'"name": "{ROOTS["langgraph"]}"' in printed) == value.startswith("console"), printed[-2000:]
    assert all(s["resource"].get("team.name") == "qa" and s["resource"]["service.name"] == f"shop-{value}"
               for s in receiver.spans)
    warned = [r.getMessage() for r in caplog.records if "OTEL_TRACES_EXPORTER" in r.getMessage()]
    assert warned == (["aegis-probe: OTEL_TRACES_EXPORTER='jaeger' is not a valid value; using otlp"]
                      if value == "jaeger" else [])
    assert len(probe.store.traces()) == 1  # type: ignore[union-attr]


def test_a_sampled_run_is_whole_or_absent(servers, no_global_provider, tmp_path):
    """``OTEL_TRACES_SAMPLER=traceidratio`` at 0.5 on the own provider: of 24 LangGraph runs some
    are stored and some not, each stored one with every span of an unsampled run."""
    whole = _langgraph_run(servers, store=tmp_path / "all")
    (full,) = whole.store.traces()  # type: ignore[union-attr]
    expected = Counter(s.name for s in whole.store.trace(full))  # type: ignore[union-attr]
    no_global_provider.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    no_global_provider.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    probes = [_langgraph_run(servers, store=tmp_path / "sampled") for _ in range(24)]
    store = probes[0].store
    kept = store.traces()  # type: ignore[union-attr]
    assert 0 < len(kept) < 24, "24 runs at ratio 0.5: all or none kept (p = 2**-23)"
    assert all(Counter(s.name for s in store.trace(t)) == expected for t in kept)  # type: ignore[union-attr]


# -- instrument / uninstrument, alone and beside another instrumentor --------------------------------------------
def _autogen_originals() -> dict[tuple[type, str], Any]:
    from autogen_agentchat.agents import AssistantAgent, BaseChatAgent
    from autogen_agentchat.teams import BaseGroupChat, RoundRobinGroupChat

    return {(cls, name): value for cls in (BaseGroupChat, RoundRobinGroupChat, BaseChatAgent, AssistantAgent)
            for name, value in vars(cls).items() if callable(value) or isinstance(value, (staticmethod, classmethod))}


def _same_objects(now: dict[tuple[type, str], Any], before: dict[tuple[type, str], Any]) -> bool:
    return now.keys() == before.keys() and all(now[k] is before[k] for k in before)  # a wrapt proxy == its original


@pytest.mark.autogen
def test_instrument_uninstrument_repeatedly_and_beside_openinference(servers, tmp_path):
    """Three instrument/uninstrument rounds trace each run once and leave the very originals; with
    OpenInference's AutoGen instrumentor on too, aegis's spans are there once and OpenInference's
    yield inside aegis's runs, suppression hides both, and uninstrumenting in reverse order restores every original."""
    if "autogen" not in servers:
        pytest.skip("autogen-agentchat is not installed")
    spec = importlib.util.spec_from_file_location("zerocode_app", ZEROCODE_APP)
    app = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(app)  # type: ignore[union-attr]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def run() -> Counter:
        exporter.clear()
        assert "126" in asyncio.run(app.run(servers["autogen"].base_url))
        return Counter(s.name for s in exporter.get_finished_spans())

    before = _autogen_originals()
    aegis = AegisInstrumentor()
    alone = []
    for _ in range(3):
        aegis.instrument(tracer_provider=provider)
        alone.append(run())
        aegis.uninstrument()
        assert _same_objects(_autogen_originals(), before) and AUTO_PROBES == {} and run() == Counter()
    assert alone[0][ROOTS["autogen"]] == 1 and alone[0]["invoke_agent calculator"] == 1 and alone.count(alone[0]) == 3

    openinference = pytest.importorskip("openinference.instrumentation.autogen_agentchat")
    other = openinference.AutogenAgentChatInstrumentor()
    other.instrument(tracer_provider=provider)
    theirs = run()
    aegis.instrument(tracer_provider=provider)
    try:
        both = run()
        with suppress_instrumentation():
            assert run() == Counter()
    finally:
        aegis.uninstrument()
        other.uninstrument()
    # aegis's spans once; OpenInference's yield inside aegis's runs (capture/coexist.py): only its
    # outermost span, opened before aegis's run starts, is left.
    extra = both - alone[0]
    assert both & alone[0] == alone[0] and extra <= theirs and sum(extra.values()) <= 1, (both, theirs)
    assert _same_objects(_autogen_originals(), before) and run() == Counter()


IN_CODE = ("import runpy, sys\nfrom aegis_probe import AegisInstrumentor\nAegisInstrumentor().instrument()\n"
           "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")


@pytest.mark.autogen
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_in_code_instrumentor_exits_past_a_hung_collector_with_one_warning(protocol, servers, plain_autogen, tmp_path):
    """``AegisInstrumentor().instrument()`` in code (aegis-probe's own provider) with a collector
    that never answers: the app's output is unchanged, the run is stored, and exit prints the
    exporter's one failure line, not also ``Exporter already shutdown, ignoring call`` (the SDK's
    shutdown at exit came after aegis-probe's own, which gives up on the hung export)."""
    hung = Hung()
    try:
        traced = _run(["-c", IN_CODE, str(ZEROCODE_APP), servers["autogen"].base_url], tmp_path, zero_code=False,
                      OTEL_EXPORTER_OTLP_ENDPOINT=hung.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                      AEGIS_TRACE_DIR=str(tmp_path / "store"))
    finally:
        hung.close()
    assert traced.returncode == 0, traced.stderr[-3000:]
    assert _lines(traced.stdout) == _lines(plain_autogen.stdout)
    extra = _lines(traced.stderr) - _lines(plain_autogen.stderr)
    assert sum(extra.values()) == 1 and "Failed to export" in next(iter(extra)), extra
    assert len(TraceStore(tmp_path / "store").traces()) == 1 and hung.held


def test_own_provider_keeps_the_service_name_of_otel_resource_attributes(servers, no_global_provider, tmp_path):
    """``OTEL_RESOURCE_ATTRIBUTES=service.name=...`` without ``OTEL_SERVICE_NAME`` names the service
    of aegis-probe's own provider's spans (it was overwritten with ``aegis-probe``); the variable
    ``OTEL_SERVICE_NAME`` still wins over it, as the specification says."""
    receiver = Receiver()
    no_global_provider.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    no_global_provider.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=shop%20floor,team.name=qa")
    try:
        first = _langgraph_run(servers, store=tmp_path / "store")
        no_global_provider.setenv("OTEL_SERVICE_NAME", "checkout")
        second = _langgraph_run(servers, store=tmp_path / "store")
        assert first.provider.force_flush() and second.provider.force_flush()
    finally:
        receiver.close()
    services = Counter((s["resource"]["service.name"], s["resource"]["team.name"]) for s in receiver.spans
                       if s["name"] == ROOTS["langgraph"])
    assert services == Counter({("shop floor", "qa"): 1, ("checkout", "qa"): 1})


@pytest.mark.parametrize("framework", ["langgraph", "camel", "metagpt"])
def test_instrument_uninstrument_cycles_restore_every_patch(framework, servers, tmp_path, monkeypatch):
    """Each cycle of ``AegisInstrumentor`` on a LangGraph graph, a CAMEL society or a MetaGPT team
    traces the run once with the same spans, and ``uninstrument()`` puts back the very object
    each patched attribute held (or deletes what was inherited); nothing is traced after."""
    if framework not in servers:
        pytest.skip(f"{framework} is not installed")
    monkeypatch.chdir(tmp_path)  # metagpt writes its workspace into the working directory
    demo = importlib.import_module(f"aegis_probe.demos.{framework}")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def run() -> Counter:
        exporter.clear()
        demo.run_app(demo.build_app(servers[framework].base_url, "aegis-scripted", KEY), demo.TASK)
        return Counter(s.name for s in exporter.get_finished_spans())

    instrumentor, traced = AegisInstrumentor(), []
    for _ in range(2):
        instrumentor.instrument(tracer_provider=provider)
        traced.append(run())
        patched = get_adapter(framework)._patcher.patched()
        instrumentor.uninstrument()
        assert patched and [(o, n) for o, n, saved in patched if vars(o).get(n, _MISSING) is not saved] == []
        assert run() == Counter()
    assert traced[0][ROOTS[framework]] == 1 and traced[1] == traced[0]
