"""Labels are append-only facts with their source: blame (and a model's attribution) on an injected
trace add their findings next to the injection's label, which stays the primary label; the report
shows each with its source and never a search mode as a failure mode."""

from __future__ import annotations

import json
import re

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.counterfactual import blame
from aegis_probe.demos import autogen as demo
from aegis_probe.demos.task import judge
from aegis_probe.injection import InjectionPlan
from aegis_probe.report.html import render_report, step_marks
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import Fault, Labels, LabelSet, Trajectory, label_attributes

CORRECT = "(17 + 25) * 3 = 126"


def _fixer(traj: Trajectory, t: int) -> str | None:
    """The calculator's corrected answer; the other steps were right."""
    return CORRECT if traj.steps[t].agent == "calculator" else traj.steps[t].output


def _injected_failed_run(model_server, store: TraceStore) -> tuple[str, Fault]:
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=store, judge=judge)
    with probe.inject(InjectionPlan.single("calculator", "FM-2.6", "response_corruption")) as injector:
        demo.run_app(app, demo.TASK)
    probe.flush()
    probe.uninstrument()
    (applied,) = injector.applied
    return probe.last_trace_id, Fault(**applied.model_dump(include=set(Fault.model_fields)))


def _root_attributes(store: TraceStore, trace_id: str) -> dict:
    return next(s for s in store.trace(trace_id) if s.parent_span_id is None).attributes


def test_blame_adds_to_an_injection_label_and_the_report_shows_both(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    trace_id, injected = _injected_failed_run(model_server, store)
    before = Trajectory.from_spans(store.trace(trace_id))
    assert before.outcome.success is False and before.labels.faults == [injected] and before.labels.source == "injection"
    raw_injection_label = _root_attributes(store, trace_id)[sc.LABEL_FAULTS]

    live = model_server(demo.policy)
    spec = AppSpec(demo.build_app, demo.run_app)
    endpoint = Endpoint(live.base_url, "aegis-scripted", "sk-test")
    for search in ("scan", "bisect"):
        report = blame(trace_id, spec, fixer=_fixer, judge=judge, endpoint=endpoint, search=search, store=store)
        assert report.found and report.step == injected.step and report.agent == "calculator"

    after = Trajectory.from_spans(store.trace(trace_id))
    assert _root_attributes(store, trace_id)[sc.LABEL_FAULTS] == raw_injection_label, "the injection label is untouched"
    assert after.labels.faults == [injected] and after.labels.source == "injection", "the primary label is the injection's"
    assert after.labels.sources == ["injection", "blame:replay:scan", "blame:replay:bisect"]
    blamed = after.labels.of("blame")
    assert [(f.agent, f.step, f.mode) for f in blamed] == [("calculator", injected.step, None)] * 2
    assert after.labels.of("injection") == [injected]

    # Blaming again with the same search adds nothing new and removes nothing.
    blame(trace_id, spec, fixer=_fixer, judge=judge, endpoint=endpoint, search="scan", store=store)
    again = Trajectory.from_spans(store.trace(trace_id))
    assert again.labels.sets == after.labels.sets

    # The report: the injected step is marked injected (FM-2.6, from the event and the label)
    # and blamed (no mode: blame finds a step, not a failure mode), each with its source.
    marks = step_marks(after)
    assert sorted(marks) == [injected.step]
    assert [(m.kind, m.mode, m.source, m.details.get("search")) for m in marks[injected.step]] == [
        ("injected", "FM-2.6", "aegis.injection + label injection", None),
        ("blamed", None, "aegis.blame + label blame:replay:scan", "scan"),
        ("blamed", None, "aegis.blame + label blame:replay:bisect", "bisect"),
    ]
    html = render_report(after)
    assert not re.search(r"(?i)blamed\s*(</b>\s*<span class=\"mode\">)?\s*(scan|bisect)\b", html), "a search mode shown as a failure mode"
    for source in ("injection", "blame:replay:scan", "blame:replay:bisect"):
        assert f"<td>{source}</td>" in html


def test_attribution_verdict_sits_next_to_the_labels_and_is_never_primary():
    attrs = {
        sc.LABEL_FAULTS: json.dumps([{"agent": "coder", "step": 1, "mode": "FM-2.6", "strategy": "response_corruption"}]),
        sc.LABEL_SOURCE: "injection",
        f"{sc.ATTRIBUTION}.agent": "reviewer", f"{sc.ATTRIBUTION}.step": 2, f"{sc.ATTRIBUTION}.modes": ["FM-3.3"],
        f"{sc.ATTRIBUTION}.model": "dcl-small", f"{sc.ATTRIBUTION}.agent_score": 0.8, f"{sc.ATTRIBUTION}.step_score": 0.6,
    }
    from aegis_probe.storage.otlp_json import SpanRecord

    root = SpanRecord("ab" * 16, "cd" * 8, None, "invoke_workflow team", 1, 2, attributes=attrs)
    traj = Trajectory.from_spans([root])
    assert traj.labels.source == "injection" and traj.labels.faults[0].agent == "coder"
    assert traj.labels.sources == ["injection", "attribution:dcl-small"]
    assert [(f.agent, f.step, f.mode) for f in traj.labels.of("attribution")] == [("reviewer", 2, "FM-3.3")]

    only_verdict = Trajectory.from_spans([SpanRecord("ab" * 16, "cd" * 8, None, "invoke_workflow team", 1, 2,
                                                     attributes={k: v for k, v in attrs.items() if k.startswith(sc.ATTRIBUTION)})])
    assert only_verdict.labels.faults == [] and only_verdict.labels.source is None, "a model's guess is not a label to train on"


def test_label_attributes_append_per_source():
    from aegis_probe.storage.otlp_json import SpanRecord

    first, second = Fault(agent="a", step=0), Fault(agent="b", step=1)
    root = SpanRecord("ab" * 16, "cd" * 8, None, "invoke_workflow team", 1, 2,
                      attributes={sc.LABEL_FAULTS: json.dumps([first.model_dump()]), sc.LABEL_SOURCE: "injection"})
    added = label_attributes([root], "blame:scan", [second])
    assert list(added) == [sc.LABELS_PREFIX + "blame:scan"], "only the source's own attribute is written"
    root.attributes.update(added)
    root.attributes.update(label_attributes([root], "blame:scan", [second, first]))
    traj = Trajectory.from_spans([root])
    assert traj.labels.sets == [LabelSet(source="injection", faults=[first]), LabelSet(source="blame:scan", faults=[second, first])]


def test_imported_labels_keep_their_source_as_a_set():
    labels = Labels(faults=[Fault(agent="x", step=3)], source="whowhen")
    assert labels.sets == [LabelSet(source="whowhen", faults=[Fault(agent="x", step=3)])]
    assert labels.of("whowhen") == labels.faults


@pytest.mark.parametrize("apart", ["threads", "processes"])
def test_two_searches_labelling_one_trace_at_once_keep_both_labels(apart, model_server, tmp_path, monkeypatch):
    """Each search reads the stored label, merges its own and appends it: two at once (threads of
    one process, or two processes) wait for each other, so neither label is lost. Each search's
    read is held open until the other has read too, or a second has passed: unguarded, both would
    read before either writes."""
    import multiprocessing
    import threading

    from aegis_probe.counterfactual.blame import BlameReport, _write_label

    store = TraceStore(tmp_path / "store")
    trace_id, injected = _injected_failed_run(model_server, store)
    original = Trajectory.from_spans(store.trace(trace_id))
    forked = multiprocessing.get_context("fork")
    both_read = (threading if apart == "threads" else forked).Barrier(2, timeout=1.0)
    read = store.trace

    def read_then_linger(trace: str):
        spans = read(trace)
        try:
            both_read.wait()
        except threading.BrokenBarrierError:  # the other search is waiting for this one to finish
            pass
        return spans

    monkeypatch.setattr(store, "trace", read_then_linger)
    reports = [BlameReport(trace_id, "scan", step=s, agent=original.steps[s].agent) for s in (0, injected.step)]
    kind = threading.Thread if apart == "threads" else forked.Process
    searches = [kind(target=_write_label, args=(store, original, r, "blame:replay:scan")) for r in reports]
    for search in searches:
        search.start()
    for search in searches:
        search.join(60)
    assert apart == "threads" or [search.exitcode for search in searches] == [0, 0]  # type: ignore[union-attr]

    monkeypatch.undo()
    after = Trajectory.from_spans(store.trace(trace_id))
    assert sorted((f.agent, f.step) for f in after.labels.of("blame")) == sorted((r.agent, r.step) for r in reports)
    assert after.labels.faults == [injected], "the injection label is untouched"
