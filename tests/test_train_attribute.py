"""``attribute --trace`` run again: one verdict per trace per attributor (the latest) in the label
set ``attribution:<model>``; an unchanged verdict writes nothing; the injection label of the run
(recorded by construction) is never touched."""

from __future__ import annotations

import pytest

from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main as aegis_main
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import Trajectory
from aegis_probe.train import cli
from aegis_probe.train.builders import build_dcl
from aegis_probe.train.dcl.train import DCLConfig, fit
from aegis_probe.train.importers import load

pytestmark = pytest.mark.train


def _root_attributes(store: TraceStore, trace_id: str) -> dict:
    return next(s for s in store.trace(trace_id) if s.parent_span_id is None).attributes


def test_rerun_keeps_one_verdict_per_attributor_and_the_injection_label(tmp_path, capsys):
    pytest.importorskip("autogen_agentchat")
    store_dir = tmp_path / "traces"
    for inject in ("FM-2.6", "FM-1.1:reviewer"):  # two failed runs of the demo team, labelled by injection
        assert aegis_main(["demo", "--inject", inject, "--trace-dir", str(store_dir)]) == 0
    trajs = load(store_dir).trajectories
    rows = build_dcl(trajs)
    models = []
    for seed in (0, 1):  # the same model name, retrained: a second verdict with other scores
        out = tmp_path / f"seed{seed}" / "dcl"
        fit(rows, out, DCLConfig(epochs=2, seed=seed, text_embeddings=False, hidden_size=16), progress=False)
        models.append(out)
    store = TraceStore(store_dir)
    trace_id = trajs[0].trace_id
    injection = {k: v for k, v in _root_attributes(store, trace_id).items() if k.startswith("aegis.label")}
    spans_file = store_dir / "spans.jsonl"

    def attribute(model) -> None:
        assert cli.main(["attribute", "--model", str(model), "--trace", trace_id[:12], "--store", str(store_dir)]) == 0

    attribute(models[0])
    size = spans_file.stat().st_size
    attribute(models[0])
    assert spans_file.stat().st_size == size  # an unchanged verdict writes nothing (it added an event each time)
    attribute(models[1])
    capsys.readouterr()
    traj = Trajectory.from_spans(store.trace(trace_id))
    verdicts = traj.labels.of("attribution:dcl")
    assert len(verdicts) == 1  # was 2: the first model's verdict and the retrained one's
    events = [e for step in traj.steps for e in step.events if e["name"] == sc.EVENT_ATTRIBUTION]
    latest = max(events, key=lambda e: e["time_ns"])["attributes"]
    assert verdicts[0].reason and f"{latest['agent_score']:.4f}" in verdicts[0].reason  # the label is the latest verdict
    root = _root_attributes(store, trace_id)
    assert {k: v for k, v in root.items() if k.startswith("aegis.label") and "attribution" not in k} == injection
    assert traj.labels.source == "injection" and traj.labels.faults  # still the primary, training label
