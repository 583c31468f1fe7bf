"""Files of the wrong types or damaged, given to a train command, are one error naming the file
(and the record): prediction fields of other types (a numeric agent was scored as an agent, a
``turns_read`` of text was a TypeError), and the checkpoint a DCL ``--resume`` reads (a damaged
trainer state was a bare JSON message, a damaged optimizer file a SafetensorError, another
``hidden_size`` a RuntimeError listing every tensor)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aegis_probe.train import cli
from test_train_data import whowhen_record, write_json

pytestmark = pytest.mark.train
ROW = {"id": "r1", "turns": [{"agent": "Coder", "text": "x = 1"}, {"agent": "Tester", "text": "fails"}],
       "label_agents": ["Coder"], "label_modes": [], "label_step": 0, "positive": False}
TINY = ["--text_embeddings", "false", "--hidden_size", "8", "--ensemble", "1", "--no-progress"]  # one model's checkpoints


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error") or "Traceback" in line]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("fields, message", [
    ({"agent": 5}, "agent must be a name or null, got 5"),
    ({"agent": ["Coder"]}, "agent must be a name or null, got ['Coder']"),
    ({"pairs": [[1, "FM-1.1"]]}, "a pair's agent and mode must be names or null"),
    ({"top_pair": {"agent": "Coder", "mode": 3}}, "a pair's agent and mode must be names or null"),
    ({"agent": "Coder", "turns_read": "x"}, "turns_read must be a count of turns or null, got 'x'"),
    ({"agent": "Coder", "turns_read": -1}, "turns_read must be a count of turns or null, got -1"),
])
def test_eval_predictions_of_wrong_types_are_named(fields, message, tmp_path, capsys):
    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"id": "whowhen:1", **fields}) + "\n")
    assert cli.main(["eval", str(src), "--predictions", str(preds), "--out-dir", str(tmp_path / "ev"), "--no-progress"]) == 2
    assert one_error(capsys) == f"error: {preds}: prediction 'whowhen:1': {message}"
    assert not (tmp_path / "ev").exists()


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """DCL rows and a run of one epoch on them (its checkpoint-1 resumable)."""
    base = tmp_path_factory.mktemp("resume")
    data = base / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "r2", "label_agents": ["Tester"], "label_step": 1}) + "\n")
    assert cli.main(["dcl", "--data", str(data), "--out", str(base / "run"), "--epochs", "1", *TINY]) == 0
    return data, base / "run"


@pytest.mark.parametrize("damage, options, message", [
    ("trainer_state.json", [], "trainer_state.json: not a DCL trainer state"),
    ("optimizer.safetensors", [], "optimizer.safetensors: not the optimizer state of this configuration"),
    ("model.safetensors", [], "model.safetensors: not a safetensors file"),
    (None, ["--hidden_size", "16"], "model.safetensors: the weights do not fit this configuration: head."),
])
def test_dcl_resume_from_a_damaged_or_foreign_checkpoint_is_named(one_epoch, damage, options, message, tmp_path, capsys):
    data, run = one_epoch
    out = tmp_path / "run"
    shutil.copytree(run, out)
    if damage:
        (out / "checkpoint-1" / damage).write_bytes(b"{")
    argv = ["dcl", "--data", str(data), "--out", str(out), "--epochs", "2", *TINY, *options, "--resume"]
    assert cli.main(argv) == 2
    assert one_error(capsys).startswith(f"error: {out / 'checkpoint-1' / message}")
    assert not (out / "checkpoint-2").exists()


@pytest.mark.parametrize("where", ["missing", "empty folder"])
def test_a_tokenizer_or_encoder_path_that_holds_none_is_named(where, tmp_path, capsys):
    """``build --tokenizer`` and ``dcl --model`` (the encoder) name the path: a missing one was read
    as a Hub repo id ('Repo id must use alphanumeric chars'), an empty folder gave the tokenizer
    library's message alone."""
    path = tmp_path / "nothing"
    if where == "empty folder":
        path.mkdir()
    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROW) + "\n")
    what = "no {} directory there (nothing is downloaded)" if where == "missing" else "not a Hugging Face {} directory"
    assert cli.main(["build", "sft", str(src), "-o", str(tmp_path / "sft.jsonl"), "--tokenizer", str(path), "--no-progress"]) == 2
    assert one_error(capsys).startswith(f"error: --tokenizer {path}: {what.format('tokenizer')}")
    assert cli.main(["dcl", "--data", str(rows), "--out", str(tmp_path / "m"), "--model", str(path), "--no-progress"]) == 2
    assert one_error(capsys).startswith(f"error: --model {path}: {what.format('encoder')}")
    assert not (tmp_path / "sft.jsonl").exists() and not (tmp_path / "m").exists()
