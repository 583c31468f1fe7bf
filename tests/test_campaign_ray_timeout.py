"""A campaign run that outlasts ``run_timeout`` on the Ray executor (a real local Ray, loopback
only): recorded once as timed out, never retried by Ray (each retry hung again for the whole
timeout, three times in all)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:  # not imported here: Ray reads its switches at import
    pytest.skip("needs Ray (the scale extra)", allow_module_level=True)
pytest.importorskip("autogen_agentchat")

from aegis_probe.executors import RayExecutor  # noqa: E402
from aegis_probe.injection.campaign import RUNS_FILE, run_campaign  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
HANGING_APP = """
import sys, threading
sys.path.insert(0, {examples!r})
from autogen_math import AGENTS, policy, build_app as _build

def build_app(*args, **kwargs):
    with open({attempts!r}, "a") as fh:  # the run's first step, timed with it
        fh.write("run\\n")
    return _build(*args, **kwargs)

def run_app(app, task):
    threading.Event().wait()  # never answers
"""


@pytest.fixture
def loopback_ray(monkeypatch):
    """Ray's switches for a local instance on 127.0.0.1 only (set before Ray is imported)."""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a new local instance, not a cluster
    import ray

    if ray.is_initialized():  # another module's: this test starts its own, with the app shipped
        ray.shutdown()


def test_a_run_over_its_timeout_on_ray_is_recorded_once_not_retried(loopback_ray, tmp_path):
    attempts = tmp_path / "attempts.log"
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "hanging.py").write_text(HANGING_APP.format(examples=str(EXAMPLES), attempts=str(attempts)))
    tasks = tmp_path / "tasks.jsonl"
    lines = (EXAMPLES / "math_tasks.jsonl").read_text().splitlines()
    tasks.write_text(next(t for t in lines if "train" in t) + "\n")
    executor = RayExecutor(concurrency=2, max_retries=2,
                           init={"num_cpus": 2, "include_dashboard": False, "log_to_driver": False})

    run_campaign(f"{apps / 'hanging.py'}:build_app", tasks, tmp_path / "out", plans_per_run=0, progress=False,
                 executor=executor, run_timeout=3)

    records = [json.loads(line) for line in (tmp_path / "out" / RUNS_FILE).read_text().splitlines()]
    assert [r["key"] for r in records] == ["train/baseline"], "one record"
    hung = records[0]
    assert hung["timed_out"] is True and hung["error"].startswith("RunTimeout: the run took longer than 3 s"), hung
    assert attempts.read_text().split() == ["run"], "run once: not retried by Ray (max_retries=2)"
