"""An example fixer for ``blame``: redo a step's arithmetic when the step got it wrong.

``fixer(trajectory, t) -> str | None`` proposes what step ``t`` should have answered, or None
when the step looks right (blame then does not replay it). ``recompute`` knows arithmetic tasks
(the demo task and examples/injection/math_tasks.jsonl, through the scripted models' solver): it
checks the expression or number a step states against the task's arithmetic and, when they
differ, returns the step's answer with the arithmetic corrected. Try it on a failed demo run::

    python -m aegis_probe demo --inject FM-2.6
    python -m aegis_probe blame --trace <id> --app aegis_probe.demos.autogen --fixer examples/fixers.py:recompute

A real fixer would ask a stronger model (see ``AnalyzerFixer`` and docs/replay.md).
"""

from __future__ import annotations

import re

from aegis_probe.demos.task import calculate, expression_in, final_number, solve
from aegis_probe.trajectory import Trajectory


def _value(expression: str) -> str | None:
    try:
        return calculate(expression)
    except (ValueError, SyntaxError, ZeroDivisionError):
        return None


def recompute(trajectory: Trajectory, t: int) -> str | None:
    """Step ``t``'s answer with the task's arithmetic put right, or None if it states no wrong arithmetic."""
    expression = solve(trajectory.task)
    if expression is None:
        return None
    value = calculate(expression)
    step = trajectory.steps[t]
    for call in step.tool_calls:  # a tool call: its arguments hold the expression; answer in words instead
        stated = expression_in(call.arguments)
        if stated is not None:
            return None if _value(stated) == value else f"{expression} = {value}"
    said = next((c.output for c in reversed(step.llm_calls) if c.output), None) or step.output
    stated = expression_in(said)
    if stated is not None:  # the step wrote an expression: it is right, or the fix is the right one
        if _value(stated) == value:
            return None
        with_result = re.compile(re.escape(stated) + r"(\s*=\s*)-?\d+(?:\.\d+)?")  # "expr = result"
        return with_result.sub(lambda m: f"{expression}{m.group(1)}{value}", said).replace(stated, expression)
    number = final_number(said)
    if number is not None and float(number) != float(value):
        head, _, tail = said.rpartition(number)
        return f"{head}{value}{tail}"
    return None
