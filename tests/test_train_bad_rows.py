"""Training rows of the wrong types: each is an error naming the file and the row (they were a bare
``int()`` error, a pyarrow error, or read silently wrong: ``"positive": "false"`` as a clean run)."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train import cli
from aegis_probe.train.dcl.examples import RowError, example_from_row
from aegis_probe.train.modes import MODE_IDS
from aegis_probe.train.trainers.grpo import to_example

pytestmark = pytest.mark.train
ROW = {"id": "r1", "turns": [{"agent": "Coder", "text": "x = 1"}, {"agent": "Tester", "text": "fails"}],
       "label_agents": ["Coder"], "label_modes": ["FM-2.6"], "label_step": 0, "positive": False}


@pytest.mark.parametrize("change, message", [
    ({"label_step": "two"}, "'label_step' 'two' is not an integer"),
    ({"positive": "false"}, "'positive' must be true, false or null"),
    ({"label_agents": "Coder"}, "'label_agents' must be a list of names"),
    ({"label_modes": {"FM-2.6": 1}}, "'label_modes' must be a list of names"),
    ({"turns": [{"agent": "Coder", "text": ["x"]}]}, "turn 0: 'agent' must be a name and 'text' a string"),
])
def test_dcl_rows_of_wrong_types_are_named(change, message):
    with pytest.raises(RowError, match=f"DCL row 'r1'.*{message}"):
        example_from_row({**ROW, **change}, list(MODE_IDS), reading_features=False)
    assert example_from_row({**ROW, "label_step": "1"}, list(MODE_IDS), reading_features=False).step == 1  # its text is fine


def test_dcl_and_attribute_name_the_file_of_a_bad_row(tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "r2", "label_step": "two"}) + "\n")
    assert cli.main(["dcl", "--data", str(data), "--out", str(tmp_path / "m"), "--epochs", "1",
                     "--text_embeddings", "false", "--hidden_size", "8"]) == 2
    assert "rows.jsonl: DCL row 'r2': 'label_step' 'two' is not an integer" in capsys.readouterr().err  # was: invalid literal for int()
    assert not (tmp_path / "m").exists()
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(ROW) + "\n")
    assert cli.main(["dcl", "--data", str(good), "--out", str(tmp_path / "m"), "--epochs", "1",
                     "--text_embeddings", "false", "--hidden_size", "8"]) == 0
    out = tmp_path / "preds.jsonl"
    assert cli.main(["attribute", "--model", str(tmp_path / "m"), "--data", str(data), "--output", str(out)]) == 0
    assert [p["id"] for p in map(json.loads, out.read_text().splitlines())] == ["r1", "r2"]  # a prediction reads no label


@pytest.mark.parametrize("change, message", [
    ({"prompt": 5}, "'prompt' must be a list of {role, content}"),
    ({"gold_pairs": ["Coder"]}, "'gold_pairs' must be a list of \\[agent, mode\\]"),
    ({"gold_agent": ["Coder"]}, "'gold_agent' must be a name or null"),
    ({"gold_step": "x"}, "'gold_step' 'x' is not an integer"),
])
def test_grpo_rows_of_wrong_types_are_named(change, message):
    row = {"id": "g1", "prompt": [{"role": "user", "content": "which agent?"}], "gold_pairs": [["Coder", "FM-2.6"]],
           "gold_agent": "Coder", "gold_step": 0}
    assert to_example(row, "g.jsonl")["gold_step"] == 0
    with pytest.raises(ValueError, match=f"g.jsonl: GRPO row 'g1': {message}"):  # was pyarrow's 'cannot mix list and non-list'
        to_example({**row, **change}, "g.jsonl")
