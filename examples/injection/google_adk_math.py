"""Google ADK example app for injection campaigns: the demo team (a SequentialAgent: the planner
turns the task into an expression, the calculator evaluates it with its calculate tool and
answers) with a scripted model that solves every task of math_tasks.jsonl.

``python -m aegis_probe inject --app examples/injection/google_adk_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
(in the environment google-adk is installed in: .venv-google-adk, see README.md)
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.google_adk import AGENTS, SYSTEM, TERMINATION, TOOL, build_app, run_app
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, message_text, plan_expression

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task; calculator evaluates with its tool and answers."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages if m.get("role") == "user"]
    if system.startswith(SYSTEM["planner"]):
        expression = plan_expression(texts[0] if texts else "")
        if expression is None:
            return Reply(content="The task is unclear to me; I cannot make a plan.")
        return Reply(content=f"Evaluate {expression}")
    if system.startswith(SYSTEM["calculator"]):
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return Reply(content=f"{TERMINATION}: {final_number(message_text(last))}")
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    return Reply(content="I can only answer as planner or calculator.")
