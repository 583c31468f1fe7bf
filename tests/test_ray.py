"""Campaigns and blame scans on a real local Ray (2 CPUs, loopback only): same plans, labels and
verdicts as the local executor; retries then error records; the app's code shipped to workers."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:  # not imported here: Ray reads its switches at import
    pytest.skip("needs Ray (the scale extra)", allow_module_level=True)
pytest.importorskip("autogen_agentchat")

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.apps import AppSpec, Endpoint  # noqa: E402
from aegis_probe.counterfactual import blame  # noqa: E402
from aegis_probe.demos.task import judge  # noqa: E402
from aegis_probe.executors import RayExecutor, ThreadExecutor, app_runtime_env  # noqa: E402
from aegis_probe.injection.campaign import run_campaign  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from aegis_probe.trajectory import load_trajectories  # noqa: E402
from leaky_apps import KEY, leaky_app  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
MATH = EXAMPLES / "math_tasks.jsonl"
MATH_APP = f"{EXAMPLES / 'autogen_math.py'}:build_app"


FLAKY_APP = """
import os, sys
sys.path.insert(0, {examples!r})
from autogen_math import AGENTS, build_app, policy, run_app as _run

def run_app(app, task):
    if "train" in task or "pens" in task:
        with open(os.environ["FLAKY_ATTEMPTS"], "a") as fh:
            fh.write(("raise" if "train" in task else "die") + "\\n")
        if "train" in task:
            raise RuntimeError("backend exploded")
        os._exit(3)  # the worker process dies mid-run
    return _run(app, task)
"""


@pytest.fixture(scope="module")
def flaky_package(tmp_path_factory) -> Path:
    """A package only the driver can import (its folder is on no worker's path unless shipped)."""
    root = tmp_path_factory.mktemp("apps")
    (root / "flakyteam").mkdir()
    (root / "flakyteam" / "__init__.py").write_text("")
    (root / "flakyteam" / "app.py").write_text(FLAKY_APP.format(examples=str(EXAMPLES)))
    return root


LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module", autouse=True)
def local_ray(flaky_package, tmp_path_factory):
    """A local Ray on 127.0.0.1 only (the switches must be in the environment before Ray is
    imported), with the test apps' code shipped as the Ray docs say: the job's runtime_env."""
    saved = {k: os.environ.get(k) for k in [*LOOPBACK_ENV, "FLAKY_ATTEMPTS"]}
    os.environ.update(LOOPBACK_ENV, FLAKY_ATTEMPTS=str(tmp_path_factory.mktemp("log") / "attempts.log"))
    import ray

    env = {**app_runtime_env(MATH_APP), "py_modules": [str(flaky_package / "flakyteam")]}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=env)
    yield
    ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]


def _comparable(record: dict) -> dict:
    """A run record without what differs between two executions of the same run (ids)."""
    drop = {"trace_id"}
    rec = {k: v for k, v in record.items() if k not in drop}
    if "applied" in rec:
        rec["applied"] = [{k: v for k, v in a.items() if k != "span_id"} for a in rec["applied"]]
    return rec


def _labels(out: Path) -> list[tuple]:
    return sorted((t.task, f.agent, f.step, f.mode, f.strategy, t.outcome.answer)
                  for t in load_trajectories(out / "traces") for f in t.labels.faults)


def test_local_ray_stays_on_loopback():
    import ray

    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}


def test_campaign_on_ray_matches_local_and_resumes(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(MATH.read_text().splitlines()[:3]) + "\n")
    options = dict(plans_per_run=3, seed=1, progress=False)
    local_rows = run_campaign(MATH_APP, tasks, tmp_path / "local", concurrency=1, **options)
    ray_rows = run_campaign(MATH_APP, tasks, tmp_path / "ray", executor=RayExecutor(concurrency=2), **options)
    assert ray_rows == local_rows and sum(r["kept"] for r in ray_rows) > 0
    local = {r["key"]: _comparable(r) for r in _records(tmp_path / "local")}
    remote = {r["key"]: _comparable(r) for r in _records(tmp_path / "ray")}
    assert remote == local and len(remote) == 3 * 4
    assert _labels(tmp_path / "ray") == _labels(tmp_path / "local")
    assert len(load_trajectories(tmp_path / "ray" / "baselines")) == 3

    # resume on Ray after losing the last two records: exactly those are redone, identically
    lines = (tmp_path / "ray" / "runs.jsonl").read_text().splitlines()
    (tmp_path / "ray" / "runs.jsonl").write_text("\n".join(lines[:-2]) + "\n")
    assert run_campaign(MATH_APP, tasks, tmp_path / "ray", executor=RayExecutor(concurrency=2), **options) == local_rows
    redone = _records(tmp_path / "ray")[-2:]
    assert sorted(r["key"] for r in redone) == sorted(json.loads(line)["key"] for line in lines[-2:])
    assert all(_comparable(r) == local[r["key"]] for r in redone)


def test_failing_and_dying_runs_are_retried_then_recorded(flaky_package, tmp_path, monkeypatch):
    """A run that raises and one whose worker process dies: retried, then error records; the
    other runs go on. The app is a package only the driver can import: it is shipped."""
    monkeypatch.syspath_prepend(str(flaky_package))
    assert app_runtime_env("flakyteam.app:build_app") == {"py_modules": [str(flaky_package / "flakyteam")]}
    attempts = Path(os.environ["FLAKY_ATTEMPTS"])
    lines = MATH.read_text().splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join([next(t for t in lines if "train" in t), next(t for t in lines if "pens" in t),
                                next(t for t in lines if "train" not in t and "pens" not in t)]) + "\n")
    out = tmp_path / "out"
    run_campaign("flakyteam.app:build_app", tasks, out, plans_per_run=1, progress=False,
                 executor=RayExecutor(concurrency=2, max_retries=1))
    records = _records(out)
    errors = {r["task_id"]: r for r in records if "error" in r}
    assert len(errors) == 2 and len(records) == 4  # 3 baselines, 1 injected run of the healthy task
    raised = next(r for r in errors.values() if "RuntimeError" in r["error"])
    assert raised["error"] == "RuntimeError: backend exploded" and "run_app" in raised["traceback"]
    died = next(r for r in errors.values() if r is not raised)
    assert "WorkerCrashedError" in died["error"] or "died" in died["error"].lower(), died["error"]
    assert sorted(attempts.read_text().split()) == ["die", "die", "raise", "raise"]  # 1 try + 1 retry each


def test_ray_needs_an_app_reference(tmp_path):
    from aegis_probe.demos import autogen as demo

    with pytest.raises(ValueError, match="app reference"):
        run_campaign(AppSpec(demo.build_app, demo.run_app, policy=demo.policy), [{"id": "t", "task": "x"}],
                     tmp_path, executor=RayExecutor(concurrency=1), progress=False)


def test_a_campaign_travels_as_its_recipe(tmp_path):
    """What a Ray task gets: the app by reference, the seed, the operator and the manipulators
    (an LLM manipulator rebuilds its client there); not the driver's stores or tasks."""
    import pickle

    from aegis_probe.injection import LLMManipulator
    from aegis_probe.injection.campaign import Campaign

    llm = LLMManipulator("m", "http://127.0.0.1:9/v1", "sk-test", temperature=0.3)
    campaign = Campaign(AppSpec.load(MATH_APP), [{"id": "t", "task": "x"}], tmp_path, seed=7, operator="llm",
                        manipulators={"llm": llm})
    copy = pickle.loads(pickle.dumps(campaign))
    assert (copy.seed, copy.operator, copy.tasks, copy.app.agents) == (7, "llm", [], campaign.app.agents)
    assert copy.app.ref == "autogen_math:build_app" and copy.out != campaign.out
    rebuilt = copy.manipulators["llm"]
    assert (rebuilt.model, rebuilt.temperature, str(rebuilt.client.base_url)) == ("m", 0.3, "http://127.0.0.1:9/v1/")
    assert rebuilt.client is not llm.client


# -- blame ------------------------------------------------------------------------------------
def _failed_run(model_server, store: TraceStore):
    """A failed autogen demo run: the calculator evaluates the wrong expression (step 1)."""
    from aegis_probe.demos import autogen as demo

    def policy(body):
        reply = demo.policy(body)
        return Reply(tool_calls=[(n, {"expression": "(17 + 25) * 2"}) for n, _ in reply.tool_calls]) if reply.tool_calls else reply

    server = model_server(policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store, judge=judge)
    demo.run_app(app, demo.TASK)
    probe.flush()
    probe.uninstrument()
    return probe.last_trace_id, Endpoint(model_server(policy).base_url, "aegis-scripted", "sk-test")


def _fix_late_steps(traj, t):
    """Corrections that flip the run at the calculator's step 1 and the reviewer's step 2."""
    agent = traj.steps[t].agent
    return {"calculator": "(17 + 25) * 3 = 126", "reviewer": "The total is 126 coins. TERMINATE"}.get(agent, f"rewritten {t}")


def _rewrite_all(traj, t):
    return f"rewritten step {t}"


def _rewrite_first(traj, t):
    """Only step 0 has a correction: its one replay uses up max_replays=1 without exhausting it."""
    return "rewritten step 0" if t == 0 else traj.steps[t].output


def _store_view(store: TraceStore) -> list[tuple]:
    """Per stored trace: is it a replay, its outcome, its labelled steps."""
    rows = []
    for spans in store.traces().values():
        root = next(s for s in spans if s.parent_span_id is None)
        traj = aegis_probe.Trajectory.from_spans(spans)
        rows.append((sc.REPLAY_OF in root.attributes, traj.outcome.success, [f.step for f in traj.labels.faults]))
    return sorted(rows)


def _view(report):
    return (report.step, report.agent, report.exhausted, report.tokens,
            [(a.step, a.agent, a.correction, a.success, a.answer, a.error) for a in report.attempts])


@pytest.mark.parametrize(("fixer", "budget", "exhausted", "attempts"), [
    (_fix_late_steps, {}, None, 2),
    (_rewrite_all, {"max_replays": 2}, "max_replays=2", 2),
    (_rewrite_all, {"max_tokens": 1}, "max_tokens=1", 1),
    (_rewrite_first, {"max_replays": 1}, None, 1),
])
def test_blame_scan_on_ray_equals_local_scan(fixer, budget, exhausted, attempts, model_server, tmp_path):
    app = AppSpec.load("aegis_probe.demos.autogen")
    reports, stores = [], []
    for name, executor in (("local", None), ("ray", RayExecutor(concurrency=2)), ("threads", ThreadExecutor(2))):
        store = TraceStore(tmp_path / name)
        trace_id, endpoint = _failed_run(model_server, store)
        reports.append(blame(trace_id, app, fixer=fixer, judge=judge, endpoint=endpoint, store=store,
                             executor=executor, **budget))
        stores.append(store)
    local, remote, threads = reports
    assert _view(remote) == _view(local) == _view(threads)
    assert remote.exhausted == exhausted and len(remote.attempts) == attempts
    assert remote.found == (fixer is _fix_late_steps)
    if remote.found:
        assert remote.step == 1 and remote.agent == "calculator" and remote.evidence.success
    # the store holds the same: the original (labelled if found) and one replayed trace per attempt
    views = [_store_view(s) for s in stores]
    assert views[0] == views[1] == views[2] and len(views[1]) == 1 + len(remote.attempts)


# -- command line -----------------------------------------------------------------------------
def test_inject_and_blame_commands_on_ray(model_server, tmp_path, capsys):
    """In-process: the executor uses the Ray this test module started."""
    from aegis_probe.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(MATH.read_text().splitlines()[0] + "\n")
    assert main(["inject", "--app", MATH_APP, "--tasks", str(tasks), "--plans-per-run", "2", "--out",
                 str(tmp_path / "out"), "--no-progress", "--executor", "ray", "--concurrency", "2"]) == 0
    assert [r["kind"] for r in _records(tmp_path / "out")].count("injected") == 2
    assert "total" in capsys.readouterr().out

    store = TraceStore(tmp_path / "store")
    trace_id, endpoint = _failed_run(model_server, store)
    assert main(["blame", "--trace", trace_id, "--app", "aegis_probe.demos.autogen", "--fixer", f"{__name__}:_fix_late_steps",
                 "--dir", str(store.path), "--base-url", endpoint.base_url, "--no-progress", "--executor", "ray"]) == 0
    assert "decisive error: step 1 by calculator" in capsys.readouterr().out


LEAKY_APP = leaky_app(raises_on="boxes")


def test_inject_command_starts_ray_and_ships_a_file_app(tmp_path):
    """As a user runs it: the command starts its own Ray and ships the app's folder to it. A run
    that raises with an API key in its message: retried, recorded, and the key is nowhere (not in
    Ray's retry message on stderr either)."""
    import subprocess
    import sys

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "leaky.py").write_text(LEAKY_APP)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(MATH.read_text().splitlines()[1:3]) + "\n")  # train, then boxes (raises)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-m", "aegis_probe", "inject", "--app", f"{tmp_path / 'app' / 'leaky.py'}:build_app",
                           "--tasks", str(tasks), "--plans-per-run", "1", "--out", str(tmp_path / "out"), "--no-progress",
                           "--executor", "ray", "--concurrency", "1"],
                          capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _records(tmp_path / "out")
    assert [r.get("kind") for r in records] == ["baseline", None, "injected"] and records[0]["success"]
    assert records[1]["error"] == "RuntimeError: upstream refused Authorization: Bearer [REDACTED]"
    assert KEY not in proc.stdout + proc.stderr + (tmp_path / "out" / "runs.jsonl").read_text()


def test_an_unreachable_ray_address_is_a_usage_error(tmp_path):
    """Nothing listens at --ray-address: exit 2 at once with what to do (ray.init retried for many minutes)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(MATH.read_text().splitlines()[0] + "\n")
    proc = subprocess.run([sys.executable, "-m", "aegis_probe", "inject", "--app", MATH_APP, "--tasks", str(tasks),
                           "--out", str(tmp_path / "out"), "--no-progress", "--executor", "ray",
                           "--ray-address", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"error: no Ray cluster answers at 127.0.0.1:{port}" in proc.stderr and "ray start --head" in proc.stderr
    assert not (tmp_path / "out").exists()
