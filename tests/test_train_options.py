"""Numeric options of the train commands outside their meaningful range are usage errors (exit 2,
one ``error:`` line), before anything is read, loaded or written: ``eval --k 0`` scored a step
only when exact and ``--k -1`` never; ``--seed -1``, ``benchmark --epochs 0`` (an untrained model
scored), ``build --max-tokens 0``; and the trainers' fields, from the command line or a config
file (``dcl --epochs 0`` saved an untrained model, ``--threshold 1.5`` predicted no mode, a
``"epochs": "ten"`` in a config file was a TypeError after loading the encoder)."""

from __future__ import annotations

import json

import pytest

from aegis_probe.train import cli

pytestmark = pytest.mark.train
ROW = {"id": "r1", "turns": [{"agent": "Coder", "text": "x = 1"}, {"agent": "Tester", "text": "fails"}],
       "label_agents": ["Coder"], "label_modes": [], "label_step": 0, "positive": False}


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a usage error (argparse's exit 2, or the command's error and 2)."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2, argv
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("argv, message", [
    (["eval", "SRC", "--k", "0"], "argument --k: must be at least 1, got 0"),
    (["eval", "SRC", "--k", "-2"], "argument --k: must be at least 1, got -2"),
    (["eval", "SRC", "--seed", "-1"], "argument --seed: must be at least 0, got -1"),
    (["eval", "SRC", "--bootstrap", "-5"], "argument --bootstrap: must be at least 1, got -5"),
    (["benchmark", "--train", "SRC", "--test", "SRC", "--epochs", "0"], "argument --epochs: must be at least 1, got 0"),
    (["benchmark", "--train", "SRC", "--test", "SRC", "--seed", "-1"], "argument --seed: must be at least 0, got -1"),
    (["build", "sft", "SRC", "-o", "OUT", "--max-tokens", "0"], "argument --max-tokens: must be at least 1, got 0"),
    (["build", "sft", "SRC", "-o", "OUT", "--max-tokens", "many"], "argument --max-tokens: not an integer: 'many'"),
])
def test_command_options_out_of_range_are_usage_errors(argv, message, tmp_path, capsys):
    src = tmp_path / "ww.jsonl"
    src.write_text("")
    argv = [str(src) if a == "SRC" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert usage_error(argv, capsys).endswith(message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ww.jsonl"]  # nothing written


@pytest.mark.parametrize("option, value, message", [
    ("epochs", "0", "--epochs: must be at least 1, got 0"),
    ("learning_rate", "-0.001", "--learning_rate: must be greater than 0, got -0.001"),
    ("learning_rate", "nan", "--learning_rate: must be greater than 0, got nan"),
    ("threshold", "1.5", "--threshold: must be between 0 and 1, got 1.5"),
    ("groups_per_batch", "0", "--groups_per_batch: must be at least 1, got 0"),
    ("max_turns", "-1", "--max_turns: must be at least 0, got -1"),
    ("contrastive_weight", "-1", "--contrastive_weight: must be at least 0, got -1.0"),
    ("seed", "-3", "--seed: must be at least 0, got -3"),
    ("save_total_limit", "0", "--save_total_limit: must be at least 1, got 0"),
])
def test_dcl_fields_out_of_range_from_the_command_line(option, value, message, tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    assert usage_error(["dcl", "--data", str(data), "--out", str(tmp_path / "m"), f"--{option}", value], capsys) == f"error: {message}"
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("config, message", [
    ({"epochs": 0}, "epochs: must be at least 1, got 0"),
    ({"threshold": -0.1}, "threshold: must be between 0 and 1, got -0.1"),
    ({"epochs": "ten"}, "epochs: 'ten' is not a valid value"),
    ({"epochs": 2.5}, "epochs: 2.5 is not a valid value (not an integer)"),
    ({"epochs": None}, "epochs: null is not allowed"),
    ({"learning_rate": True}, "learning_rate: True is not a valid value (not a number)"),
    ({"anonymise_agents": 3}, "anonymise_agents: 3 is not a valid value"),
    ({"modes": "FM-1.1"}, "modes: expected a list, got str"),
    ({"hidden_size": [8]}, "hidden_size: expected one value, got list"),
])
def test_dcl_config_file_values_are_read_as_their_options(config, message, tmp_path, capsys):
    """A config file's values go through the options' types and ranges (they reached DCLConfig as
    they were: "ten" epochs was a TypeError in range(), 0 epochs an untrained model)."""
    data, cfg = tmp_path / "rows.jsonl", tmp_path / "cfg.json"
    data.write_text(json.dumps(ROW) + "\n")
    cfg.write_text(json.dumps(config))
    line = usage_error(["dcl", "--data", str(data), "--out", str(tmp_path / "m"), "--config", str(cfg)], capsys)
    assert line.startswith(f"error: {cfg}: {message}")
    assert not (tmp_path / "m").exists()


def test_dcl_config_file_values_as_text_train_as_the_options_would(tmp_path, capsys):
    """``"epochs": "1"``, ``"ensemble": "1"`` and ``"anonymise_agents": "false"`` read as ``--epochs 1
    --ensemble 1 --anonymise_agents false``."""
    data, cfg = tmp_path / "rows.jsonl", tmp_path / "cfg.yaml"
    data.write_text(json.dumps(ROW) + "\n")
    cfg.write_text('epochs: "1"\nensemble: "1"\nanonymise_agents: "false"\ntext_embeddings: false\nhidden_size: 8\n'
                   'modes: [FM-1.1]\n')
    assert cli.main(["dcl", "--data", str(data), "--out", str(tmp_path / "m"), "--config", str(cfg), "--no-progress"]) == 0
    spec = json.loads((tmp_path / "m" / "dcl_config.json").read_text())
    assert (spec["anonymise_agents"], spec["hidden_size"], spec["modes"]) == (False, 8, ["FM-1.1"])
    assert json.loads((tmp_path / "m" / "log.jsonl").read_text().splitlines()[-1])["epoch"] == 1


def test_config_file_that_is_not_utf8_is_named(tmp_path, capsys):
    data, cfg = tmp_path / "rows.jsonl", tmp_path / "cfg.json"
    data.write_text(json.dumps(ROW) + "\n")
    cfg.write_bytes(b"\xff\xfe{}")
    line = usage_error(["dcl", "--data", str(data), "--out", str(tmp_path / "m"), "--config", str(cfg)], capsys)
    assert line.startswith(f"error: {cfg}: not UTF-8 text")  # was the codec's message alone


@pytest.mark.parametrize("command, option, value, message", [
    ("sft", "learning_rate", "-1", "--learning_rate: must be greater than 0, got -1.0"),
    ("sft", "num_train_epochs", "0", "--num_train_epochs: must be greater than 0, got 0.0"),
    ("sft", "per_device_train_batch_size", "0", "--per_device_train_batch_size: must be at least 1, got 0"),
    ("sft", "max_steps", "0", "--max_steps: must be -1 (train for the epochs) or at least 1, got 0"),
    ("sft", "lora_r", "0", "--lora_r: must be at least 1, got 0"),
    ("grpo", "num_generations", "1", "--num_generations: must be at least 2, got 1"),
    ("grpo", "temperature", "0", "--temperature: must be greater than 0, got 0.0"),
    ("grpo", "top_p", "1.5", "--top_p: must be greater than 0 and at most 1, got 1.5"),
])
def test_trl_fields_out_of_range_before_the_model_is_loaded(command, option, value, message, tmp_path, capsys):
    pytest.importorskip("trl")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "s", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                                "prompt": [{"role": "user", "content": "q"}]}) + "\n")
    argv = [command, "--data", str(data), "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o"), f"--{option}", value]
    assert usage_error(argv, capsys) == f"error: {message}"
    assert not (tmp_path / "o").exists()


def test_a_missing_base_model_is_named(tmp_path, capsys):
    """A --model path that is not there (it was read as a Hub repo id: 'Repo id must use alphanumeric chars')."""
    pytest.importorskip("trl")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "s", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}) + "\n")
    line = usage_error(["sft", "--data", str(data), "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o")], capsys)
    assert line == f"error: {tmp_path / 'no-model'}: no model directory or .gguf file there (nothing is downloaded)"
