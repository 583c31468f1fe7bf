"""smolagents example app for injection campaigns: the demo app (the planner hands the arithmetic
to its managed calculator agent; the calculator evaluates with its calculate tool) with a scripted
model that solves every task of math_tasks.jsonl.

``python -m aegis_probe inject --app examples/injection/smolagents_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.smolagents import AGENTS, SYSTEM, TERMINATION, TOOL, WORKER, build_app, observation, run_app
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, message_text, plan_expression

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task and asks the calculator; calculator evaluates and reports; planner answers."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages[1:] if m.get("role") == "user"]
    seen = observation(messages)
    if SYSTEM["planner"] in system:
        if seen is not None:
            return Reply(tool_calls=[("final_answer", {"answer": f"{TERMINATION}: {final_number(seen)}"})])
        expression = plan_expression(texts[0] if texts else "")
        if expression is None:
            return Reply(tool_calls=[("final_answer", {"answer": "The task is unclear to me; I cannot make a plan."})])
        return Reply(tool_calls=[(WORKER, {"task": f"Evaluate {expression}"})])
    if SYSTEM["calculator"] in system:
        if seen is not None:
            return Reply(tool_calls=[("final_answer", {"answer": f"The result is {seen}."})])
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(tool_calls=[("final_answer", {"answer": "There is no expression for me to evaluate."})])
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    return Reply(content="I can only answer as planner or calculator.")
