"""The final SFT/GRPO model lands in ``<out>/model`` whole or not at all: a save killed or failing
for real (a file size limit, RLIMIT_FSIZE, in a child process running the train CLI) leaves no
model that loads half-written; a killed one leaves ``<out>/.model.partial``, which loading refuses
with one error; a failing one keeps the earlier model."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from test_trainers import CASES, SYSTEM, cli, read_log, sft_rows, tiny_qwen  # noqa: E402,F401 - the trainer tests' fixtures

pytestmark = pytest.mark.train

#: Above every file the runs below write but the final model's weights (about 400 kB).
LIMIT = 100_000
#: Runs the train CLI with files limited to ``LIMIT`` bytes; with ``kill``, as the OS does by
#: default (SIGXFSZ; Python ignores it, so that the write fails with EFBIG instead).
CHILD = """
import resource, signal, sys
from aegis_probe.train.cli import main
if sys.argv[1] == "kill":
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
sys.exit(main(sys.argv[3:]))
"""
SHORT = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--report_to", "none"]


def limited(how: str, *argv: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, how, str(LIMIT), *map(str, argv)], capture_output=True,
                          text=True, timeout=600)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_killed_save_leaves_a_partial_model_that_loading_refuses(tiny_qwen, sft_rows, tmp_path, capsys):  # noqa: F811
    from aegis_probe.train.cli import main
    from aegis_probe.train.trainers.modelio import load_causal_lm

    out = tmp_path / "sft"
    proc = limited("kill", "sft", "--data", sft_rows, "--model", tiny_qwen, "--out", out, *SHORT, "--save_strategy", "no")
    assert proc.returncode == -signal.SIGXFSZ, proc.stderr[-3000:]  # killed while writing the weights
    partial = out / ".model.partial"
    weights = partial / "model.safetensors"  # transformers writes it as a temporary file, renamed when written
    assert (partial / "config.json").exists() and (not weights.exists() or weights.stat().st_size <= LIMIT)
    assert not (out / "model").exists() and not (out / "model.safetensors").exists()

    with pytest.raises(ValueError, match=r"\.model\.partial is what a save that failed or was stopped left"):
        load_causal_lm(out)
    with pytest.raises(ValueError, match="a partly saved model"):
        load_causal_lm(partial)
    grpo_rows = tmp_path / "grpo.jsonl"
    grpo_rows.write_text("".join(json.dumps({"id": "g", "prompt": [{"role": "system", "content": SYSTEM},
                                                                   {"role": "user", "content": text}]}) + "\n"
                                 for text, _, _ in CASES), encoding="utf-8")
    capsys.readouterr()
    assert main(["grpo", "--data", str(grpo_rows), "--model", str(out), "--out", str(tmp_path / "grpo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {out}: its final model was not saved completely (.model.partial is what a save that failed "
                   "or was stopped left); rerun the training command to save it (--resume continues from its last "
                   "checkpoint)"]

    cli("sft", "--data", sft_rows, "--model", tiny_qwen, "--out", out, *SHORT, "--save_strategy", "no", "--resume")
    assert not partial.exists() and (out / "model" / "model.safetensors").stat().st_size > LIMIT
    model, _ = load_causal_lm(out)
    assert model.num_parameters() > 0


def test_a_failing_save_keeps_the_earlier_model(tiny_qwen, sft_rows, tmp_path):  # noqa: F811
    from aegis_probe.train.trainers.modelio import load_causal_lm

    out = tmp_path / "sft"
    cli("sft", "--data", sft_rows, "--model", tiny_qwen, "--out", out, *SHORT)
    earlier = files(out / "model")
    assert "model.safetensors" in earlier and (out / "checkpoint-1").is_dir()

    proc = limited("raise", "sft", "--data", sft_rows, "--model", tiny_qwen, "--out", out, *SHORT, "--resume",
                   "--max_steps", "2", "--save_strategy", "no")
    assert proc.returncode == 1 and "File too large" in proc.stderr, proc.stderr[-3000:]
    assert files(out / "model") == earlier  # replaced only by a complete save
    assert not (out / ".model.partial").exists() and not (out / "model.safetensors").exists()
    assert [r["step"] for r in read_log(out) if r.get("event") == "done"] == [1]
    model, _ = load_causal_lm(out)
    assert model.num_parameters() > 0
