"""Checks every newer framework's demo passes the same way (tests/test_langgraph.py,
test_openai_agents.py, test_ag2.py, test_crewai.py): a planted failure blamed on the calculator's
step, an injection campaign that keeps labelled failures, ``uninstrument()`` restoring every
patched original, and a policy whose calculator tool raises. Against the loopback model server."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import aegis_probe
from aegis_probe import semconv as sc
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.counterfactual import blame
from aegis_probe.demos.task import judge
from aegis_probe.injection.campaign import run_campaign
from aegis_probe.modelserver import Policy, Reply
from aegis_probe.store import TraceStore
from aegis_probe.trajectory import load_trajectories
from test_replay import _planted_failure, _record

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
CORRECTION = "(17 + 25) * 3 = 126"


def blame_finds_planted_step(demo: ModuleType, model_server, tmp_path: Path) -> None:
    """The calculator evaluates the wrong expression at step 1; blame (scan) finds and labels that step."""
    store = TraceStore(tmp_path / "store")
    policy = _planted_failure(demo)
    trace_id = _record(demo, policy, model_server, store)
    failed = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert failed.outcome.success is False and failed.steps[1].agent == "calculator"

    def fixer(traj, t):
        return CORRECTION if traj.steps[t].agent == "calculator" else traj.steps[t].output

    live = model_server(policy)
    report = blame(trace_id, AppSpec(demo.build_app, demo.run_app), fixer=fixer, judge=judge,
                   endpoint=Endpoint(live.base_url, "aegis-scripted", "sk-test"), mode="scan", store=store)
    assert report.found and report.step == 1 and report.agent == "calculator"
    assert report.evidence.success and "126" in report.evidence.answer
    labelled = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert [(f.agent, f.step) for f in labelled.labels.faults] == [("calculator", 1)]


def campaign_keeps_labelled_failures(example: str, demo: ModuleType, tmp_path: Path) -> None:
    """An injection campaign over two math tasks keeps failed runs, each labelled with its fault's step."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join((EXAMPLES / "math_tasks.jsonl").read_text().splitlines()[:2]) + "\n")
    out = tmp_path / "campaign"
    rows = run_campaign(f"{EXAMPLES / example}:build_app", tasks, out, plans_per_run=4, seed=3,
                        modes=("FM-1.1", "FM-2.6", "FM-3.3"), progress=False)
    kept = {t.trace_id: t for t in load_trajectories(out / "traces")} if (out / "traces").exists() else {}
    assert sum(r["kept"] for r in rows) == len(kept) > 0
    for traj in kept.values():
        assert traj.framework == demo.FRAMEWORK and traj.outcome.success is False
        fault = traj.labels.faults[0]
        assert fault.agent in demo.AGENTS and traj.steps[fault.step].agent == fault.agent


def uninstrument_restores_originals(names: list[tuple[Any, str]], instrument: Callable[[], object]) -> None:
    """``instrument()`` replaces every ``owner.name`` in ``names``; ``aegis_probe.uninstrument()`` restores each exactly."""
    before = {(owner, name): vars(owner)[name] for owner, name in names}
    instrument()
    assert all(vars(owner)[name] is not saved for (owner, name), saved in before.items())
    aegis_probe.uninstrument()
    assert all(vars(owner)[name] is saved for (owner, name), saved in before.items())


def raising_tool_policy(demo: ModuleType) -> Policy:
    """The demo's policy, except each call of its calculator tool gets an expression the tool raises on."""
    def policy(body):
        reply = demo.policy(body)
        if reply.tool_calls and reply.tool_calls[0][0] == demo.TOOL:
            return Reply(tool_calls=[(demo.TOOL, {"expression": "(17 + 25) * 3 ++"})])  # the tool raises
        return reply

    return policy


def the_one_run_ended_cancelled(probe: Any, store_dir: Path) -> str:
    """The store's one trace is a run ended cancelled (ERROR, ``error.type`` ``CancelledError``) and is
    the probe's last run (what an app leaving a stream early gets, in every adapter); its trace id."""
    probe.flush()
    store = TraceStore(store_dir)
    (trace_id,) = store.traces()
    (root,) = [r for r in store.trace(trace_id) if r.parent_span_id is None]
    assert (root.status, root.attributes[sc.ERROR_TYPE]) == ("ERROR", "CancelledError")
    assert probe.last_run is not None and probe.last_run.trace_id == trace_id
    return trace_id
