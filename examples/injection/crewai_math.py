"""CrewAI example app for injection campaigns: the demo crew (planner, calculator, reviewer, one
task each, in order) with a scripted model that solves every task of math_tasks.jsonl. Runs in
the crewai environment (.venv-crewai, see README.md); CrewAI's telemetry is off (the demo module
sets its opt-outs).

``python -m aegis_probe inject --app examples/injection/crewai_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.crewai import AGENTS, TERMINATION, TOOL, build_app, run_app, system_of, texts
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, plan_expression

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task; calculator evaluates with the tool and reports; reviewer answers."""
    messages = body.get("messages", [])
    system, seen = texts(body)
    if system.startswith(system_of("planner")):
        expression = plan_expression(seen[-1] if seen else "")
        if expression is None:
            return Reply(content="The task is unclear to me; I cannot make a plan.")
        return Reply(content=f"Plan: the answer is {expression}.")
    if system.startswith(system_of("calculator")):
        if messages and messages[-1].get("role") == "tool":
            return Reply(content=f"The result is {messages[-1].get('content')}.")
        expression = next((e for e in map(expression_in, reversed(seen)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    if system.startswith(system_of("reviewer")):
        result = next((final_number(t) for t in reversed(seen) if final_number(t)), None)
        return Reply(content=f"The calculator's result checks out. {TERMINATION}: {result}")
    return Reply(content="I can only answer as planner, calculator or reviewer.")
