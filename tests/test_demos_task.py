"""The demo model's reading of arithmetic in text (``aegis_probe.demos.task``), which every demo
policy runs on each request: the same expressions as the plain regular expression, read in time
linear in the text, also for a 1 MB answer of unclosed parentheses."""

from __future__ import annotations

import random
import re

from aegis_probe.demos.task import expression_in

#: What ``expression_in`` reads, as one regular expression (quadratic on a long run of "(").
PLAIN = re.compile(r"[\d(][\d\s+\-*/().]*[\d)]")


def _plain_expression_in(text: str) -> str | None:
    found = [e.strip() for e in PLAIN.findall(text) if re.search(r"[+\-*/]", e)]
    return found[-1] if found else None


def test_expressions_read_as_the_plain_regular_expression_reads_them():
    """Random short texts of digits, operators, parentheses, spaces, letters and a non-ASCII digit."""
    rng = random.Random(7)
    alphabet = "0123456789()+-*/. \nab\u0663x"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert expression_in(text) == _plain_expression_in(text), text


def test_a_megabyte_of_unclosed_parentheses_is_read():
    """1 MB of "(" before and after an expression (the plain expression tried a match at each "(",
    scanning to the end of the run: hours): the expression is found, and none in the "(" alone."""
    run = "(" * (1 << 20)
    assert expression_in(f"{run} 17 + 25 x") == f"{run} 17 + 25"
    assert expression_in(f"17 + 25 is it {run}") == "17 + 25"
    assert expression_in(run) is None
