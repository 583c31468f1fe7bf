"""The demo task every framework's demo team solves, its calculator tool, the arithmetic
knowledge of the demos' scripted models (:func:`solve`), and the scripted planner / calculator /
reviewer team most demos share (:func:`team_policy`)."""

from __future__ import annotations

import ast
import operator
import re
from typing import Any, Callable, Mapping, Sequence

from ..modelserver import Reply
from ..trajectory import Outcome

TASK = (
    "A shop sells pens at 17 coins and notebooks at 25 coins. "
    "What do 3 pens and 3 notebooks cost in total?"
)
EXPECTED = "126"
EXPRESSION = "(17 + 25) * 3"

#: Word problems the scripted models know, with their numbers blanked out ("#"), and the arithmetic
#: that solves them over those numbers in order: the demo task and examples/injection/math_tasks.jsonl.
WORD_PROBLEMS = {
    "A shop sells pens at # coins and notebooks at # coins. What do # pens and # notebooks cost in total?":
        "({0} + {1}) * {2}",
    "A train travels # km in the first hour and # km in the second hour. How many km does it travel in total?":
        "{0} + {1}",
    "Each box holds # apples. A farmer fills # boxes and sells # of them. How many apples are left in the boxes?":
        "{0} * ({1} - {2})",
    "Four friends share a bill of # coins equally, and each adds a tip of # coins. How much does each friend pay?":
        "{0} / 4 + {1}",
}

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
#: A run of arithmetic characters; within it, an expression spans from its first digit or "(" to its last
#: digit or ")" (one match attempt per run: ``[\d(][\d\s+\-*/().]*[\d)]`` tried at every "(" of a long
#: run of them, none closed, took time quadratic in its length: hours for a 1 MB answer).
_ARITHMETIC_RUN = re.compile(r"[\d\s+\-*/().]+")
_EXPRESSION_START = re.compile(r"[^\d(]*")
_EXPRESSION = re.compile(r"[\d(].*[\d)]", re.DOTALL)

_OPS: dict[type, Callable[..., float]] = {
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


def expression_in(text: str | None) -> str | None:
    """The last arithmetic expression (numbers with at least one operator) written in ``text``."""
    found = [e.strip() for e in _expressions(text or "") if re.search(r"[+\-*/]", e)]
    return found[-1] if found else None


def _expressions(text: str) -> list[str]:
    """Each span of ``text`` from a digit or "(" to the last digit or ")" after it among arithmetic characters."""
    found = []
    for run in _ARITHMETIC_RUN.findall(text):
        start = _EXPRESSION_START.match(run)
        match = _EXPRESSION.match(run, start.end()) if start else None
        if match:
            found.append(match.group())
    return found


def fill(text: str | None, problems: dict[str, str]) -> str | None:
    """The arithmetic of the first word problem of ``problems`` (wording with "#" for its numbers
    -> template over them) found in ``text``, filled with the numbers ``text`` holds; else None."""
    found = skeleton(text)
    for problem, template in problems.items():
        at = found.find(problem)
        if at >= 0:
            return template.format(*_NUMBER.findall(text or "")[found[:at].count("#"):])
    return None


def skeleton(text: str | None) -> str:
    """``text`` with its whitespace collapsed and every number replaced by "#"."""
    return _NUMBER.sub("#", " ".join((text or "").split()))


def solve(text: str | None) -> str | None:
    """The arithmetic expression a scripted model plans for a task text, or None.

    A known word problem (:data:`WORD_PROBLEMS`) found in ``text`` gets its arithmetic filled with
    the numbers ``text`` actually holds (so a manipulated task gives a different plan, as it would
    for a real model); otherwise an arithmetic expression written in the text is taken as is.
    """
    return fill(text, WORD_PROBLEMS) or expression_in(" ".join((text or "").split()))


def judge(task: str | None, answer: str | None) -> Outcome:
    """The demo judge: success when the answer's last number is the expected total."""
    return Outcome(success=final_number(answer) == EXPECTED, answer=answer, expected=EXPECTED)


def message_text(message: Mapping[str, Any]) -> str:
    """A request message's text: its string content, or its text parts joined with spaces."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def request_texts(body: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A chat request's system prompt (``""`` without one) and the texts of its other messages."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    return system, [message_text(m) for m in messages[1:]]


def plan_from_any(texts: Sequence[str]) -> str | None:
    """The arithmetic of the latest text that states a known task (the demos' planner)."""
    return next((e for e in map(solve, reversed(texts)) if e), None)


def latest_number(texts: Sequence[str]) -> str | None:
    """The latest number said (the demos' reviewer reports it)."""
    return next((n for n in map(final_number, reversed(texts)) if n), None)


def team_policy(
    system: Mapping[str, str],
    tool: str,
    answer: str,
    *,
    plan: Callable[[Sequence[str]], str | None] = plan_from_any,
    result: Callable[[Sequence[str]], str | None] = latest_number,
    no_plan: str = "I cannot turn this task into arithmetic; I have no plan.",
    plan_reply: str = "Plan: the answer is {expression}. Calculator, please evaluate it.",
    report_tool_result: bool = False,
    solve_unplanned: bool = False,
) -> Callable[[dict[str, Any]], Reply]:
    """The scripted model of a planner / calculator / reviewer team, each agent told apart by the
    start of its system prompt (``system[agent]``), each acting on what it sees.

    The planner replies ``plan_reply`` with ``plan(texts)``'s expression (``no_plan`` without one); the
    calculator calls ``tool`` on the latest expression it sees (with ``solve_unplanned``, on the
    task's own arithmetic when no plan reached it; with ``report_tool_result``, it reports the
    tool's result when the framework asks it again); the reviewer replies
    ``answer.format(result=result(texts))``.
    """

    def policy(body: dict[str, Any]) -> Reply:
        messages = body.get("messages", [])
        prompt, texts = request_texts(body)
        if prompt.startswith(system["planner"]):
            expression = plan(texts)
            if expression is None:
                return Reply(content=no_plan)
            return Reply(content=plan_reply.format(expression=expression))
        if prompt.startswith(system["calculator"]):
            if report_tool_result and messages and messages[-1].get("role") == "tool":
                return Reply(content=f"The result is {message_text(messages[-1])}.")
            expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
            if expression is None and solve_unplanned:
                expression = next((e for e in map(solve, texts) if e), None)
            if expression is None:
                return Reply(content="There is no expression for me to evaluate.")
            return Reply(tool_calls=[(tool, {"expression": expression})])
        if prompt.startswith(system["reviewer"]):
            return Reply(content=answer.format(result=result(texts)))
        return Reply(content="I can only answer as planner, calculator or reviewer.")

    return policy
