"""A DCL model trained without text embeddings (reading features only) never loads the text
encoder to attribute: it works where the encoder it was trained beside is gone. A model that reads
text still loads it."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train import cli
from aegis_probe.train.dcl.attributor import SPEC_FILE, DCLAttributor
from aegis_probe.train.dcl.train import DCLConfig, fit
from test_train_data import whowhen_record

pytestmark = pytest.mark.train


def _model(tmp_path, **config):
    """DCL rows built by ``build dcl`` from three Who&When records, and a model fit on them."""
    src = tmp_path / "ww.jsonl"
    src.write_text("".join(json.dumps(whowhen_record(mistake_step=str(s))) + "\n" for s in (0, 1, 2)))
    rows = tmp_path / "rows.jsonl"
    assert cli.main(["build", "dcl", str(src), "-o", str(rows), "--no-progress"]) == 0
    out = tmp_path / "dcl"
    data = [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]
    fit(data, out, DCLConfig(epochs=1, hidden_size=16, **config), progress=False)
    return rows, out


def _point_encoder_at(model_dir, encoder) -> None:
    spec_file = model_dir / SPEC_FILE
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    spec_file.write_text(json.dumps({**spec, "encoder": str(encoder)}), encoding="utf-8")


def test_features_only_model_attributes_without_its_encoder(tmp_path, capsys):
    rows, model_dir = _model(tmp_path, text_embeddings=False)
    capsys.readouterr()
    assert cli.main(["attribute", "--model", str(model_dir), "--data", str(rows), "--no-progress"]) == 0
    before = capsys.readouterr().out
    _point_encoder_at(model_dir, tmp_path / "no-such-encoder")  # was loaded (and failed) for nothing
    assert cli.main(["attribute", "--model", str(model_dir), "--data", str(rows), "--no-progress"]) == 0
    assert capsys.readouterr().out == before  # the same predictions: the encoder's output was never read
    assert len(before.splitlines()) == 3
    model = DCLAttributor.load(model_dir)
    assert "encoder" not in model._modules and set(model.weights()) == set(model.state_dict())


def test_text_model_still_loads_its_encoder(tmp_path, capsys):
    rows, model_dir = _model(tmp_path, text_embeddings=True, reading_features=False)
    model = DCLAttributor.load(model_dir)
    assert "encoder" in model._modules and model.encoder.dim == model.head.name_proj.in_features
    _point_encoder_at(model_dir, tmp_path / "no-such-encoder")
    with pytest.raises(OSError, match="no-such-encoder"):
        DCLAttributor.load(model_dir)
