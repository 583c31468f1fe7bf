"""``train dcl`` and ``train.dcl.whowhen`` train, by default, the primary setting of the
out-of-domain protocol (docs/results.md): reading features only, no encoder. The default model
trains and attributes without ever loading the encoder; the text inputs stay options."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train import cli
from aegis_probe.train.dcl import whowhen
from aegis_probe.train.dcl.attributor import SPEC_FILE, DCLAttributor
from test_train_data import whowhen_record

pytestmark = pytest.mark.train
TINY = ["--epochs", "1", "--hidden_size", "8", "--no-progress"]


def _rows(tmp_path):
    src = tmp_path / "ww.jsonl"
    src.write_text("".join(json.dumps(whowhen_record(mistake_step=str(s), question_ID=f"q{s}")) + "\n" for s in (0, 1, 2)))
    rows = tmp_path / "rows.jsonl"
    assert cli.main(["build", "dcl", str(src), "-o", str(rows), "--no-progress"]) == 0
    return rows


def _not_an_encoder(tmp_path):
    """A folder that passes ``--model``'s checks (a config.json) but from which no encoder loads."""
    path = tmp_path / "broken-encoder"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def test_dcl_default_trains_and_attributes_without_the_encoder(tmp_path, capsys):
    rows = _rows(tmp_path)
    not_an_encoder = _not_an_encoder(tmp_path)
    out = tmp_path / "dcl"
    assert cli.main(["dcl", "--data", str(rows), "--out", str(out), "--model", str(not_an_encoder), *TINY]) == 0
    spec = json.loads((out / SPEC_FILE).read_text(encoding="utf-8"))
    assert spec["reading_features"] is True and spec["text_embeddings"] is False
    capsys.readouterr()
    assert cli.main(["attribute", "--model", str(out), "--data", str(rows), "--no-progress"]) == 0
    preds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(preds) == 3 and all(p["agent"] == p["step_agent"] for p in preds)
    assert "encoder" not in DCLAttributor.load(out)._modules


def test_dcl_text_inputs_stay_options(tmp_path, capsys):
    """``--text_embeddings true`` still loads the encoder (so the broken one is named), and the
    ``--no_text_embeddings`` of earlier command lines still parses."""
    rows = _rows(tmp_path)
    not_an_encoder = _not_an_encoder(tmp_path)
    argv = ["dcl", "--data", str(rows), "--model", str(not_an_encoder), *TINY]
    assert cli.main([*argv, "--out", str(tmp_path / "text"), "--text_embeddings", "true"]) == 2
    assert f"--model {not_an_encoder}: not a Hugging Face encoder directory" in capsys.readouterr().err
    assert cli.main([*argv, "--out", str(tmp_path / "features"), "--no_text_embeddings"]) == 0
    assert json.loads((tmp_path / "features" / SPEC_FILE).read_text(encoding="utf-8"))["text_embeddings"] is False


def test_whowhen_benchmark_default_is_features_only(tmp_path, monkeypatch, capsys):
    data = tmp_path / "shared" / "whowhen" / "Algorithm-Generated"
    data.mkdir(parents=True)
    for i in range(4):
        (data / f"{i + 1}.json").write_text(json.dumps(whowhen_record(mistake_step=str(i % 3), question_ID=f"q{i}")))
    monkeypatch.setenv("AEGIS_SHARED_DATA", str(tmp_path / "shared"))
    out = tmp_path / "run"
    assert whowhen.main(["--out", str(out), "--plans-per-run", "0", "--epochs", "1", "--test-fraction", "0.5"]) == 0
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["inputs"] == "features"
    spec = json.loads((out / SPEC_FILE).read_text(encoding="utf-8"))
    assert spec["reading_features"] is True and spec["text_embeddings"] is False
    assert "whowhen: train 2 / held-out 2" in capsys.readouterr().out


def test_dcl_help_says_what_the_default_reads(capsys):
    """``dcl --help`` describes the features-only default, not an encoder-based model."""
    with pytest.raises(SystemExit):
        cli.main(["dcl", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "train a DCL attributor (reading features, optionally encoder embeddings" in out
    assert "nothing encoded and the encoder never loaded) (default: False)" in out  # --text_embeddings


def test_whowhen_benchmark_shows_its_defaults_and_names_a_bad_value(tmp_path, capsys):
    """``dcl.whowhen --help`` gives every default; a value out of range is one error naming the
    option and what it takes, before the data is looked for or anything written."""
    with pytest.raises(SystemExit):
        whowhen.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(f"(default: {value})" in out for value in ("0.3", "40", "24", "runs/dcl-whowhen")), out
    for option, value, accepted in (("--test-fraction", "1.5", "between 0 and 1"), ("--epochs", "0", "at least 1"),
                                    ("--plans-per-run", "-1", "at least 0"), ("--seed", "-2", "at least 0")):
        with pytest.raises(SystemExit) as stop:
            whowhen.main(["--out", str(tmp_path / "run"), option, value])
        assert stop.value.code == 2
        assert f"error: {option} must be {accepted}, not {value}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
