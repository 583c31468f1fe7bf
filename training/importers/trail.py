"""TRAIL traces (OpenInference span trees) into trajectories.

A trace is ``{"trace_id", "spans": [...]}`` with nested ``child_spans``. Every AGENT span's CHAIN
children ("Step 1", "Step 2", ...) are that agent's steps; steps of nested (managed) agents are
interleaved by start time. Labels come from the trace's own ``labels`` key or from a label file
of the same name (or ``<trace_id>.json``) in ``labels_dir``: each error becomes a fault with
``span_id = location``, ``mode = category`` and the agent and step that hold that span; a
location that is in no step is kept and flagged ``suspicious:location-not-in-step``.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from aegis_probe.trajectory import Fault, Labels, Message, Step, ToolCall, Trajectory

from ..files import plain_name, plain_stem
from .base import SUSPICIOUS, ImportResult, import_records, require

SOURCE = "trail"
KIND = "openinference.span.kind"
_DURATION = re.compile(r"^P(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$")
_INPUT_MESSAGE = re.compile(r"^llm\.input_messages\.(\d+)\.message\.(role|content)$")


def _ns(timestamp: Any) -> int:
    if isinstance(timestamp, (int, float)):
        return int(timestamp)
    text = str(timestamp).replace("Z", "+00:00")
    return int(datetime.fromisoformat(text).timestamp() * 1e9)


def duration_ns(value: Any) -> int:
    """Nanoseconds of an ISO-8601 duration such as ``PT0.125S`` (numbers are taken as ns)."""
    if isinstance(value, (int, float)):
        return int(value)
    match = _DURATION.match(str(value or "PT0S"))
    if not match:
        raise ValueError(f"bad duration {value!r}")
    h, m, s = (float(g or 0) for g in match.groups())
    return int((h * 3600 + m * 60 + s) * 1e9)


def _walk(span: dict[str, Any], parent: dict[str, Any] | None = None) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    yield span, parent
    for child in span.get("child_spans") or []:
        yield from _walk(child, span)


def _kind(span: dict[str, Any]) -> str:
    return str((span.get("span_attributes") or {}).get(KIND, "")).upper()


def _messages(attrs: dict[str, Any]) -> list[Message]:
    parts: dict[int, dict[str, str]] = {}
    for key, value in attrs.items():
        match = _INPUT_MESSAGE.match(key)
        if match:
            parts.setdefault(int(match.group(1)), {})[match.group(2)] = str(value)
    return [Message(role=p.get("role", ""), content=p.get("content", "")) for _, p in sorted(parts.items())]


def _step_spans(roots: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(agent name, CHAIN span)`` for every CHAIN child of every AGENT span, by start time."""
    found = []
    for root in roots:
        for span, _ in _walk(root):
            if _kind(span) == "AGENT":
                agent = str(span.get("span_attributes", {}).get("agent.name") or span.get("span_name") or "agent")
                found += [(agent, c) for c in span.get("child_spans") or [] if _kind(c) == "CHAIN"]
    return sorted(found, key=lambda it: _ns(it[1]["timestamp"]))


def _build_step(index: int, agent: str, span: dict[str, Any], trace_id: str) -> Step:
    attrs = span.get("span_attributes") or {}
    tools: list[Any] = []
    llm_inputs: list[Any] = []
    for sub, _ in _walk(span):
        sub_attrs = sub.get("span_attributes") or {}
        if sub is not span and _kind(sub) == "TOOL":
            tools.append(ToolCall(name=str(sub_attrs.get("tool.name") or sub.get("span_name")),
                                  arguments=sub_attrs.get("input.value"), result=sub_attrs.get("output.value"),
                                  error=sub.get("status_message") if sub.get("status_code") == "Error" else None,
                                  span_id=sub.get("span_id")))
        elif _kind(sub) == "LLM" and not llm_inputs:
            llm_inputs = _messages(sub_attrs)
    start = _ns(span["timestamp"])
    return Step(index=index, agent=agent, input_messages=llm_inputs, output=str(attrs.get("output.value") or ""),
                tool_calls=tools, span_id=span.get("span_id"), trace_id=trace_id,
                error=span.get("status_message") or "error" if span.get("status_code") == "Error" else None,
                start_ns=start, end_ns=start + duration_ns(span.get("duration")))


def trajectory_from_trace(record: Any, labels: Any, record_id: str) -> Trajectory:
    """One TRAIL trace (plus its labels object, or ``None``) as a trajectory."""
    require(record, "trace_id", "spans")
    roots = record["spans"]
    step_spans = _step_spans(roots)
    if not step_spans:
        raise ValueError("no AGENT span with CHAIN step children")
    steps = [_build_step(i, agent, span, record["trace_id"]) for i, (agent, span) in enumerate(step_spans)]
    owner = {}  # span id -> step holding it
    for step, (_, span) in zip(steps, step_spans):
        owner.update({s["span_id"]: step for s, _ in _walk(span)})
    root_attrs = (roots[0].get("span_attributes") or {}) if roots else {}
    faults: list[Fault] = []
    flags: list[str] = []
    if labels is not None and not isinstance(labels, dict):
        raise ValueError(f"labels: expected a JSON object with 'errors', got {type(labels).__name__}")
    for i, err in enumerate((labels or {}).get("errors") or []):
        try:
            require(err, "location")
        except ValueError as exc:
            raise ValueError(f"labels errors[{i}]: {exc}") from None
        located = owner.get(err["location"])
        if located is None:
            flags = [f"{SUSPICIOUS}:location-not-in-step"]
        reason = ": ".join(x for x in (err.get("evidence"), err.get("description")) if x) or None
        faults.append(Fault(agent=located.agent if located else None, step=located.index if located else None,
                            span_id=err["location"], mode=err.get("category"), reason=reason))
    return Trajectory(
        trace_id=record["trace_id"], run_id=record_id, framework="openinference", task=root_attrs.get("input.value"),
        steps=steps, labels=Labels(faults=faults, source=SOURCE, flags=flags), source="import",
        metadata={"impacts": [e.get("impact") for e in (labels or {}).get("errors") or []],
                  **({"scores": labels["scores"]} if labels and labels.get("scores") else {})},
    )


def load(path: str | os.PathLike[str], labels_dir: str | os.PathLike[str] | None = None) -> ImportResult:
    """TRAIL trace files; labels inline (``labels``) or in ``labels_dir``."""

    def convert(record: Any, file: Path, name: str) -> Trajectory:
        labels = record.get("labels") if isinstance(record, dict) else None
        if labels is None and labels_dir is not None:
            for candidate in (Path(labels_dir) / plain_name(file), Path(labels_dir) / f"{record.get('trace_id')}.json"):
                if candidate.is_file():
                    try:
                        labels = json.loads(candidate.read_bytes().decode("utf-8-sig"))
                    except ValueError as exc:  # bad JSON, or bytes that are not UTF-8
                        raise ValueError(f"label file {candidate}: not UTF-8 JSON: {exc}") from None
                    break
        rid = f"{SOURCE}:{record.get('trace_id') if isinstance(record, dict) else plain_stem(file)}"
        return trajectory_from_trace(record, labels, rid)

    return import_records(path, convert)
