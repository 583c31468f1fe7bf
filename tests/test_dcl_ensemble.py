"""Seed ensembles of the DCL (``dcl --ensemble K``, ``benchmark --ensemble K``): K models trained
with seeds seed .. seed+K-1, saved and loaded as one model directory whose answer averages their
joint (agent, step) log-scores; ``attribute`` and ``benchmark --model`` read it like any model."""

from __future__ import annotations

import json

import pytest
import torch

from aegis_probe.train.cli import main
from aegis_probe.train.dcl.attributor import SPEC_FILE, DCLAttributor, unlabelled
from aegis_probe.train.dcl.ensemble import combine, member_dir
from aegis_probe.train.dcl.model import joint_logits
from test_benchmark import system_runs, write_trajs

pytestmark = pytest.mark.train
TINY = ["--epochs", "2", "--hidden_size", "16", "--no-progress"]


def _rows(tmp_path, name="train", names=("alpha", "beta", "gamma"), seed=0):
    """Trajectories of one system, and their DCL rows."""
    trajs = write_trajs(tmp_path / f"{name}.jsonl", system_runs(list(names), 10, name, seed, turns=6))
    rows = tmp_path / f"{name}-rows.jsonl"
    assert main(["build", "dcl", str(trajs), "-o", str(rows), "--no-progress"]) == 0
    return trajs, rows


def _attribute(model_dir, rows, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["attribute", "--model", str(model_dir), "--data", str(rows), "--no-progress"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_an_ensemble_trains_saves_loads_and_attributes_as_one_model(tmp_path, capsys):
    _, rows = _rows(tmp_path)
    out = tmp_path / "ens"
    assert main(["dcl", "--data", str(rows), "--out", str(out), "--ensemble", "3", "--seed", "4", *TINY]) == 0
    assert json.loads((out / SPEC_FILE).read_text())["members"] == 3
    model = DCLAttributor.load(out)
    members = [DCLAttributor.load(member_dir(out, s)) for s in (4, 5, 6)]  # each seed's whole run, kept
    assert len(model.heads) == 3 and all(m.spec["members"] == 1 for m in members)
    for head, member in zip(model.heads, members):
        assert all(torch.equal(a, b) for a, b in zip(head.state_dict().values(), member.head.state_dict().values()))
    assert not torch.equal(members[0].head.agent_out.weight, members[1].head.agent_out.weight)  # other seeds
    preds = _attribute(out, rows, capsys)
    assert preds == _attribute(out, rows, capsys)  # reloaded: the same answers
    assert len(preds) == 10 and all(p["agent"] == p["step_agent"] for p in preds)
    # the answer averages the members' joint (agent, step) log-scores
    row = json.loads(rows.read_text().splitlines()[0])
    ex = model.example(unlabelled(row))
    with torch.no_grad():
        joint = torch.stack([joint_logits(m(ex), ex.turn_agent) for m in members]).mean(0).softmax(0)
    assert preds[0]["step"] == int(joint.argmax()) and preds[0]["step_score"] == pytest.approx(float(joint.max()), abs=1e-6)
    assert [p["step"] for p in model.predict_many([json.loads(r) for r in rows.read_text().splitlines()])] == \
        [p["step"] for p in preds]


def test_one_member_is_the_single_model_and_older_models_load(tmp_path, capsys):
    """K = 1 answers exactly as the single model; a model saved before ensembles (no "members")
    loads as one head."""
    _, rows = _rows(tmp_path)
    single = tmp_path / "single"
    assert main(["dcl", "--data", str(rows), "--out", str(single), "--ensemble", "1", *TINY]) == 0
    assert not (single / "members").exists()
    before = _attribute(single, rows, capsys)
    combine([DCLAttributor.load(single)]).save(tmp_path / "one")
    assert _attribute(tmp_path / "one", rows, capsys) == before
    spec = json.loads((single / SPEC_FILE).read_text())
    assert spec.pop("members") == 1
    (single / SPEC_FILE).write_text(json.dumps(spec))  # as saved before ensembles
    assert len(DCLAttributor.load(single).heads) == 1 and _attribute(single, rows, capsys) == before


def test_benchmark_trains_and_scores_an_ensemble(tmp_path, capsys):
    train, _ = _rows(tmp_path)
    test, _ = _rows(tmp_path, "test", ("Planner", "Coder", "Checker", "Writer"), seed=1)
    out = tmp_path / "bench"
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--out", str(out), "--ensemble", "2",
                 "--seed", "1", "--epochs", "2", "--bootstrap", "20", "--no-progress"]) == 0
    report = json.loads((out / "benchmark.json").read_text())
    assert report["inputs"]["members"] == 2 and len(report["tests"][str(test)]["predictions"]) == 10
    assert sorted(p.name for p in (out / "model" / "members").iterdir()) == ["seed-1", "seed-2"]
    again = tmp_path / "again"
    assert main(["benchmark", "--train", str(train), "--test", str(test), "--model", str(out / "model"),
                 "--out", str(again), "--seed", "1", "--bootstrap", "20", "--no-progress"]) == 0
    rescored = json.loads((again / "benchmark.json").read_text())
    assert rescored["tests"][str(test)]["predictions"] == report["tests"][str(test)]["predictions"]


def test_bad_ensembles_are_one_clear_error(tmp_path, capsys):
    _, rows = _rows(tmp_path)
    tiny = ["--data", str(rows), *TINY]
    assert main(["dcl", *tiny, "--out", str(tmp_path / "zero"), "--ensemble", "0"]) == 2
    assert "--ensemble must be a whole number >= 1, not 0" in capsys.readouterr().err
    assert not (tmp_path / "zero").exists()
    assert main(["dcl", *tiny, "--out", str(tmp_path / "tuned"), "--ensemble", "2", "--train_encoder", "true"]) == 2
    assert "--ensemble > 1 needs a frozen encoder" in capsys.readouterr().err
    assert main(["dcl", *tiny, "--out", str(tmp_path / "a"), "--ensemble", "1"]) == 0
    assert main(["dcl", *tiny, "--out", str(tmp_path / "b"), "--ensemble", "1", "--hidden_size", "8"]) == 0
    with pytest.raises(ValueError, match="made of single models"):
        combine([combine([DCLAttributor.load(tmp_path / "a")] * 2)])
    capsys.readouterr()
    ens = tmp_path / "ens"
    assert main(["dcl", *tiny, "--out", str(ens), "--ensemble", "2"]) == 0
    before = {p: p.read_bytes() for p in ens.rglob("*") if p.is_file()}
    for out, k, what in ((ens, "1", "holds a seed ensemble's models (members/)"),
                         (tmp_path / "a", "2", "holds the checkpoints of a single model's run")):
        assert main(["dcl", *tiny, "--out", str(out), "--ensemble", k]) == 2
        assert what in capsys.readouterr().err
    assert main(["dcl", *tiny, "--out", str(ens), "--ensemble", "2"]) == 2  # its members' runs: --resume
    assert "members/seed-0 holds the checkpoints of an earlier run" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in ens.rglob("*") if p.is_file()} == before  # nothing written was lost
    assert not (tmp_path / "a" / "members").exists()
    with pytest.raises(ValueError, match="must share every setting"):
        combine([DCLAttributor.load(tmp_path / "a"), DCLAttributor.load(tmp_path / "b")])
    spec_file = tmp_path / "a" / SPEC_FILE
    for members in (0, "3", True):
        spec_file.write_text(json.dumps({**json.loads(spec_file.read_text()), "members": members}))
        with pytest.raises(ValueError, match=f"{SPEC_FILE}: not a DCL model config .*members must be a whole number"):
            DCLAttributor.load(tmp_path / "a")
    spec_file.write_text(json.dumps({**json.loads(spec_file.read_text()), "members": 2}))  # weights of one head
    with pytest.raises(ValueError, match="does not fit: missing \\['extra_heads"):
        DCLAttributor.load(tmp_path / "a")
