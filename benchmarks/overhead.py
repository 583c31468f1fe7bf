"""Per-step tracing overhead on a 50-step AutoGen team with a zero-latency model client.

Configurations, each timed on a fresh ``RoundRobinGroupChat`` of two ``AssistantAgent``s whose
model client answers instantly in-process (no I/O):

- ``uninstrumented``: the team alone (the baseline);
- ``aegis``: ``aegis_probe.instrument(team)``, content capture on, in-memory exporter;
- ``openinference``: OpenInference's ``AutogenAgentChatInstrumentor`` (it traces OpenAI clients
  only, so it makes no LLM spans here: compare span counts);
- ``aegis (no content)``: the same with ``capture_content=False``;
- ``root span only`` (diagnostic): one SDK span current around the run, nothing patched;
- ``no runtime blocks`` (diagnostic): uninstrumented, with autogen-core's runtime tracing blocks
  and per-message trace context skipped, which aegis does inside its runs (they cost even when
  runtime tracing is disabled); aegis's own cost is measured against this row too;
- the floor of each configuration: the bare cost of creating that configuration's spans (same names, parents
  and attribute values, one context attach each) with the OpenTelemetry SDK.

Configurations are interleaved and repeated; medians are reported. Run: ``python benchmarks/overhead.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import nullcontext
from typing import Any, AsyncGenerator, Mapping, Sequence

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402
from autogen_core.models import (  # noqa: E402
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelCapabilities,
    ModelFamily,
    ModelInfo,
    RequestUsage,
)
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import aegis_probe  # noqa: E402

STEPS = 50
#: The run is CPU-bound in one thread (no I/O), so process CPU time equals wall time on an idle
#: machine and stays stable on a shared one; ``--clock wall`` uses ``perf_counter`` instead.
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


class InstantClient(ChatCompletionClient):
    """A model client that answers at once with a canned ``CreateResult`` (no I/O)."""

    def __init__(self) -> None:
        self._calls = 0

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        self._calls += 1
        return CreateResult(finish_reason="stop", content=f"reply number {self._calls}, all good",
                            usage=RequestUsage(prompt_tokens=10 * len(messages), completion_tokens=5), cached=False)

    async def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> AsyncGenerator[Any, None]:
        yield await self.create(messages, **kwargs)

    async def close(self) -> None:
        return None

    def actual_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    total_usage = actual_usage

    def count_tokens(self, messages: Sequence[LLMMessage], **kwargs: Any) -> int:
        return 0

    def remaining_tokens(self, messages: Sequence[LLMMessage], **kwargs: Any) -> int:
        return 1 << 20

    @property
    def capabilities(self) -> ModelCapabilities:  # type: ignore[override]
        return ModelCapabilities(vision=False, function_calling=True, json_output=False)

    @property
    def model_info(self) -> ModelInfo:
        return ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                         structured_output=False)


def build_team() -> RoundRobinGroupChat:
    client = InstantClient()
    agents = [AssistantAgent(name, model_client=client, system_message=f"You are {name}.") for name in ("alice", "bob")]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(STEPS + 1))


def memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def timed_run(team: RoundRobinGroupChat) -> float:
    start = clock()
    result = await team.run(task="Count together.")
    elapsed = clock() - start
    assert len(result.messages) == STEPS + 1, len(result.messages)
    return elapsed


async def run_uninstrumented() -> tuple[float, tuple[ReadableSpan, ...]]:
    return await timed_run(build_team()), ()


async def run_aegis(capture: bool = True) -> tuple[float, tuple[ReadableSpan, ...]]:
    provider, exporter = memory_provider()
    team = build_team()
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=False, capture_content=capture)
    try:
        elapsed = await timed_run(team)
    finally:
        probe.uninstrument()
    return elapsed, exporter.get_finished_spans()


async def run_aegis_no_content() -> tuple[float, tuple[ReadableSpan, ...]]:
    return await run_aegis(capture=False)


async def run_root_span_only() -> tuple[float, tuple[ReadableSpan, ...]]:
    """Diagnostic: one SDK span current around the run, nothing else patched. autogen's runtime
    then propagates a real trace context with every message, a cost any tracer pays."""
    provider, exporter = memory_provider()
    team = build_team()
    with provider.get_tracer("bench").start_as_current_span("run"):
        elapsed = await timed_run(team)
    return elapsed, exporter.get_finished_spans()


async def run_without_runtime_blocks() -> tuple[float, tuple[ReadableSpan, ...]]:
    """Diagnostic: uninstrumented, but autogen's runtime tracing blocks skipped as aegis does in
    its runs; aegis's own cost is its time minus this one."""
    from autogen_core import _single_threaded_agent_runtime as runtime_module
    from autogen_core._telemetry import EnvelopeMetadata, TraceHelper

    patcher = aegis_probe.Patcher()
    patcher.wrap(TraceHelper, "trace_block", lambda w, i, a, k: nullcontext())
    patcher.wrap(runtime_module, "get_telemetry_envelope_metadata", lambda w, i, a, k: EnvelopeMetadata())
    try:
        return await timed_run(build_team()), ()
    finally:
        patcher.restore()


async def run_openinference() -> tuple[float, tuple[ReadableSpan, ...]]:
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    provider, exporter = memory_provider()
    instrumentor = AutogenAgentChatInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        elapsed = await timed_run(build_team())
    finally:
        instrumentor.uninstrument()
    return elapsed, exporter.get_finished_spans()


def floor_cost(spans: Sequence[ReadableSpan]) -> float:
    """Seconds to create ``spans`` again, bare: same names, parents, attributes, one attach each."""
    provider, _ = memory_provider()
    tracer = provider.get_tracer("floor")
    plan = [(s.name, s.kind, dict(s.attributes or {}), s.context.span_id, s.parent.span_id if s.parent else None)
            for s in sorted(spans, key=lambda s: s.start_time)]
    start = clock()
    made: dict[int, Any] = {}
    for name, kind, attrs, span_id, parent_id in plan:
        parent = made.get(parent_id)
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = tracer.start_span(name, context=ctx, kind=kind, attributes=attrs)
        with trace.use_span(span, end_on_exit=False):
            made[span_id] = span
    for span in reversed(list(made.values())):
        span.end()
    return clock() - start


CONFIGS = {
    "uninstrumented": run_uninstrumented,
    "aegis": run_aegis,
    "aegis (no content)": run_aegis_no_content,
    "openinference": run_openinference,
    "root span only": run_root_span_only,
    "no runtime blocks": run_without_runtime_blocks,
}


async def measure(repeats: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    floors: dict[str, list[float]] = {name: [] for name in CONFIGS}
    counts: dict[str, int] = {}
    for name, run in CONFIGS.items():  # warm-up: imports, caches, first-call costs
        await run()
    for _ in range(repeats):
        for name, run in CONFIGS.items():
            elapsed, spans = await run()
            times[name].append(elapsed)
            floors[name].append(floor_cost(spans) if spans else 0.0)
            counts[name] = len(spans)
    return {name: {"wall": statistics.median(times[name]), "floor": statistics.median(floors[name]),
                   "spans": counts[name]} for name in CONFIGS}


def report(results: Mapping[str, Mapping[str, float]], clock_name: str, repeats: int) -> str:
    base = results["uninstrumented"]["wall"]
    lines = [f"{STEPS}-step RoundRobinGroupChat, zero-latency model client, medians of {repeats} runs, {clock_name} clock",
             f"{'config':<20}{'spans':>7}{'time ms':>10}{'overhead us/step':>18}{'ratio':>8}{'floor us/step':>15}{'overhead/floor':>16}"]
    for name, r in results.items():
        overhead = (r["wall"] - base) / STEPS * 1e6
        floor = r["floor"] / STEPS * 1e6
        ratio = r["wall"] / base
        over_floor = f"{overhead / floor:.2f}" if floor else "-"
        lines.append(f"{name:<20}{int(r['spans']):>7}{r['wall'] * 1e3:>10.1f}{overhead:>18.1f}{ratio:>8.3f}"
                     f"{floor:>15.1f}{over_floor:>16}")
    own = (results["aegis"]["wall"] - results["no runtime blocks"]["wall"]) / STEPS * 1e6
    floor = results["aegis"]["floor"] / STEPS * 1e6
    lines.append(f"aegis own cost vs 'no runtime blocks': {own:.1f} us/step, {own / floor:.2f} x floor")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    print(report(asyncio.run(measure(args.repeats)), args.clock, args.repeats))


if __name__ == "__main__":
    main()
