"""``benchmarks/_harness.in_app_floor``: the floor's spans made inside a real app, once per model call.

The in-app floor is what ``benchmarks/overhead.py`` compares the default configuration with, so it
must make exactly the spans of the run it stands for (names, kinds, attributes, parents), each
ended, and spread over the app's model calls as the run made them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import aegis_probe

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _harness import floor_plan, in_app_floor, memory_provider  # noqa: E402
from apps import APPS, MODEL_CALL_HOOKS  # noqa: E402

STEPS = 6


def _shape(spans: Any) -> list[tuple[Any, ...]]:
    """Each span as (name, kind, attributes, parent's name), in start order: ids aside."""
    by_id = {s.context.span_id: s for s in spans}
    return [(s.name, s.kind, dict(s.attributes or {}), by_id[s.parent.span_id].name if s.parent else None)
            for s in sorted(spans, key=lambda s: s.start_time)]


MODULES = {"autogen": "autogen_agentchat", "camel": "camel", "pydantic-ai": "pydantic_ai",
           "agent-framework": "agent_framework", "smolagents": "smolagents"}


@pytest.mark.parametrize("framework", list(MODULES))
def test_the_in_app_floor_makes_the_runs_spans_one_share_per_model_call(framework: str) -> None:
    pytest.importorskip(MODULES[framework])
    app = APPS[framework]()
    provider, exporter = memory_provider()
    target = app.build(STEPS)
    probe = aegis_probe.instrument(target, tracer_provider=provider, store=False)
    try:
        app.play(target, probe, STEPS)
    finally:
        probe.uninstrument()
    spans = exporter.get_finished_spans()
    plan = floor_plan(spans)

    floor_provider, floor_exporter = memory_provider()
    tick = in_app_floor(plan, STEPS, floor_provider)
    made_by_call: list[int] = []

    def counting_tick() -> None:
        tick()
        made_by_call.append(len(floor_exporter.get_finished_spans()))

    MODEL_CALL_HOOKS.append(counting_tick)
    try:
        app.play(app.build(STEPS), None, STEPS)
    finally:
        MODEL_CALL_HOOKS.remove(counting_tick)

    made = floor_exporter.get_finished_spans()
    assert _shape(made) == _shape(spans)  # every span, ended, with its parent
    assert len(made_by_call) == STEPS and made_by_call[-1] == len(spans)
    assert all(a < b for a, b in zip(made_by_call, made_by_call[1:]))  # spans end at every call, not at the end
    with pytest.raises(StopIteration):
        tick()  # one share per model call: a further call has none


def test_a_plan_that_does_not_match_the_model_calls_is_refused() -> None:
    plan = [("chat m", None, {"gen_ai.operation.name": "chat"}, 1, None)]
    with pytest.raises(ValueError, match="1 LLM spans for 2 model calls"):
        in_app_floor(plan, 2)
