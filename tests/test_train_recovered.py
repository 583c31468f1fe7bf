"""A run labelled with a fault that still succeeded (``demo --inject`` whose team recovered) is no
failure to attribute and no clean run: import keeps its label, the builders skip it, ``eval`` leaves
it out, and ``attribute`` still predicts for it."""

from __future__ import annotations

import json

import pytest

from aegis_probe.cli import main as aegis_main
from aegis_probe.trajectory import Fault, Labels, Outcome, Step, Trajectory
from aegis_probe.train import builders, cli
from aegis_probe.train.answers import gold_attribution, recovered

pytestmark = pytest.mark.train


def test_a_recovered_demo_run_is_no_training_failure(tmp_path, capsys):
    pytest.importorskip("autogen_agentchat")
    store = tmp_path / "traces"
    # the scripted team repeats the planner's padded plan and still answers 126: it recovers
    assert aegis_main(["demo", "--inject", "FM-1.3:planner", "--trace-dir", str(store)]) == 0
    assert "the team recovered from FM-1.3" in capsys.readouterr().out
    assert cli.main(["import", str(store), "-o", str(tmp_path / "t.jsonl")]) == 0
    traj = Trajectory.model_validate_json((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert traj.outcome.success is True and traj.labels.faults[0].mode == "FM-1.3"  # the label by construction is kept
    assert recovered(traj) and gold_attribution(traj).agent is None

    assert cli.main(["build", "dcl", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "dcl.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "1 recovered runs skipped" in err and not (tmp_path / "dcl.jsonl").exists()  # was a row labelling planner|0 a failure
    assert cli.main(["eval", str(tmp_path / "t.jsonl"), "--out-dir", str(tmp_path / "ev")]) == 2
    assert "1 recovered runs left out" in capsys.readouterr().err  # was scored as a labelled failure

    failed = traj.model_copy(update={"run_id": "failed", "outcome": Outcome(success=False)})
    clean = traj.model_copy(update={"run_id": "clean", "labels": Labels()})
    rows = builders.build_dcl([traj, failed, clean])
    assert [(r["id"], r["positive"], r["label_agents"]) for r in rows] == [("failed", False, ["planner"]), ("clean", True, [])]
    assert [r["id"] for r in builders.build_sft([traj, failed, clean])] == ["failed", "clean"]
    assert [r["id"] for r in builders.build_grpo([traj, failed], "agent_step")] == ["failed"]
    assert builders.dcl_row(traj)["turns"]  # attribute and benchmark still predict for it


def test_a_run_of_unknown_outcome_keeps_its_label():
    """Datasets without an outcome (Aegis) keep every label: only a known success makes a run recovered."""
    steps = [Step(index=0, agent="A", output="x"), Step(index=1, agent="B", output="y")]
    traj = Trajectory(run_id="a", steps=steps, labels=Labels(faults=[Fault(agent="B", mode="FM-1.1")], source="aegis"))
    assert not recovered(traj) and gold_attribution(traj).agent == "B"
    assert json.loads(builders.build_sft([traj])[0]["messages"][2]["content"])["faulty_agents"][0]["agent_name"] == "B"
