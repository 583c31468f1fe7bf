"""DCL rows keep each labelled (agent, mode) pair: the pair targets the head learns are the gold
pairs, also when an agent has several modes or two agents share one (Aegis-style labels)."""

from __future__ import annotations

import pytest

from aegis_probe.trajectory import Fault, Labels, Step, Trajectory
from aegis_probe.train.builders import build_dcl
from aegis_probe.train.dcl.examples import example_from_row
from aegis_probe.train.modes import MODE_IDS

pytestmark = pytest.mark.train
MODES = list(MODE_IDS)


def trajectory(faults: list[Fault]) -> Trajectory:
    steps = [Step(index=i, agent=a, output=f"turn {i}") for i, a in enumerate(["A", "B", "C", "A", "B", "C"])]
    return Trajectory(run_id="r", task="q", steps=steps, labels=Labels(faults=faults, source="aegis"))


def pair_targets(row: dict) -> set[tuple[str, str]] | None:
    ex = example_from_row(row, MODES, reading_features=False)
    if ex.pair_target is None:
        return None
    return {(ex.agents[a], MODES[m]) for a, m in ex.pair_target.nonzero().tolist()}


def test_pairs_of_an_agent_with_two_modes_and_a_shared_mode():
    gold = {("A", "FM-1.1"), ("A", "FM-2.2"), ("B", "FM-1.1")}
    row = build_dcl([trajectory([Fault(agent=a, mode=m) for a, m in sorted(gold)])])[0]
    assert pair_targets(row) == gold  # was {(A, FM-1.1), (B, FM-2.2)}: agents zipped with modes
    two_agents_one_mode = build_dcl([trajectory([Fault(agent="A", mode="FM-3.2"), Fault(agent="C", mode="FM-3.2")])])[0]
    assert pair_targets(two_agents_one_mode) == {("A", "FM-3.2"), ("C", "FM-3.2")}  # was unknown (None)


def test_pairs_unknown_when_a_faulty_agent_has_no_mode_and_hand_written_rows_still_read():
    row = build_dcl([trajectory([Fault(agent="A", mode="FM-1.1"), Fault(agent="B")])])[0]
    assert row["label_pairs"] is None and pair_targets(row) is None
    clean = build_dcl([trajectory([])])[0]
    assert clean["positive"] and pair_targets(clean) == set()
    hand = {"id": "h", "turns": [{"agent": "A", "text": "x"}, {"agent": "B", "text": "y"}],
            "label_agents": ["B"], "label_modes": ["FM-2.4"], "label_step": 1, "positive": False}
    assert pair_targets(hand) == {("B", "FM-2.4")}
    with pytest.raises(ValueError, match="DCL row 'h': 'label_pairs' must be a list"):
        pair_targets({**hand, "label_pairs": ["B"]})


def test_a_label_naming_only_absent_agents_leaves_the_agent_targets_unknown():
    """A faulty run whose labelled agent never acts (Who&When's 'Ghost', a name spelt otherwise) does
    not teach that no agent present is at fault; its step still trains."""
    row = build_dcl([trajectory([Fault(agent="Ghost", step=2, mode="FM-2.6")])])[0]
    ex = example_from_row(row, MODES, reading_features=False)
    assert ex.agent_target is None and ex.pair_target is None and ex.step == 2  # were all zeros
    assert ex.mode_target is not None and ex.mode_target[MODES.index("FM-2.6")] == 1.0
    mixed = example_from_row(build_dcl([trajectory([Fault(agent="Ghost", mode="FM-2.6"), Fault(agent="b", mode="FM-1.1")])])[0],
                             MODES, reading_features=False)
    assert mixed.agent_target is not None and mixed.agent_target.tolist() == [0.0, 1.0, 0.0]  # 'b' is B


def test_modes_of_another_taxonomy_are_unknown_not_absent(tmp_path):
    """TRAIL labels name its own error categories, not MAST modes: they leave the mode and pair
    targets unknown (they were all zero: every TRAIL failure taught that no mode applies), and a
    model trained on them alone predicts no modes."""
    from aegis_probe.train.dcl.train import DCLConfig, fit

    trail = [trajectory([Fault(agent="A", step=0, mode="Formatting Errors")]), trajectory([Fault(agent="B", step=1, mode="Tool Errors")])]
    rows = build_dcl(trail)
    ex = example_from_row(rows[0], MODES, reading_features=False)
    assert ex.mode_target is None and ex.pair_target is None and ex.agent_target is not None
    mast = example_from_row(build_dcl([trajectory([Fault(agent="A", mode="FM-1.1"), Fault(agent="B", mode="Tool Errors")])])[0],
                            MODES, reading_features=False)
    assert mast.mode_target is not None and mast.mode_target.sum() == 1.0 and mast.pair_target is None
    model = fit(rows, tmp_path / "dcl", DCLConfig(epochs=1, text_embeddings=False), progress=False)
    assert model.spec["modes_trained"] is False
