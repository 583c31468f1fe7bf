"""Judges: callables on a finished run, ``judge(task, answer) -> Outcome`` (the probe's judge type).

Built-ins: normalized exact answer, numeric answer within a tolerance, and Python unit tests run
on the answer's code in a subprocess with a timeout. :func:`judge_for` builds one from a task
record of a campaign's tasks file.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..trajectory import Outcome

Judge = Callable[[str | None, str | None], Outcome]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def normalize(text: str | None) -> str:
    """Lower-cased, whitespace collapsed, surrounding punctuation and quotes stripped."""
    return re.sub(r"\s+", " ", (text or "").strip().lower()).strip(" .!?'\"`")


def exact(expected: str) -> Judge:
    """Success when the normalized answer equals the normalized ``expected``."""
    def judge(task: str | None, answer: str | None) -> Outcome:
        return Outcome(success=normalize(answer) == normalize(expected), answer=answer, expected=expected)
    return judge


def last_number(text: str | None) -> float | None:
    """The last number in ``text`` (thousands separators allowed), or None."""
    found = _NUMBER.findall(text or "")
    return float(found[-1].replace(",", "")) if found else None


def numeric(expected: float | str, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> Judge:
    """Success when the answer's last number is within tolerance of ``expected`` (a number, or a
    text read as answers are: its last number, e.g. "126 coins")."""
    try:
        target = float(expected)
    except ValueError:
        found = last_number(str(expected))
        if found is None:
            raise ValueError(f"expected {expected!r} holds no number to compare answers with") from None
        target = found

    def judge(task: str | None, answer: str | None) -> Outcome:
        value = last_number(answer)
        ok = value is not None and math.isclose(value, target, rel_tol=rel_tol, abs_tol=abs_tol)
        return Outcome(success=ok, answer=answer, expected=str(expected))
    return judge


def extract_code(answer: str | None) -> str:
    """The Python code of an answer: its fenced blocks joined, else the whole text."""
    blocks = _CODE.findall(answer or "")
    return "\n\n".join(blocks) if blocks else (answer or "")


def unit_tests(tests: str, timeout: float = 10.0) -> Judge:
    """Success when the answer's code followed by ``tests`` (asserts) exits 0 within ``timeout`` seconds."""
    def judge(task: str | None, answer: str | None) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="aegis-judge-") as tmp:
            path = Path(tmp) / "solution_test.py"
            path.write_text(extract_code(answer) + "\n\n" + tests + "\n", encoding="utf-8")
            try:
                proc = subprocess.run([sys.executable, str(path)], cwd=tmp, capture_output=True, timeout=timeout)
                ok = proc.returncode == 0
            except subprocess.TimeoutExpired:
                ok = False
        return Outcome(success=ok, answer=answer, expected=None)
    return judge


def judge_for(record: dict[str, Any]) -> Judge:
    """The judge a task record asks for: ``judge`` is "numeric" (default when ``expected`` is a
    number), "exact" or "unit_tests" (with ``tests`` and optional ``timeout``); ``tolerance`` is relative."""
    kind = record.get("judge") or ("unit_tests" if "tests" in record else "numeric" if last_number(str(record.get("expected"))) is not None else "exact")
    if kind == "numeric":
        return numeric(record["expected"], rel_tol=_number(record, "tolerance", 1e-6))
    if kind == "exact":
        return exact(str(record["expected"]))
    if kind == "unit_tests":
        if not isinstance(record.get("tests"), str):
            raise ValueError("`tests` must be a string of Python asserts")
        return unit_tests(record["tests"], timeout=_number(record, "timeout", 10, most=MAX_TIMEOUT))
    raise ValueError(f"unknown judge {kind!r} (numeric, exact, unit_tests)")


#: The longest unit-test ``timeout`` (a year): a longer one overflows the clock the subprocess is waited on by.
MAX_TIMEOUT = 365 * 86400.0


def _number(record: dict[str, Any], name: str, default: float, most: float = math.inf) -> float:
    """The record's finite non-negative number ``name`` at most ``most`` (``default`` when absent),
    else ``ValueError``."""
    value = record.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most or not math.isfinite(value):
        bound = f", at most {most:g}" if math.isfinite(most) else ""
        raise ValueError(f"`{name}` must be a non-negative number, not {value!r} (finite{bound})")
    return float(value)
