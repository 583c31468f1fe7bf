"""smolagents example app for injection campaigns: the demo app (the planner hands the arithmetic
to its managed calculator agent; the calculator evaluates with its calculate tool) with a scripted
model that solves every task of math_tasks.jsonl.

``python -m aegis_probe inject --app examples/injection/smolagents_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.smolagents import AGENTS, SYSTEM, TERMINATION, WORKER, build_app, observation, run_app
from aegis_probe.demos.smolagents import policy as demo_policy
from aegis_probe.modelserver import Reply
from scripted import message_text, plan_expression

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def policy(body: dict[str, Any]) -> Reply:
    """The demo's scripted model, except that the planner plans any task of math_tasks.jsonl
    (``plan_expression``) and asks the calculator; the calculator evaluates and reports, and the
    planner answers, as in the demo."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    if SYSTEM["planner"] not in system or observation(messages) is not None:
        return demo_policy(body)
    texts = [message_text(m) for m in messages[1:] if m.get("role") == "user"]
    expression = plan_expression(texts[0] if texts else "")
    if expression is None:
        return Reply(tool_calls=[("final_answer", {"answer": "The task is unclear to me; I cannot make a plan."})])
    return Reply(tool_calls=[(WORKER, {"task": f"Evaluate {expression}"})])
