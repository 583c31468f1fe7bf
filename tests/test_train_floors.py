"""The structural floors (first speaker, last speaker before the final answer, most talkative
agent, last step, step at the median gold position) beside every ``train eval`` and ``train
benchmark`` table."""

from __future__ import annotations

import json

from aegis_probe.train.answers import Attribution
from aegis_probe.train.baselines import (MedianGoldPosition, first_speaker, last_speaker_before_final, last_step,
                                         most_talkative, structural_floors)
from aegis_probe.train.benchmark import score_set
from aegis_probe.trajectory import Fault

from test_benchmark import system_runs, traj, write_trajs


def _at(pred: Attribution | None) -> tuple[str | None, int | None] | None:
    return None if pred is None else (pred.agent, pred.step)


def test_each_structural_floor_blames_what_it_says():
    t = traj([("user", "task"), ("Planner", "plan"), ("Coder", "code"), ("Coder", "fix"), ("Planner", "FINAL: 3")])
    assert _at(first_speaker(t)) == ("Planner", 1), "the user is no agent to blame"
    assert _at(last_speaker_before_final(t)) == ("Coder", 3)
    assert _at(most_talkative(t)) == ("Planner", 1), "of equally talkative agents, the first to speak, at its first step"
    assert _at(last_step(t)) == ("Planner", 4)
    assert _at(last_speaker_before_final(traj([("Solo", "FINAL")]))) == ("Solo", 0)
    assert first_speaker(traj([])) is None and last_step(traj([])) is None

    # gold at relative positions 0.25, 0.5 and 0.75: the median 0.5 lands mid-trace of any length
    train = [traj([(f"a{i}", "x") for i in range(5)], [Fault(agent=f"a{s}", step=s)], rid=str(s)) for s in (1, 2, 3)]
    median = MedianGoldPosition(train)
    assert median.position == 0.5
    assert _at(median(traj([(f"b{i}", "y") for i in range(9)]))) == ("b4", 4)
    assert MedianGoldPosition([traj([("a", "x")])])(t) is None, "no gold step to fit on: no answer"


def test_eval_table_and_metrics_show_the_floors(tmp_path, capsys):
    from aegis_probe.train.cli import main

    train = write_trajs(tmp_path / "train.jsonl", system_runs(["x", "y"], 6, "tr", 1))
    test = write_trajs(tmp_path / "test.jsonl", system_runs(["x", "y"], 6, "te", 2))
    assert main(["eval", str(test), "--method", "random", "--fit-on", str(train), "--out-dir", str(tmp_path / "o"),
                 "--bootstrap", "10"]) == 0
    out = capsys.readouterr().out
    names = list(structural_floors([], str(train)))
    assert all(f"floor: {name} agent/step" in out for name in names), out
    floors = json.loads((tmp_path / "o" / "metrics.json").read_text())["floors"]
    assert list(floors) == names and all(0 <= f["agent_accuracy"] <= 1 for f in floors.values())
    assert main(["eval", str(test), "--method", "random", "--out-dir", str(tmp_path / "p"), "--bootstrap", "10"]) == 0
    assert "floor: step at the median gold position (fit on the evaluation set: oracle) agent/step" in capsys.readouterr().out


def test_benchmark_scores_the_structural_floors_fit_on_train():
    train = system_runs(["x", "y"], 6, "tr", 1)
    test = system_runs(["x", "y"], 6, "te", 2)
    part = score_set(train, test, [Attribution(None, None, [])] * len(test), [10**6] * len(test), n_resamples=10)
    for name in structural_floors([], "train"):
        assert set(part["results"][name]) == {"agent", "step", "step±1"}, name
    last = part["results"]["last step"]["step"]["value"]
    assert last == sum(t.labels.faults[0].step == len(t.steps) - 1 for t in test) / len(test)
