"""CrewAI example app for injection campaigns: the demo crew (planner, calculator, reviewer, one
task each, in order) with a scripted model that solves every task of math_tasks.jsonl. Runs in
the crewai environment (.venv-crewai, see README.md); CrewAI's telemetry is off (the demo module
sets its opt-outs).

``python -m aegis_probe inject --app examples/injection/crewai_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from aegis_probe.demos.crewai import AGENTS, TERMINATION, TOOL, build_app, run_app, system_of
from scripted import math_team_policy

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]


policy = math_team_policy({role: system_of(role) for role in AGENTS}, TOOL,
                          "The calculator's result checks out. " + TERMINATION + ": {result}",
                          plan_reply="Plan: the answer is {expression}.")
