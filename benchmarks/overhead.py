"""Per-step tracing overhead on a 50-step AutoGen team with a zero-latency model client.

Configurations, each timed on a fresh ``RoundRobinGroupChat`` of two ``AssistantAgent``s whose
model client answers instantly in-process (no I/O):

- ``uninstrumented``: the team alone (the baseline);
- ``aegis``: ``aegis_probe.instrument(team)``, content capture on, in-memory exporter;
- ``openinference``: OpenInference's ``AutogenAgentChatInstrumentor`` (it traces OpenAI clients
  only, so it makes no LLM spans here: compare span counts);
- ``aegis (no content)``: the same with ``capture_content=False``;
- ``aegis + store``: ``aegis`` plus the embedded trace store (the default when no provider is
  given), which encodes and appends the whole trace on the app thread when the run ends;
- ``aegis, not sampled`` (diagnostic): ``aegis`` with a sampler that records nothing, so what is
  left is aegis's own work (hooks, content capture) without the SDK's cost of recording spans;
- ``root span only`` (diagnostic): one SDK span current around the run, nothing patched;
- ``no runtime blocks`` (diagnostic): uninstrumented, with autogen-core's runtime tracing blocks
  and per-message trace context skipped, which aegis does inside its runs (they cost even when
  runtime tracing is disabled); aegis's own cost is measured against this row too;
- the floor of each configuration: the bare cost of creating that configuration's spans (same names, parents
  and attribute values, one context attach each) with the OpenTelemetry SDK.

Configurations are interleaved and repeated; medians are reported (see ``_harness``). Run:
``python benchmarks/overhead.py``; CAMEL and MetaGPT: ``benchmarks/overhead_adapters.py``.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
from contextlib import nullcontext
from typing import Any, AsyncGenerator, Awaitable, Callable, Sequence

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

import aegis_probe  # noqa: E402
from _harness import Config, Result, measure, memory_provider, now, parse_args, table  # noqa: E402

STEPS = 50
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


async def timed_run(team: RoundRobinGroupChat) -> float:
    start = now()
    result = await team.run(task="Count together.")
    elapsed = now() - start
    assert len(result.messages) == STEPS + 1, len(result.messages)
    return elapsed


async def run_uninstrumented() -> Result:
    return await timed_run(build_team()), ()


async def run_aegis(capture: bool = True, store: Any = False, sampled: bool = True) -> Result:
    provider, exporter = memory_provider(sampled)
    team = build_team()
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=store, capture_content=capture)
    try:
        elapsed = await timed_run(team)
    finally:
        probe.uninstrument()
    return elapsed, exporter.get_finished_spans()


async def run_aegis_no_content() -> Result:
    return await run_aegis(capture=False)


_STORE_DIR = tempfile.mkdtemp(prefix="aegis-bench-")
atexit.register(shutil.rmtree, _STORE_DIR, ignore_errors=True)


async def run_aegis_store() -> Result:
    return await run_aegis(store=_STORE_DIR)


async def run_aegis_not_sampled() -> Result:
    return await run_aegis(sampled=False)


async def run_root_span_only() -> Result:
    """Diagnostic: one SDK span current around the run, nothing else patched. autogen's runtime
    then propagates a real trace context with every message, a cost any tracer pays."""
    provider, exporter = memory_provider()
    team = build_team()
    with provider.get_tracer("bench").start_as_current_span("run"):
        elapsed = await timed_run(team)
    return elapsed, exporter.get_finished_spans()


async def run_without_runtime_blocks() -> Result:
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


async def run_openinference() -> Result:
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    provider, exporter = memory_provider()
    instrumentor = AutogenAgentChatInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        elapsed = await timed_run(build_team())
    finally:
        instrumentor.uninstrument()
    return elapsed, exporter.get_finished_spans()


def _sync(run: Callable[[], Awaitable[Result]]) -> Config:
    return lambda: asyncio.run(run())


CONFIGS = {
    "uninstrumented": _sync(run_uninstrumented),
    "aegis": _sync(run_aegis),
    "aegis (no content)": _sync(run_aegis_no_content),
    "aegis + store": _sync(run_aegis_store),
    "aegis, not sampled": _sync(run_aegis_not_sampled),
    "openinference": _sync(run_openinference),
    "root span only": _sync(run_root_span_only),
    "no runtime blocks": _sync(run_without_runtime_blocks),
}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    results = measure(CONFIGS, args.repeats)
    title = (f"AutoGen: {STEPS}-step RoundRobinGroupChat, zero-latency model client, "
             f"medians of {args.repeats} runs, {args.clock} clock")
    print(table(title, results, STEPS))
    print("against 'no runtime blocks' (aegis skips autogen-core's runtime tracing blocks in its runs):")
    floor = results["aegis"]["floor"] / STEPS * 1e6
    for name in ("aegis", "aegis (no content)", "aegis + store", "aegis, not sampled"):
        own = (results[name]["time"] - results["no runtime blocks"]["time"]) / STEPS * 1e6
        print(f"  {name:<20} own cost {own:7.1f} us/step = {own / floor:5.2f} x aegis floor")


if __name__ == "__main__":
    main()
