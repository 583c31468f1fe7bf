"""A train command that fails keeps what it would have written over whole: ``attribute --data
EMPTY --output OUT`` emptied OUT; eval wrote metrics.json before the plots and the check of its
predictions; build replaced --hf-dir before it was complete; a benchmark that failed after
training refused its rerun without saying how to keep the model, and one that failed while
training left a model directory behind. Outputs are written beside their place and moved there
only when complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aegis_probe.train import cli
from test_benchmark import system_runs, write_trajs
from test_train_data import whowhen_record, write_json

pytestmark = pytest.mark.train
ROW = {"id": "r1", "turns": [{"agent": "Coder", "text": "x = 1"}, {"agent": "Tester", "text": "fails"}],
       "label_agents": ["Coder"], "label_modes": [], "label_step": 0, "positive": False}
TINY = ["--epochs", "1", "--text_embeddings", "false", "--hidden_size", "8", "--no-progress"]


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


def leftovers(folder: Path) -> list[str]:
    """Hidden temporary files or folders (``.name.tmp``, ``.name.partial``) left in ``folder``."""
    return sorted(p.name for p in folder.rglob(".*"))


@pytest.fixture(scope="module")
def dcl_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("dcl")
    data = base / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "r2", "label_agents": ["Tester"], "label_step": 1}) + "\n")
    assert cli.main(["dcl", "--data", str(data), "--out", str(base / "m"), *TINY]) == 0
    return base / "m"


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_attribute_of_an_empty_file_is_an_error_and_keeps_the_output(dcl_model, content, tmp_path, capsys):
    empty, out = tmp_path / "empty.jsonl", tmp_path / "preds.jsonl"
    empty.write_text(content)
    out.write_text('{"id": "earlier"}\n')
    assert cli.main(["attribute", "--model", str(dcl_model), "--data", str(empty), "--output", str(out)]) == 2
    assert error_lines(capsys) == [f"error: {empty}: no rows to attribute; {out} not written"]
    assert out.read_text() == '{"id": "earlier"}\n'  # was replaced by an empty file
    assert leftovers(tmp_path) == []


def test_a_dcl_directory_that_is_not_a_complete_model_is_named(dcl_model, tmp_path, capsys):
    """A training run that did not finish leaves checkpoints and no model; a config without its
    weights or of wrong types: one error naming the directory (not a bare 'No such file' or a TypeError)."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    half = tmp_path / "half"
    half.mkdir()
    (half / "dcl_config.json").write_text((dcl_model / "dcl_config.json").read_text())
    argv = ["attribute", "--model", str(half), "--data", str(data)]
    assert cli.main(argv) == 2
    assert error_lines(capsys) == [f"error: {half}: not a trained DCL model (no dcl_config.json and model.safetensors; a "
                                   "training run that did not finish leaves none: resume it with dcl --resume)"]
    (half / "model.safetensors").write_bytes(b"\x00" * 16)
    assert cli.main(argv) == 2
    assert error_lines(capsys)[0].startswith(f"error: {half / 'model.safetensors'}: not a safetensors file")
    (half / "dcl_config.json").write_text(json.dumps({"modes": [], "hidden_size": "big", "colour": 1}))
    assert cli.main(argv) == 2
    assert error_lines(capsys)[0].startswith(f"error: {half / 'dcl_config.json'}: not a DCL model config")


def test_eval_that_fails_keeps_the_earlier_results_whole(tmp_path, capsys):
    d = tmp_path / "ww"
    for i in range(4):
        write_json(d / f"{i}.json", whowhen_record(mistake_agent=["Planner", "Coder"][i % 2], mistake_step=str(i % 2)))
    out = tmp_path / "ev"
    assert cli.main(["eval", str(d), "--out-dir", str(out), "--bootstrap", "10", "--no-progress"]) == 0
    earlier = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(earlier) == ["agent_confusion.png", "metrics.json", "mode_f1.png"]
    capsys.readouterr()
    for content in ("", '{"id": "nothing-here", "agent": "Coder"}\n'):  # no predictions; none matching (scored all wrong)
        preds = tmp_path / "p.jsonl"
        preds.write_text(content)
        assert cli.main(["eval", str(d), "--predictions", str(preds), "--out-dir", str(out)]) == 2
        assert len(lines := error_lines(capsys)) == 1 and lines[0].startswith(f"error: {preds}: ")
        assert lines[0].endswith("nothing written")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == earlier
    assert leftovers(tmp_path) == []


def test_build_replaces_the_hf_dataset_whole(tmp_path):
    d = tmp_path / "ww"
    for i in range(3):
        write_json(d / f"{i}.json", whowhen_record())
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "stale.arrow").write_text("an earlier dataset's file")
    assert cli.main(["build", "dcl", str(d), "-o", str(tmp_path / "rows.jsonl"), "--hf-dir", str(hf), "--no-progress"]) == 0
    assert (hf / "dataset_info.json").is_file() and not (hf / "stale.arrow").exists()  # one dataset, not two mixed
    assert leftovers(tmp_path) == []


def test_benchmark_that_failed_while_training_leaves_no_model(tmp_path, capsys):
    """Training stopped (here: the embedding cache cannot be written) leaves neither ``OUT/model``
    nor its partial copy, so a rerun trains afresh."""
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_trajs(train, system_runs(["Planner", "Coder", "Tester"], 6, "tr", 1))
    write_trajs(test, system_runs(["Alice", "Bob"], 4, "te", 2))
    (tmp_path / "afile").write_text("")
    out = tmp_path / "b"
    argv = ["benchmark", "--train", str(train), "--test", str(test), "--out", str(out), "--epochs", "1", "--no-progress",
            "--inputs", "features+text"]
    assert cli.main([*argv, "--embedding-cache", str(tmp_path / "afile" / "cache.safetensors")]) == 2
    assert error_lines(capsys)[0].startswith("error: ") and not (out / "model").exists() and leftovers(tmp_path) == []


def test_benchmark_rerun_after_a_failure_reuses_the_trained_model(tmp_path, capsys):
    """A run that failed after training kept ``OUT/model``: the rerun is refused with the way to
    score that model (``--model OUT/model``), which then completes without training again."""
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_trajs(train, system_runs(["Planner", "Coder", "Tester"], 6, "tr", 1))
    write_trajs(test, system_runs(["Alice", "Bob"], 4, "te", 2))
    out = tmp_path / "b"
    argv = ["benchmark", "--train", str(train), "--test", str(test), "--out", str(out), "--bootstrap", "20", "--no-progress"]
    assert cli.main([*argv, "--epochs", "1"]) == 0
    weights = (out / "model" / "model.safetensors").read_bytes()
    (out / "benchmark.json").unlink()  # as a run that failed after training leaves it
    capsys.readouterr()
    assert cli.main([*argv, "--epochs", "1"]) == 2
    assert error_lines(capsys) == [f"error: {out} holds the trained model of an earlier benchmark run that did not finish "
                                   f"({out / 'model'}): score it without training again with --model {out / 'model'}, or "
                                   "choose another --out, or remove it"]
    assert cli.main([*argv, "--model", str(out / "model")]) == 0
    report = json.loads((out / "benchmark.json").read_text())
    assert report["model"] == str(out / "model") and (out / "model" / "model.safetensors").read_bytes() == weights
    capsys.readouterr()
    assert cli.main([*argv, "--model", str(out / "model")]) == 2  # a finished run is never overwritten
    assert error_lines(capsys) == [f"error: {out} holds an earlier benchmark run (benchmark.json, model): choose another "
                                   "--out, or remove it"]
    assert leftovers(tmp_path) == []


def test_outputs_replaced_whole_or_not_at_all(tmp_path):
    """The writers every train output goes through (a gguf conversion's cache folder too): a
    failure keeps what was there and leaves no temporary file or folder."""
    from aegis_probe.train.files import replacing, replacing_dir, write_text

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("complete")
    with pytest.raises(OSError), replacing_dir(model) as partial:
        (partial / "config.json").write_text("half")
        raise OSError("disk full")
    assert [p.name for p in model.iterdir()] == ["config.json"] and (model / "config.json").read_text() == "complete"
    with replacing_dir(model) as partial:
        (partial / "weights").write_text("new")
    assert [p.name for p in model.iterdir()] == ["weights"]  # replaced, not mixed with the earlier files
    out = write_text(tmp_path / "a.json", "1")
    with pytest.raises(KeyboardInterrupt), replacing(out) as tmp:
        tmp.write_text("2")
        raise KeyboardInterrupt
    assert out.read_text() == "1" and leftovers(tmp_path) == []


def test_exported_files_are_readable_like_any_other_output(tmp_path):
    """Each Who&When file was written through mkstemp, whose files only their owner may read."""
    import os

    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    old = os.umask(0o022)
    try:
        assert cli.main(["export", str(src), "--format", "whowhen", "-o", str(tmp_path / "out")]) == 0
    finally:
        os.umask(old)
    (exported,) = (tmp_path / "out").iterdir()
    assert exported.stat().st_mode & 0o777 == 0o644 and leftovers(tmp_path) == []
