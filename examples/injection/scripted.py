"""Scripted "model" knowledge shared by the example apps: it knows how to solve each task type.

A task is recognised by its wording with the numbers blanked out (its skeleton), and its
arithmetic template is filled with the numbers of the text the agent actually sees, so a
manipulated input leads to a different (wrong) plan, as it would for a real model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aegis_probe.demos.task import final_number

HERE = Path(__file__).resolve().parent
_NUM = re.compile(r"-?\d+(?:\.\d+)?")
_EXPR = re.compile(r"[\d(][\d\s+\-*/().]*[\d)]")

__all__ = ["expression_in", "final_number", "plan_expression", "text_of"]


def _skeleton(text: str) -> str:
    return _NUM.sub("#", " ".join(text.split()))


def _templates() -> dict[str, str]:
    rows = [json.loads(line) for line in (HERE / "math_tasks.jsonl").read_text().splitlines() if line.strip()]
    return {_skeleton(r["task"]): r["template"] for r in rows}


TEMPLATES = _templates()


def text_of(message: dict[str, Any]) -> str:
    """A request message's text (string or list-of-parts content)."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def plan_expression(text: str) -> str | None:
    """The arithmetic expression for a task text, or None if the task is not recognised."""
    for skeleton, template in TEMPLATES.items():
        if skeleton in _skeleton(text):
            offset = _skeleton(text)[: _skeleton(text).index(skeleton)].count("#")
            return template.format(*_NUM.findall(text)[offset:])
    return None


def expression_in(text: str) -> str | None:
    """The last arithmetic expression (with an operator) written in ``text``."""
    found = [e.strip() for e in _EXPR.findall(text) if re.search(r"[+\-*/]", e)]
    return found[-1] if found else None
