"""Microsoft Agent Framework example app for injection campaigns: the demo sequential workflow
(planner, calculator with its calculate tool, reviewer) with a scripted model that solves every
task of math_tasks.jsonl.

``python -m aegis_probe inject --app examples/injection/agent_framework_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from aegis_probe.demos.agent_framework import AGENTS, SYSTEM, TERMINATION, TOOL, build_app, run_app
from scripted import math_team_policy

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


policy = math_team_policy(SYSTEM, TOOL, "The calculator's result checks out. " + TERMINATION + ": {result}")
