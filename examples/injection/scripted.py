"""Scripted "model" knowledge shared by the example apps: it knows how to solve each task type.

A task is recognised by its wording with the numbers blanked out (its skeleton), and its
arithmetic template is filled with the numbers of the text the agent actually sees, so a
manipulated input leads to a different (wrong) plan, as it would for a real model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aegis_probe.demos.task import expression_in, fill, final_number, skeleton

HERE = Path(__file__).resolve().parent

__all__ = ["expression_in", "final_number", "plan_expression", "text_of"]


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
