"""The main job, as a user runs it: ``python -m aegis_probe demo`` and the trace browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import aegis_probe
from aegis_probe.demos import FRAMEWORKS


def _cli(*args: str, cwd, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AEGIS_TRACE_DIR"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "aegis_probe", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_demo_runs_offline_and_writes_trace_and_report(framework, tmp_path):
    proc = _cli("demo", "--framework", framework, cwd=tmp_path, env_extra={"OPENAI_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "outcome  success" in out and "126" in out
    trace_id = re.search(r"^trace\s+([0-9a-f]{32})$", out, re.MULTILINE).group(1)
    rows = re.findall(r"^\s+(\d+)\s{2}\S", out, re.MULTILINE)
    assert rows == [str(i) for i in range(len(rows))] and len(rows) >= 3, "one row per step, 0-based"
    # The trace is in ./aegis-traces, and the report the demo printed exists.
    [traj] = aegis_probe.load_trajectories(tmp_path / "aegis-traces")
    assert traj.trace_id == trace_id and traj.framework == framework and traj.outcome.success is True
    assert len(traj.steps) == len(rows)
    report = re.search(r"report written to (\S+)", out).group(1)
    assert "<html" in (tmp_path / report).read_text()[:200].lower()

    listed = _cli("traces", "ls", cwd=tmp_path)
    assert listed.returncode == 0 and trace_id in listed.stdout and framework in listed.stdout
    shown = _cli("traces", "show", trace_id[:8], cwd=tmp_path)
    assert shown.returncode == 0 and f"trace    {trace_id}" in shown.stdout


def test_demo_against_an_endpoint_needs_a_key(tmp_path):
    proc = _cli("demo", "--base-url", "http://127.0.0.1:9/v1", cwd=tmp_path, env_extra={"OPENAI_API_KEY": ""})
    assert proc.returncode == 2 and "OPENAI_API_KEY" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_against_an_endpoint(model_server, tmp_path):
    from aegis_probe.demos import autogen as demo

    server = model_server(demo.policy)
    proc = _cli("demo", "--base-url", server.base_url, "--model", "served-model", "--api-key-env", "MY_KEY",
                cwd=tmp_path, env_extra={"MY_KEY": "sk-from-env-abcdefghijklmnop"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"against the {server.base_url}" in proc.stdout and "outcome  success" in proc.stdout
    assert server.requests and all(r["model"] == "served-model" for r in server.requests)
    assert "sk-from-env" not in (tmp_path / "aegis-traces" / "spans.jsonl").read_text()
