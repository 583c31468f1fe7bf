"""Ctrl-C of a campaign whose run hangs (threads): the command stops at once, what it recorded
stays, and re-running it resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("autogen_agentchat")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"

HANGING_APP = f"""
import os, sys, time
sys.path.insert(0, {str(EXAMPLES)!r})
from autogen_math import AGENTS, build_app, policy, run_app as _run

def run_app(app, task):
    if "train" in task and not os.environ.get("UNSTUCK"):
        time.sleep(3600)  # an app stuck on something that never answers
    return _run(app, task)
"""


def test_ctrl_c_stops_a_campaign_with_a_hung_run_and_it_resumes(tmp_path):
    (tmp_path / "hanging.py").write_text(HANGING_APP)
    lines = (EXAMPLES / "math_tasks.jsonl").read_text().splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(t for t in lines if '"train"' in t or '"boxes"' in t) + "\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "aegis_probe", "inject", "--app", f"{tmp_path / 'hanging.py'}:build_app",
           "--tasks", str(tasks), "--plans-per-run", "0", "--out", str(out), "--no-progress", "--concurrency", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's job
    try:
        deadline = time.monotonic() + 120
        while not (out / "runs.jsonl").exists() and time.monotonic() < deadline:  # the healthy run is recorded
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err, err[-2000:]
    first = (out / "runs.jsonl").read_text()
    assert [json.loads(line)["key"] for line in first.splitlines()] == ["boxes/baseline"]

    resumed = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120,
                             env={**os.environ, "UNSTUCK": "1"})
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = (out / "runs.jsonl").read_text()
    assert after.startswith(first) and [json.loads(line)["key"] for line in after.splitlines()[1:]] == ["train/baseline"]
