"""MetaGPT example app for injection campaigns: the demo team (Planner, Calculator, Reviewer)
with a scripted model that solves every task of math_tasks.jsonl.

``python -m aegis_probe inject --app examples/injection/metagpt_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

import re
from typing import Any

from aegis_probe.demos.metagpt import AGENTS, build_app, run_app
from aegis_probe.modelserver import Reply
from scripted import expression_in, plan_expression, message_text

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]

TERMINATION = "FINAL ANSWER:"


def policy(body: dict[str, Any]) -> Reply:
    """Planner plans from the task it sees, Calculator restates the planned expression, Reviewer reads the result."""
    messages = body.get("messages", [])
    system = next((message_text(m) for m in messages if m.get("role") == "system"), "")
    prompt = "\n".join(message_text(m) for m in messages if m.get("role") != "system")
    agent = (re.search(r"named (\w+)", system) or [None, None])[1]
    if agent == "Planner":
        expression = plan_expression(prompt)
        return Reply(f"Plan: the Calculator should evaluate {expression}." if expression else "Plan: no plan; the task is unclear.")
    if agent == "Calculator":
        plan = next((line for line in reversed(prompt.splitlines()) if "Plan:" in line), "")
        return Reply(expression_in(plan) or "0")
    if agent == "Reviewer":
        result = re.search(r"= (-?\d+(?:\.\d+)?)\s*$", prompt, re.MULTILINE)
        return Reply(f"The calculation is correct. FINAL ANSWER: {result.group(1)}" if result else "FINAL ANSWER: unknown")
    return Reply("I have nothing to add.")
