"""Verdicts as GenAI evaluation events: ``gen_ai.evaluation.result`` on the span each one judges.

Every verdict aegis-probe writes is also such an event, the form backends show beside a trace:
a run's outcome (``aegis.outcome``, on the root span: score 1.0/0.0, ``success``/``failure``)
and each labelled fault (``aegis.fault.<source>``, e.g. ``aegis.fault.injection``,
``aegis.fault.blame:scan``, ``aegis.fault.attribution:<model>``, on the blamed step's span,
else the root: score 1.0, the label its failure mode, else ``faulty``). Written where labels are
written: live on the run's spans, and by :meth:`~aegis_probe.storage.store.TraceStore.amend` for
labels added to a stored trace, so a new label source gets its events without code of its own.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any, Iterable, Mapping

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _ga

from . import semconv as sc
from ..storage.otlp_json import SpanRecord

#: The event name and its attributes (GenAI conventions).
EVENT = "gen_ai.evaluation.result"
NAME = _ga.GEN_AI_EVALUATION_NAME
SCORE_VALUE = _ga.GEN_AI_EVALUATION_SCORE_VALUE
SCORE_LABEL = _ga.GEN_AI_EVALUATION_SCORE_LABEL
EXPLANATION = _ga.GEN_AI_EVALUATION_EXPLANATION
OUTCOME = "aegis.outcome"
FAULT_PREFIX = "aegis.fault."


def evaluation(name: str, value: float, label: str, explanation: str | None = None) -> dict[str, Any]:
    """The attributes of one ``gen_ai.evaluation.result`` event."""
    attrs: dict[str, Any] = {NAME: name, SCORE_VALUE: float(value), SCORE_LABEL: label}
    if explanation:
        attrs[EXPLANATION] = explanation
    return attrs


def outcome_evaluation(success: bool, expected: str | None = None) -> dict[str, Any]:
    """A run's judged outcome."""
    return evaluation(OUTCOME, 1.0 if success else 0.0, "success" if success else "failure",
                      f"expected {expected}" if expected else None)


def fault_evaluation(source: str | None, fault: Mapping[str, Any]) -> dict[str, Any]:
    """One labelled fault of ``source``: the step it blames is faulty."""
    where = f"{fault.get('agent') or '-'}@{'-' if fault.get('step') is None else fault['step']}"
    reason = fault.get("reason") or fault.get("strategy")
    return evaluation(FAULT_PREFIX + (source or "unknown"), 1.0, str(fault.get("mode") or "faulty"),
                      f"{where}: {reason}" if reason else where)


def label_sources(attributes: Mapping[str, Any]) -> Iterable[tuple[str, str | None, str]]:
    """``(attribute, source, faults JSON)`` of each label in root-span ``attributes``."""
    if isinstance(attributes.get(sc.LABEL_FAULTS), str):
        yield sc.LABEL_FAULTS, attributes.get(sc.LABEL_SOURCE), attributes[sc.LABEL_FAULTS]
    for key, value in attributes.items():
        if key.startswith(sc.LABELS_PREFIX) and isinstance(value, str):
            yield key, key[len(sc.LABELS_PREFIX):], value


def new_faults(faults_json: str, before: Any) -> list[dict[str, Any]]:
    """The faults of a label not in its earlier value ``before`` (labels are appended to)."""
    faults = [f for f in json.loads(faults_json) if isinstance(f, dict)]
    old = json.loads(before) if isinstance(before, str) else []
    return [f for f in faults if f not in old]


def stored_evaluations(spans: list[SpanRecord], attributes: Mapping[str, Any]) -> list[SpanRecord]:
    """Amendments adding the evaluation events of the verdicts in root-span ``attributes`` written
    to the stored trace ``spans``: the outcome on the root, each fault not labelled before on the
    span of the step it blames (its ``span_id``, else its step index), else on the root."""
    root = next((s for s in spans if s.parent_span_id is None), spans[0])
    by_id = {s.span_id: s for s in spans}
    steps = {s.attributes.get(sc.STEP_INDEX): s for s in spans if sc.STEP_INDEX in s.attributes}
    events: list[tuple[SpanRecord, dict[str, Any]]] = []
    if isinstance(attributes.get(sc.OUTCOME_SUCCESS), bool):
        events.append((root, outcome_evaluation(attributes[sc.OUTCOME_SUCCESS], attributes.get(sc.OUTCOME_EXPECTED))))
    for key, source, faults in label_sources(attributes):
        for fault in new_faults(faults, root.attributes.get(key)):
            span = by_id.get(fault.get("span_id")) or steps.get(fault.get("step")) or root  # type: ignore[arg-type]
            events.append((span, fault_evaluation(source, fault)))
    now = time.time_ns()
    out: dict[str, SpanRecord] = {}
    for i, (span, attrs) in enumerate(events):  # distinct times: the store merges events by (name, time)
        record = out.setdefault(span.span_id, replace(span, attributes={}, events=[]))
        record.events.append({"name": EVENT, "time_ns": now + i, "attributes": attrs})
    return list(out.values())
