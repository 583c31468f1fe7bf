"""AG2 example app for injection campaigns: the demo group chat (user proxy, planner, calculator
with its tool, reviewer) with a scripted model that solves every task of math_tasks.jsonl. Runs
in the ag2 environment (.venv-ag2, see README.md).

``python -m aegis_probe inject --app examples/injection/ag2_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.ag2 import AGENTS, SYSTEM, TERMINATION, TOOL, build_app, run_app
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, plan_expression, text_of

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task it sees, calculator evaluates the latest expression, reviewer reports."""
    messages = body.get("messages", [])
    system = text_of(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [text_of(m) for m in messages[1:]]
    if system.startswith(SYSTEM["planner"]):
        expression = plan_expression(texts[-1] if texts else "")
        if expression is None:
            return Reply(content="The task is unclear to me; I cannot make a plan.")
        return Reply(content=f"Plan: the answer is {expression}. Calculator, please evaluate it.")
    if system.startswith(SYSTEM["calculator"]):
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    if system.startswith(SYSTEM["reviewer"]):
        result = final_number(texts[-1]) if texts else None
        return Reply(content=f"The calculator's result checks out. FINAL ANSWER: {result} {TERMINATION}")
    return Reply(content="I can only answer as planner, calculator or reviewer.")
