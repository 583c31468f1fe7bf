"""AG2 example app for injection campaigns: the demo group chat (user proxy, planner, calculator
with its tool, reviewer) with a scripted model that solves every task of math_tasks.jsonl. Runs
in the ag2 environment (.venv-ag2, see README.md).

``python -m aegis_probe inject --app examples/injection/ag2_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from aegis_probe.demos.ag2 import AGENTS, SYSTEM, TERMINATION, TOOL, build_app, run_app
from scripted import math_team_policy

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


policy = math_team_policy(SYSTEM, TOOL, "The calculator's result checks out. FINAL ANSWER: {result} " + TERMINATION)
