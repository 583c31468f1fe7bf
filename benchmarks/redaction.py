"""Cost of the built-in secret redaction per captured string, on the app thread.

``python benchmarks/redaction.py`` prints microseconds per call for
typical strings: cold (each text new, so the cache never hits) and repeated (a prompt repeating
earlier messages: the cache hits). ``--compare FILE`` adds a column for another ``redact.py``
(e.g. ``git show HEAD~1:aegis_probe/redact.py > /tmp/old_redact.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import time
from typing import Callable

from aegis_probe.redact import redact_secrets

PROSE = ("The planner breaks the task into one arithmetic expression; the calculator evaluates it "
         "with its tool and the reviewer checks the total before ending the conversation. ")
CASES: dict[str, str] = {
    "short reply (80 chars)": PROSE[:80],
    "prompt (2 kB, no trigger word)": (PROSE * 12)[:2000],
    "prompt (2 kB, 'key'/'token' words)": ((PROSE + "The key point: tokens used so far are 120. ") * 9)[:2000],
    "tool args JSON with a secret": '{"expression": "3*12+3*30", "api_key": "sk-abcdefghijklmnopqrstuvwx"}',
    "long document (40 kB, words)": (PROSE + "key token ") * 180,
}


def _load(path: str) -> Callable[[str], str]:
    spec = importlib.util.spec_from_file_location("_other_redact", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.redact_secrets


def _per_call_us(redact: Callable[[str], str], text: str, *, cold: bool, n: int, rounds: int = 5) -> float:
    """The best of ``rounds`` timings (the machine may be shared), in microseconds per call."""
    counter = itertools.count()
    redact(text)  # warm the patterns (and, when repeated, the cache)
    best = float("inf")
    for _ in range(rounds):
        texts = [f"{next(counter)} {text}" for _ in range(n)] if cold else [text] * n
        start = time.perf_counter()
        for t in texts:
            redact(t)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", help="another redact.py to time side by side")
    parser.add_argument("-n", type=int, default=400, help="calls per measurement")
    args = parser.parse_args()
    impls = {"current": redact_secrets}
    if args.compare:
        impls["compared"] = _load(args.compare)
    head = f"{'string':38} {'mode':8} " + " ".join(f"{name + ' us':>12}" for name in impls)
    print(head)
    print("-" * len(head))
    for name, text in CASES.items():
        for cold in (True, False):
            n = max(20, args.n // 20) if len(text) > 10_000 else args.n
            cells = " ".join(f"{_per_call_us(f, text, cold=cold, n=n):12.2f}" for f in impls.values())
            print(f"{name:38} {'cold' if cold else 'repeat':8} {cells}")


if __name__ == "__main__":
    main()
