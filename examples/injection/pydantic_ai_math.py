"""Pydantic AI example app for injection campaigns: the demo app (the planner delegates to the
calculator agent through its ask_calculator tool; the calculator evaluates with its calculate
tool) with a scripted model that solves every task of math_tasks.jsonl.

``python -m aegis_probe inject --app examples/injection/pydantic_ai_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.pydantic_ai import AGENTS, DELEGATE, SYSTEM, TERMINATION, TOOL, build_app, run_app
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, message_text, plan_expression

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def _tool_result(messages: list[dict[str, Any]], tool: str) -> str | None:
    calls = {c.get("id"): c.get("function", {}).get("name") for m in messages for c in m.get("tool_calls") or ()}
    last = messages[-1] if messages else {}
    return message_text(last) if last.get("role") == "tool" and calls.get(last.get("tool_call_id")) == tool else None


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task and delegates; calculator evaluates and reports; planner answers."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages[1:] if m.get("role") == "user"]
    if system.startswith(SYSTEM["planner"]):
        result = _tool_result(messages, DELEGATE)
        if result is not None:
            return Reply(content=f"{TERMINATION}: {final_number(result)}")
        expression = plan_expression(texts[-1] if texts else "")
        if expression is None:
            return Reply(content="The task is unclear to me; I cannot make a plan.")
        return Reply(tool_calls=[(DELEGATE, {"expression": expression})])
    if system.startswith(SYSTEM["calculator"]):
        result = _tool_result(messages, TOOL)
        if result is not None:
            return Reply(content=f"The result is {result}.")
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    return Reply(content="I can only answer as planner or calculator.")
