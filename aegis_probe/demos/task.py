"""The demo task every framework's demo team solves, and its calculator tool."""

from __future__ import annotations

import ast
import operator
import re

from ..trajectory import Outcome

TASK = (
    "A shop sells pens at 17 coins and notebooks at 25 coins. "
    "What do 3 pens and 3 notebooks cost in total?"
)
EXPECTED = "126"
EXPRESSION = "(17 + 25) * 3"

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError("only numbers, + - * / and parentheses are allowed")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * /, parentheses) and return the result."""
    value = _eval(ast.parse(expression, mode="eval"))
    return str(int(value)) if float(value).is_integer() else str(value)


def final_number(text: str | None) -> str | None:
    """The last number in ``text`` (how the demo judge reads an answer)."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text or "")
    return numbers[-1] if numbers else None


def judge(task: str | None, answer: str | None) -> Outcome:
    """The demo judge: success when the answer's last number is the expected total."""
    return Outcome(success=final_number(answer) == EXPECTED, answer=answer, expected=EXPECTED)
