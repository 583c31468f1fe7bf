"""Verdicts as GenAI evaluation events (``gen_ai.evaluation.result``) on the spans they judge: a
judged outcome, an outcome set after the run, an injected fault (real AutoGen app), labels any
source adds to a stored trace (blame, attribution, new methods: one path), each event once."""

from __future__ import annotations

import json

import aegis_probe
from aegis_probe.capture import evaluations as ev
from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main
from aegis_probe.injection import InjectionPlan, run_with_plan
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import Fault, label_attributes
from toyrun import make_probe, run_script, sample_steps


def evaluations_of(spans) -> list[tuple[str, dict]]:
    """(span id, event attributes) of every evaluation event of stored ``spans``."""
    return [(s.span_id, dict(e["attributes"])) for s in spans for e in s.events if e["name"] == ev.EVENT]


def test_semconv_names():
    assert (ev.NAME, ev.SCORE_VALUE, ev.SCORE_LABEL, ev.EXPLANATION) == (
        "gen_ai.evaluation.name", "gen_ai.evaluation.score.value", "gen_ai.evaluation.score.label",
        "gen_ai.evaluation.explanation")


def test_judged_outcome_is_an_evaluation_on_the_root(provider, exporter, tmp_path):
    store = TraceStore(tmp_path / "s")
    probe = make_probe(provider, store, judge=lambda task, answer: answer == "42")
    run_script(probe, "t", sample_steps(), answer="41")
    (root,) = [s for s in exporter.get_finished_spans() if s.parent is None]
    (event,) = [e for e in root.events if e.name == ev.EVENT]
    assert dict(event.attributes) == {ev.NAME: "aegis.outcome", ev.SCORE_VALUE: 0.0, ev.SCORE_LABEL: "failure"}


def test_outcome_set_after_the_run_is_an_evaluation_in_the_store(provider, tmp_path):
    store = TraceStore(tmp_path / "s")
    probe = make_probe(provider, store)
    run = run_script(probe, "t", sample_steps())
    probe.set_outcome(True, expected="42", trace_id=run.trace_id)
    spans = store.trace(run.trace_id)
    root = next(s for s in spans if s.parent_span_id is None)
    assert evaluations_of(spans) == [(root.span_id, {ev.NAME: "aegis.outcome", ev.SCORE_VALUE: 1.0,
                                                     ev.SCORE_LABEL: "success", ev.EXPLANATION: "expected 42"})]


def test_stored_labels_become_evaluations_on_the_blamed_step_once(provider, tmp_path, capsys):
    store = TraceStore(tmp_path / "s")
    probe = make_probe(provider, store)
    run = run_script(probe, "t", sample_steps())
    store.flush()
    spans = store.trace(run.trace_id)
    step1 = next(s for s in spans if s.attributes.get(sc.STEP_INDEX) == 1)
    root = next(s for s in spans if s.parent_span_id is None)
    first = Fault(agent="coder", step=1, mode="FM-2.6", reason="wrong sum")
    store.amend(run.trace_id, attributes=label_attributes(spans, "blame:judge", [first]))
    unplaced = Fault(agent="critic", mode="FM-3.2")  # no step: judged on the root
    store.amend(run.trace_id, attributes=label_attributes(store.trace(run.trace_id), "blame:judge", [first, unplaced]))
    got = sorted(evaluations_of(store.trace(run.trace_id)), key=lambda e: e[1][ev.SCORE_LABEL])
    assert got == [
        (step1.span_id, {ev.NAME: "aegis.fault.blame:judge", ev.SCORE_VALUE: 1.0, ev.SCORE_LABEL: "FM-2.6",
                         ev.EXPLANATION: "coder@1: wrong sum"}),
        (root.span_id, {ev.NAME: "aegis.fault.blame:judge", ev.SCORE_VALUE: 1.0, ev.SCORE_LABEL: "FM-3.2",
                        ev.EXPLANATION: "critic@-"}),
    ]
    # the label itself is as before: both faults on the root span's attribute
    assert main(["traces", "show", "--dir", str(store.path), run.trace_id]) == 0
    assert "eval     step 1 aegis.fault.blame:judge FM-2.6 score=1.0 (coder@1: wrong sum)" in capsys.readouterr().out
    labels = json.loads(next(s for s in store.trace(run.trace_id) if s.parent_span_id is None).attributes["aegis.labels.blame:judge"])
    assert [f["mode"] for f in labels] == ["FM-2.6", "FM-3.2"]


def test_injected_fault_is_an_evaluation_on_its_step(model_server, tmp_path, exporter, provider):
    from test_injection import TASK, _autogen_app

    spec, _, app = _autogen_app(model_server)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    plan = InjectionPlan.single("calculator", "FM-2.6", "response_corruption")
    run_with_plan(probe, plan, lambda: spec.run_app(app, TASK))
    judged = [(s, e) for s in exporter.get_finished_spans() for e in s.events if e.name == ev.EVENT]
    assert len(judged) == 1
    span, event = judged[0]
    assert span.attributes[sc.AGENT_NAME] == "calculator" and sc.STEP_INDEX in span.attributes
    assert event.attributes[ev.NAME] == "aegis.fault.injection" and event.attributes[ev.SCORE_LABEL] == "FM-2.6"
    assert event.attributes[ev.EXPLANATION] == f"calculator@{span.attributes[sc.STEP_INDEX]}: response_corruption"
