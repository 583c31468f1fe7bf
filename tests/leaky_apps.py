"""A campaign app (examples/injection/autogen_math.py) that leaks an API key, for the secret tests of
tests/test_scale_secrets.py (threads) and tests/test_ray.py (Ray)."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
KEY = "sk-proj-Zq8XwV2m9LkJ7hG5fD3sA1pO0iU4yT6r"


def leaky_app(raises_on: str, leaks_on: str | None = None) -> str:
    """The app's source: a task containing ``raises_on`` raises with :data:`KEY` in its message; one
    containing ``leaks_on`` answers with the key appended."""
    leak = f'    if {leaks_on!r} in task:\n        return _run(app, task) + " (api_key={KEY})"\n' if leaks_on else ""
    return f"""
import sys
sys.path.insert(0, {str(EXAMPLES)!r})
from autogen_math import AGENTS, build_app, policy, run_app as _run

def run_app(app, task):
    if {raises_on!r} in task:
        raise RuntimeError("upstream refused Authorization: Bearer {KEY}")
{leak}    return _run(app, task)
"""
