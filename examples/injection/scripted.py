"""Scripted "model" knowledge shared by the example apps: it knows how to solve each task type.

A task is recognised by its wording with the numbers blanked out (its skeleton), and its
arithmetic template is filled with the numbers of the text the agent actually sees, so a
manipulated input leads to a different (wrong) plan, as it would for a real model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from aegis_probe.demos.task import expression_in, fill, final_number, skeleton
from aegis_probe.modelserver import Reply

HERE = Path(__file__).resolve().parent

__all__ = ["expression_in", "final_number", "math_team_policy", "plan_expression", "text_of"]


def _templates() -> dict[str, str]:
    rows = [json.loads(line) for line in (HERE / "math_tasks.jsonl").read_text().splitlines() if line.strip()]
    return {skeleton(r["task"]): r["template"] for r in rows}


TEMPLATES = _templates()


def text_of(message: dict[str, Any]) -> str:
    """A request message's text (string or list-of-parts content)."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def plan_expression(text: str) -> str | None:
    """The arithmetic expression for a task text, or None if the task is not recognised."""
    return fill(text, TEMPLATES)


def math_team_policy(system: Mapping[str, str], tool: str, answer: str) -> Callable[[dict[str, Any]], Reply]:
    """The scripted model of a planner / calculator / reviewer team, told apart by their system
    prompts (``system[agent]``): the planner plans from the task it sees, the calculator calls
    ``tool`` on the latest expression (and reports the tool's result when the framework asks it
    again), the reviewer answers with ``answer.format(result=...)``."""

    def policy(body: dict[str, Any]) -> Reply:
        messages = body.get("messages", [])
        prompt = text_of(messages[0]) if messages and messages[0].get("role") == "system" else ""
        texts = [text_of(m) for m in messages[1:]]
        if prompt.startswith(system["planner"]):
            expression = plan_expression(texts[-1] if texts else "")
            if expression is None:
                return Reply(content="The task is unclear to me; I cannot make a plan.")
            return Reply(content=f"Plan: the answer is {expression}. Calculator, please evaluate it.")
        if prompt.startswith(system["calculator"]):
            if messages and messages[-1].get("role") == "tool":
                return Reply(content=f"The result is {text_of(messages[-1])}.")
            expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
            if expression is None:
                return Reply(content="There is no expression for me to evaluate.")
            return Reply(tool_calls=[(tool, {"expression": expression})])
        if prompt.startswith(system["reviewer"]):
            return Reply(content=answer.format(result=final_number(texts[-1]) if texts else None))
        return Reply(content="I can only answer as planner, calculator or reviewer.")

    return policy
