"""OpenAI Agents SDK example app for injection campaigns: the demo team (planner hands off to
calculator, which hands off to reviewer) with a scripted model that solves every task of
math_tasks.jsonl. Runs in the openai-agents environment (.venv-openai-agents, see README.md).

``python -m aegis_probe inject --app examples/injection/openai_agents_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.openai_agents import AGENTS, SYSTEM, TERMINATION, TOOL, build_app, handoff_tool, run_app
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, plan_expression, message_text

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task and hands off; calculator evaluates, reports and hands off; reviewer answers."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages[1:]]
    if system.startswith(SYSTEM["planner"]):
        expression = plan_expression(texts[-1] if texts else "")
        if expression is None:
            return Reply(content="The task is unclear to me; I cannot make a plan.")
        return Reply(content=f"Plan: the answer is {expression}.", tool_calls=[(handoff_tool("calculator"), {})])
    if system.startswith(SYSTEM["calculator"]):
        calls = {c.get("id"): c.get("function", {}).get("name") for m in messages for c in m.get("tool_calls") or ()}
        if messages[-1].get("role") == "tool" and calls.get(messages[-1].get("tool_call_id")) == TOOL:
            return Reply(content=f"The result is {message_text(messages[-1])}.", tool_calls=[(handoff_tool("reviewer"), {})])
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    if system.startswith(SYSTEM["reviewer"]):
        result = next((final_number(t) for t in reversed(texts) if final_number(t)), None)
        return Reply(content=f"The calculator's result checks out. {TERMINATION}: {result}")
    return Reply(content="I can only answer as planner, calculator or reviewer.")
