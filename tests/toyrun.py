"""A framework-free app for core tests: a toy adapter, a real Probe, and scripted runs.

``run_script`` drives the core span scopes (``start_run``/``start_step``/``start_llm``/
``start_tool``) exactly as an adapter does, so store, OTLP and trajectory tests exercise the real
span path without a framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher
from aegis_probe.config import ProbeConfig
from aegis_probe.storage.exporting import default_provider
from aegis_probe.capture.probe import Judge, Probe
from aegis_probe.capture.spans import RunScope, start_llm, start_run, start_step, start_tool
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore


class ToyApp:
    """Stands in for a team: a name and its agents."""

    def __init__(self, name: str = "toy-team", agents: tuple[str, ...] = ("planner", "coder", "critic")) -> None:
        self.name, self.agents = name, agents


class ToyAdapter(Adapter):
    """A user-written adapter for :class:`ToyApp` (no patches: the script calls the scopes)."""

    name = "toy"
    instrumentation_dependencies = ()

    def detect(self, app: Any) -> bool:
        return isinstance(app, ToyApp)

    def register(self, app: ToyApp, probe: Probe) -> AppInfo:
        self.registry.add(app, probe)
        return AppInfo(app.name, lone_agent=False, agents=app.agents)

    def _instrument(self, patcher: Patcher) -> None:
        return None


def make_probe(
    provider: TracerProvider,
    store: TraceStore | None = None,
    *,
    capture_content: bool = True,
    judge: Judge | None = None,
    redact: Any = None,
    extra: SpanProcessor | None = None,
) -> Probe:
    """A real :class:`Probe` on ``provider``, writing to ``store`` through a StoreSpanProcessor."""
    processor = None
    if store is not None:
        processor = StoreSpanProcessor(store)
        provider.add_span_processor(processor)
    if extra is not None:
        provider.add_span_processor(extra)
    config = ProbeConfig.resolve(capture_content=capture_content, redact=redact)
    probe = Probe(ToyAdapter(), config, provider.get_tracer("aegis_probe"), store, provider, judge)
    probe.apps.append(probe.adapter.register(ToyApp(), probe))
    return probe


def default_probe(config: ProbeConfig, store: TraceStore) -> Probe:
    """A probe on the provider ``instrument()`` builds by default: the store plus batched OTLP."""
    provider = default_provider(config, store, None)
    probe = Probe(ToyAdapter(), config, provider.get_tracer("aegis_probe"), store, provider, None)
    probe.apps.append(probe.adapter.register(ToyApp(), probe))
    return probe


@dataclass
class ToolSpec:
    name: str
    arguments: dict[str, Any]
    result: str
    error: bool = False


@dataclass
class StepSpec:
    """One agent step: its input, its LLM calls' usage, its tool calls and its output text."""

    agent: str
    input: str
    output: str
    usage: list[tuple[int, int]] = field(default_factory=list)  # (input, output) tokens per LLM call
    tools: list[ToolSpec] = field(default_factory=list)


def run_script(
    probe: Probe, task: str, steps: list[StepSpec], *, app: str = "toy-team", answer: str | None = None,
    outcome: bool | None = None,
) -> RunScope:
    """One run of the toy app, as an adapter would trace it; ``outcome`` is reported mid-run."""
    run = start_run(probe, app, framework="toy", task=task)
    token = run.attach()
    try:
        for spec in steps:
            step = start_step(probe, spec.agent, run=run, role="assistant",
                              input_messages=[{"role": "user", "content": spec.input}])
            step_token = step.attach()
            try:
                for i, (tokens_in, tokens_out) in enumerate(spec.usage):
                    llm = start_llm(probe, "toy-model", provider="toy", agent=spec.agent,
                                    call_index=run.next_call_index(spec.agent),
                                    input_messages=[{"role": "user", "content": spec.input}])
                    llm.finish([{"role": "assistant", "content": f"{spec.output} #{i}"}],
                               input_tokens=tokens_in, output_tokens=tokens_out, response_model="toy-model-1")
                for tool in spec.tools:
                    scope = start_tool(probe, tool.name, call_id=f"call-{tool.name}", arguments=tool.arguments)
                    scope.finish(tool.result, is_error=tool.error)
            finally:
                step.detach(step_token)
            step.finish([{"role": "assistant", "content": spec.output, "name": spec.agent}])
        if outcome is not None:
            probe.set_outcome(outcome, answer=answer)
    finally:
        run.detach(token)
    run.answer = answer
    run.finish()
    return run


def sample_steps(tag: str = "") -> list[StepSpec]:
    """Three agents, one revisited, tool calls (one failing) and LLM usage."""
    return [
        StepSpec("planner", f"task{tag}", f"plan{tag}", usage=[(11, 3)]),
        StepSpec("coder", f"plan{tag}", f"code{tag}", usage=[(20, 7), (25, 9)],
                 tools=[ToolSpec("calc", {"expr": "6*7"}, "42"), ToolSpec("search", {"q": tag}, "boom", error=True)]),
        StepSpec("critic", f"code{tag}", f"lgtm{tag}"),
        StepSpec("coder", f"lgtm{tag}", f"done{tag}", usage=[(30, 2)]),
    ]
