"""Training at scale as docs/scale.md says: ``accelerate launch`` runs the SFT trainer unchanged
in two data-parallel CPU processes (gloo over loopback) on the trainer tests' tiny model. About
70 s on 2 cores, mostly two processes importing the training stack: marked slow."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")

from test_trainers import sft_rows, tiny_qwen  # noqa: E402,F401 - the trainer tests' fixtures

pytestmark = [pytest.mark.train, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sft_under_accelerate_with_two_cpu_processes(tiny_qwen, sft_rows, tmp_path):  # noqa: F811
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert launcher, "accelerate's launcher is installed with the train extra"
    out = tmp_path / "sft"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}  # loopback only
    proc = subprocess.run(
        # --multi_gpu picks accelerate's torch.distributed launcher; --use_cpu true (the trainer's
        # TrainingArguments) then runs each process on the CPU with the gloo backend
        [launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()),
         "-m", "aegis_probe.train", "sft", "--data", str(sft_rows), "--model", str(tiny_qwen), "--out", str(out),
         "--num_train_epochs", "1", "--per_device_train_batch_size", "2", "--logging_steps", "1",
         "--save_steps", "100", "--report_to", "none", "--use_cpu", "true"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    done = [r for r in log if r.get("event") == "done"]
    # 4 rows, 2 processes x 2 rows per step: one optimizer step per epoch (one process would take 2),
    # and only the main process writes the log
    assert len(done) == 1 and done[0]["step"] == 1, log
    assert (out / "model" / "model.safetensors").exists() and not (out / ".model.partial").exists()
