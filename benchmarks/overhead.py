"""Per-step tracing overhead on all eleven frameworks, beside the peer instrumentors: one table.

For each framework (apps in ``apps.py``: zero-latency models in process, 50 agent steps, each
configuration on a fresh app), interleaved in every repeat:

- ``uninstrumented``: the app alone (the baseline);
- ``spans only``: ``instrument(app, tracer_provider=p, store=False)``, content on, ``p`` an SDK
  provider with an in-memory exporter (its spans are what the floors make);
- ``default``: ``instrument(app)`` as a user starts: aegis's own provider with the embedded
  trace store (its replay recording), content on; timed until the trace is written (the writer
  thread's CPU counted);
- ``in-app floor``: the uninstrumented app making the spans of the repeat's ``spans only`` run
  *inside* it with the bare OpenTelemetry SDK, the next share at each model call
  (``_harness.floor_in_app``); its cost is (in-app floor - uninstrumented);
- every peer instrumentor installed for the framework (:data:`PEERS`), content on, exporting to
  memory: OpenInference's, OpenLLMetry's (Traceloop), OpenTelemetry's official GenAI ones, and a
  framework's own OpenTelemetry spans where it has them (``own OTel``: Pydantic AI, Agent Framework).

The measure is process CPU time (all threads) per agent step. ``x in-app`` = (configuration -
uninstrumented) / (in-app floor - uninstrumented), per repeat, median [p25-p75]; the target for
``default`` is at most 1.5 and below every peer. ``x floor`` (reference) divides by the tight-loop
floor instead (``_harness.floor_cost``: the same spans created back to back).

Frameworks that need an environment of their own (the Agents SDK, CrewAI, AG2, Google ADK) are measured by
this script run again with ``.venv-<framework>/bin/python`` (``--json``), and their rows merged.
Run: ``python benchmarks/overhead.py [--repeats N] [--framework F]``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import aegis_probe
from aegis_probe.demos import REQUIREMENTS
from _harness import Config, Result, elapsed, floor_in_app, memory_provider, parse_args, quartiles, start
from apps import APPS, App

STEPS = 50
ROOT = Path(__file__).resolve().parents[1]
_STORE_DIR = tempfile.mkdtemp(prefix="aegis-bench-")
atexit.register(shutil.rmtree, _STORE_DIR, ignore_errors=True)


# -- peers: each instruments with a provider and returns its undo --------------------------------------
def _openinference(module: str, cls: str, **kwargs: Any) -> Callable[[Any], Callable[[], None]]:
    def on(provider: Any) -> Callable[[], None]:
        instrumentor = getattr(__import__(module, fromlist=[cls]), cls)()
        instrumentor.instrument(tracer_provider=provider, **kwargs)
        return instrumentor.uninstrument

    return on


def _agents_sdk_tracing(peer: Callable[[Any], Callable[[], None]]) -> Callable[[Any], Callable[[], None]]:
    """An Agents SDK peer reads the SDK's own trace events: tracing on while it is (its processor
    the only one, so nothing is sent to OpenAI's backend), off again after."""

    def on(provider: Any) -> Callable[[], None]:
        from agents import set_trace_processors, set_tracing_disabled

        set_tracing_disabled(False)
        undo = peer(provider)

        def off() -> None:
            undo()
            set_trace_processors([])
            set_tracing_disabled(True)

        return off

    return on


def _openllmetry_agents(provider: Any) -> Callable[[], None]:
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    instrumentor = OpenAIAgentsInstrumentor(replace_existing_processors=True)
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


def _pydantic_ai_own(processor: str | None) -> Callable[[Any], Callable[[], None]]:
    """Pydantic AI's own OTel instrumentation (``Agent.instrument_all``, content on) into the provider,
    with ``processor`` (``module:Class``, a span processor that rewrites its spans) added first."""

    def on(provider: Any) -> Callable[[], None]:
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings

        if processor is not None:
            module, cls = processor.split(":")
            provider.add_span_processor(getattr(__import__(module, fromlist=[cls]), cls)())
        Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=True))
        return lambda: Agent.instrument_all(False)

    return on


def _agent_framework_own(processor: str | None) -> Callable[[Any], Callable[[], None]]:
    """Agent Framework's own spans (on by default, through ``observability.get_tracer``, the global
    provider's) into the provider, sensitive data (content) on; ``processor`` as above."""

    def on(provider: Any) -> Callable[[], None]:
        from agent_framework import observability

        if processor is not None:
            module, cls = processor.split(":")
            provider.add_span_processor(getattr(__import__(module, fromlist=[cls]), cls)())
        settings, original = observability.OBSERVABILITY_SETTINGS, observability.get_tracer
        sensitive = settings.enable_sensitive_data
        tracer = provider.get_tracer("agent_framework")
        observability.get_tracer = lambda *args, **kwargs: tracer  # type: ignore[assignment]
        settings.enable_sensitive_data = True

        def off() -> None:
            observability.get_tracer = original  # type: ignore[assignment]
            settings.enable_sensitive_data = sensitive

        return off

    return on


#: framework -> peer name -> (module that must be importable, instrument-with-provider returning its undo).
PEERS: dict[str, dict[str, tuple[str, Callable[[Any], Callable[[], None]]]]] = {
    "autogen": {"OpenInference": ("openinference.instrumentation.autogen_agentchat", _openinference(
        "openinference.instrumentation.autogen_agentchat", "AutogenAgentChatInstrumentor"))},
    "langgraph": {
        "OpenInference": ("openinference.instrumentation.langchain",
                          _openinference("openinference.instrumentation.langchain", "LangChainInstrumentor")),
        "OpenLLMetry": ("opentelemetry.instrumentation.langchain",
                        _openinference("opentelemetry.instrumentation.langchain", "LangchainInstrumentor")),
    },
    "openai-agents": {
        "OpenInference": ("openinference.instrumentation.openai_agents", _agents_sdk_tracing(_openinference(
            "openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor", exclusive_processor=True))),
        "OpenLLMetry": ("opentelemetry.instrumentation.openai_agents", _agents_sdk_tracing(_openllmetry_agents)),
    },
    "crewai": {
        "OpenInference": ("openinference.instrumentation.crewai",
                          _openinference("openinference.instrumentation.crewai", "CrewAIInstrumentor")),
        "OpenLLMetry": ("opentelemetry.instrumentation.crewai",
                        _openinference("opentelemetry.instrumentation.crewai", "CrewAIInstrumentor")),
    },
    "ag2": {"OpenInference": ("openinference.instrumentation.ag2",
                              _openinference("openinference.instrumentation.ag2", "AG2Instrumentor"))},
    # OpenInference's Pydantic AI and Agent Framework packages are span processors rewriting the
    # framework's own spans: measured as the framework's own instrumentation plus the processor.
    "pydantic-ai": {
        "own OTel": ("pydantic_ai", _pydantic_ai_own(None)),
        "OpenInference": ("openinference.instrumentation.pydantic_ai", _pydantic_ai_own(
            "openinference.instrumentation.pydantic_ai:OpenInferenceSpanProcessor")),
    },
    "agent-framework": {
        "own OTel": ("agent_framework", _agent_framework_own(None)),
        "OpenInference": ("openinference.instrumentation.agent_framework", _agent_framework_own(
            "openinference.instrumentation.agent_framework:AgentFrameworkToOpenInferenceProcessor")),
    },
    "smolagents": {"OpenInference": ("openinference.instrumentation.smolagents", _openinference(
        "openinference.instrumentation.smolagents", "SmolagentsInstrumentor"))},
    "google-adk": {"OpenInference": ("openinference.instrumentation.google_adk", _openinference(
        "openinference.instrumentation.google_adk", "GoogleADKInstrumentor"))},
}
#: Peers that exist for a framework but are not measured here, and why.
NOT_MEASURED = {
    "langgraph": "OTel's official LangChain instrumentation: not published on PyPI (the name is OpenLLMetry's)",
    "openai-agents": "OTel's official opentelemetry-instrumentation-openai-agents-v2 0.1.0: installs into the same "
                     "module as OpenLLMetry's (opentelemetry.instrumentation.openai_agents), so not beside it",
}


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def configs(app: App, steps: int = STEPS,
            clock: tuple[Callable[[], Any], Callable[[Any], Any]] = (start, elapsed)) -> dict[str, Config]:
    """The configurations of one app (names as in the module docstring), each measured between
    ``clock``'s two calls (``start()``, ``elapsed(start())``: instructions.py counts instead)."""
    start, elapsed = clock

    def uninstrumented() -> Result:
        target = app.build(steps)
        begin = start()
        app.play(target, None, steps)
        return elapsed(begin), ()

    last_spans: list[Any] = []

    def spans_only() -> Result:
        provider, exporter = memory_provider()
        target = app.build(steps)
        probe = aegis_probe.instrument(target, tracer_provider=provider, store=False)
        try:
            begin = start()
            app.play(target, probe, steps)
            times = elapsed(begin)
        finally:
            probe.uninstrument()
        last_spans[:] = exporter.get_finished_spans()
        return times, last_spans

    def in_app() -> Result:
        with floor_in_app(last_spans, steps):
            return uninstrumented()

    def default() -> Result:
        target = app.build(steps)
        probe = aegis_probe.instrument(target, store=_STORE_DIR)
        try:
            begin = start()
            app.play(target, probe, steps)
            assert probe.store.flush()
            times = elapsed(begin)
        finally:
            probe.uninstrument()
        return times, ()

    def peer(on: Callable[[Any], Callable[[], None]]) -> Result:
        provider, exporter = memory_provider()
        target = app.build(steps)
        undo = on(provider)
        try:
            begin = start()
            app.play(target, None, steps)
            times = elapsed(begin)
        finally:
            undo()
        spans = exporter.get_finished_spans()
        assert spans, "the peer made no span"
        return times, ()

    out: dict[str, Config] = {"uninstrumented": uninstrumented, "spans only": spans_only, "default": default,
                              "in-app floor": in_app}  # after spans only, whose spans it makes
    for name, (module, on) in PEERS.get(app.name, {}).items():
        if _importable(module):
            out[name] = lambda on=on: peer(on)  # type: ignore[misc]
    return out


def row(app: App, repeats: int) -> dict[str, Any]:
    """One framework's figures: per-step microseconds and ratios per repeat (JSON-able)."""
    from _harness import measure

    r = measure(configs(app), repeats)
    base = r["uninstrumented"]["cpu"]
    in_app = [t - b for t, b in zip(r["in-app floor"]["cpu"], base)]
    floors = r["spans only"]["floor"]
    names = [n for n in r if n not in ("uninstrumented", "in-app floor")]
    return {
        "framework": app.name, "repeats": repeats, "spans": r["spans only"]["spans"],
        "base_us": statistics.median(base) / STEPS * 1e6,
        "in_app_us": statistics.median(in_app) / STEPS * 1e6,
        "floor_us": statistics.median(floors) / STEPS * 1e6,
        "x_in_app": {n: [(t - b) / f for t, b, f in zip(r[n]["cpu"], base, in_app)] for n in names},
        "x_floor": {n: [(t - b) / f for t, b, f in zip(r[n]["cpu"], base, floors)] for n in names},
        "not_measured": NOT_MEASURED.get(app.name),
    }


def _in_own_env(framework: str, repeats: int) -> dict[str, Any] | None:
    """The row of ``framework`` measured by this script in ``.venv-<framework>``, or None."""
    python = ROOT / f".venv-{framework}" / "bin" / "python"
    if not python.exists():
        print(f"skipped {framework}: neither installed here nor in .venv-{framework}", file=sys.stderr)
        return None
    proc = subprocess.run([str(python), __file__, "--json", "--framework", framework, "--repeats", str(repeats)],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "0"})
    if proc.returncode != 0:
        print(f"{framework} failed in .venv-{framework}:\n{proc.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])[0]


def _cell(values: list[float]) -> str:
    q1, q2, q3 = quartiles(values)
    return f"{q2:.2f} [{q1:.2f}-{q3:.2f}]"


def table(rows: list[dict[str, Any]]) -> str:
    """The one table: per framework, base and floors per step, aegis and each peer x in-app floor."""
    lines = [f"Process CPU per agent step, {STEPS} steps, zero-latency in-process models, interleaved repeats; "
             "x in-app = (config - uninstrumented) / (in-app floor - uninstrumented) per repeat, median [p25-p75]",
             f"{'framework':<14}{'rep':>4}{'base us':>9}{'in-app floor us':>16}{'floor us':>9}{'spans':>6}"
             f"{'default x in-app':>22}{'spans only x in-app':>22}{'default x floor':>20}  peers x in-app"]
    for r in rows:
        x = r["x_in_app"]
        peers = "; ".join(f"{n} {_cell(v)}" for n, v in x.items() if n not in ("default", "spans only")) or "none"
        lines.append(f"{r['framework']:<14}{r['repeats']:>4}{r['base_us']:>9.0f}{r['in_app_us']:>16.1f}{r['floor_us']:>9.1f}"
                     f"{r['spans']:>6}{_cell(x['default']):>22}{_cell(x['spans only']):>22}"
                     f"{_cell(r['x_floor']['default']):>20}  {peers}")
    notes = [f"{r['framework']}: not measured: {r['not_measured']}" for r in rows if r["not_measured"]]
    return "\n".join(lines + notes)


def main() -> None:
    json_out = "--json" in sys.argv
    if json_out:
        sys.argv.remove("--json")
    args = parse_args(__doc__.splitlines()[0], frameworks=tuple(APPS))
    rows = []
    for name in args.framework:
        if _importable(REQUIREMENTS[name][0]) or json_out:
            rows.append(row(APPS[name](), args.repeats))
        elif (own := _in_own_env(name, args.repeats)) is not None:
            rows.append(own)
    if json_out:
        print(json.dumps(rows))
    else:
        print(table(rows))


if __name__ == "__main__":
    main()
