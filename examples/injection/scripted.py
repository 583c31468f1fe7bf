"""Scripted "model" knowledge shared by the example apps: it knows how to solve each task type.

A task is recognised by its wording with the numbers blanked out (its skeleton), and its
arithmetic template is filled with the numbers of the text the agent actually sees, so a
manipulated input leads to a different (wrong) plan, as it would for a real model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from aegis_probe.demos.task import expression_in, fill, final_number, message_text, skeleton, team_policy
from aegis_probe.modelserver import Reply

HERE = Path(__file__).resolve().parent

__all__ = ["expression_in", "final_number", "math_team_policy", "message_text", "plan_expression"]


def _templates() -> dict[str, str]:
    rows = [json.loads(line) for line in (HERE / "math_tasks.jsonl").read_text().splitlines() if line.strip()]
    return {skeleton(r["task"]): r["template"] for r in rows}


TEMPLATES = _templates()


def plan_expression(text: str) -> str | None:
    """The arithmetic expression for a task text, or None if the task is not recognised."""
    return fill(text, TEMPLATES)


def math_team_policy(system: Mapping[str, str], tool: str, answer: str, **options: Any) -> Callable[[dict[str, Any]], Reply]:
    """The demos' scripted planner / calculator / reviewer team (``demos.task.team_policy``) with
    this folder's task knowledge: the planner plans the latest message it sees from the task
    templates, the calculator reports its tool's result when asked again, the reviewer reads the
    latest message's number into ``answer`` (``options``: more of ``team_policy``'s)."""
    return team_policy(system, tool, answer,
                       plan=lambda texts: plan_expression(texts[-1] if texts else ""),
                       result=lambda texts: final_number(texts[-1]) if texts else None,
                       no_plan="The task is unclear to me; I cannot make a plan.", report_tool_result=True, **options)
