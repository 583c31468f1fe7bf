"""``benchmarks/diagnosis.py``: failures planted at known steps, every blame method scored on them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from diagnosis import WRONG, erring, main  # noqa: E402

pytest.importorskip("autogen_agentchat")


def test_the_erring_model_plants_a_wrong_plan_or_calculation_at_its_rate():
    from aegis_probe.demos import autogen as demo

    policy = erring(demo, 0.5, seed=1)
    plan = {"messages": [{"role": "system", "content": demo.SYSTEM["planner"]}, {"role": "user", "content": demo.TASK}]}
    plans = [policy(plan).content for _ in range(200)]
    wrong = sum(WRONG in p for p in plans)
    assert 70 < wrong < 130 and all(demo.EXPRESSION in p for p in plans if WRONG not in p)


def test_the_benchmark_prints_one_table_of_methods_beside_the_floors(capsys):
    assert main(["--frameworks", "autogen", "--failures", "2", "--spectrum-runs", "4", "--concurrency", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 failed runs (2 per framework: autogen)")
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines() if line.startswith("| ")}
    assert {"floor: first speaker", "floor: last step", "replay --search scan (fixer: recompute)",
            "spectrum (ochiai, 4 re-runs)"} <= set(rows)
    scan = rows["replay --search scan (fixer: recompute)"]
    assert scan[3] == "2/2" and float(scan[-3]) >= 1 and float(scan[-2]) >= 1, scan  # replays, model calls per run
    assert re.fullmatch(r"\d+%", scan[1]) and "judge methods: not run (no --judge-url)" in out
