"""One agent identity across the training side: names compare lower-cased without whitespace
(:func:`normalize_agent`), so a run whose framework spells an agent "Coder" in one turn and "coder"
in another has one agent, for DCL, the baselines and floors, and the importers' label flags."""

from __future__ import annotations

import json

import pytest

from aegis_probe.trajectory import Fault, Labels, Step, Trajectory
from aegis_probe.train import importers
from aegis_probe.train.baselines import MostFrequentAgent, acting_agents, expected_random
from aegis_probe.train.answers import gold_attribution
from aegis_probe.train.dcl.examples import example_from_row
from aegis_probe.train.dcl.reading import FEATURES
from aegis_probe.train.modes import MODE_IDS

pytestmark = pytest.mark.train
SPEAKERS = ["Coder", "Planner", "coder", "user"]


def run(label: str = "coder", step: int = 2) -> Trajectory:
    steps = [Step(index=i, agent=a, output=f"turn {i}: ask Coder or coder") for i, a in enumerate(SPEAKERS)]
    return Trajectory(run_id="r", task="q", steps=steps, labels=Labels(faults=[Fault(agent=label, step=step)], source="t"))


def test_dcl_reads_two_spellings_as_one_agent():
    row = {"id": "r", "task": "q", "turns": [{"agent": a, "text": f"turn {i}: ask Coder or coder"} for i, a in enumerate(SPEAKERS)],
           "label_agents": ["coder"], "label_step": 2, "positive": False}
    ex = example_from_row(row, list(MODE_IDS), anonymise_agents=True)
    assert ex.agents == ["Coder", "Planner", "user"]  # was ['Coder', 'Planner', 'coder', 'user']: a 'Coder' with no turn
    assert ex.turn_agent.tolist() == [0, 1, 0, 2]
    assert ex.agent_target is not None and ex.agent_target.tolist() == [1.0, 0.0, 0.0]
    assert ex.turn_texts[1] == "agent 2: turn 1: ask agent 1 or agent 1"  # both spellings hidden, as one agent
    assert ex.features is not None
    share = ex.features[:, FEATURES.index("speaker_share")].tolist()
    first_turn = ex.features[:, FEATURES.index("speaker_first_turn")].tolist()
    assert share[0] == share[2] == pytest.approx(0.5) and first_turn == [1.0, 1.0, 0.0, 1.0]  # was 0.25 and a 'first' turn at 2


def test_baselines_and_floors_count_agents_by_identity():
    traj = run()
    assert acting_agents(traj) == ["Coder", "Planner"]
    assert expected_random(traj, gold_attribution(traj))[0] == pytest.approx(1 / 2)  # was 1/3
    train = [run("Planner", 1), run("Planner", 1), run("coder"), run("Coder"), run("CODER")]
    assert MostFrequentAgent(train).ranking == ["coder", "Planner"]  # 3 labels of one agent beat 2 (was Planner)


def test_label_flags_compare_agent_identities(tmp_path):
    record = {"is_correct": False, "question": "q", "ground_truth": "8",
              "history": [{"content": "plan", "role": "assistant", "name": "Planner"},
                          {"content": "print(7)", "role": "user", "name": "Coder"}],
              "mistake_agent": "coder", "mistake_step": "1", "mistake_reason": "off by one"}
    (tmp_path / "1.json").write_text(json.dumps(record))
    ww = importers.load(tmp_path / "1.json", "whowhen")
    assert ww.flagged == 0 and ww.trajectories[0].labels.flags == []  # was suspicious:agent-not-at-step
    aegis = {"id": "a1", "input": {"query": "q", "conversation_history": [
        {"step": 0, "agent_name": "Coder", "content": "x"}, {"step": 1, "agent_name": "Planner", "content": "y"}]},
        "output": {"faulty_agents": [{"agent_name": "coder", "error_type": "FM-1.1"}]}}
    (tmp_path / "a.jsonl").write_text(json.dumps(aegis) + "\n")
    assert importers.load(tmp_path / "a.jsonl", "aegis").flagged == 0  # was suspicious:agent-absent
