"""Traces as aegis-probe wrote them, read from OTLP/JSON files or a Jaeger query API.

OTLP/JSON files (one ``ExportTraceServiceRequest`` per line, as the store and the Collector's
file exporter write them) are decoded with the core readers, line by line, so one bad line is
reported and the rest still imports. Jaeger's ``/api/traces`` JSON (``{"data": [trace, ...]}``) is
read from a file or fetched from a URL with urllib. Traces without ``invoke_agent`` step spans
are reported, not imported. Labels come from the root span's ``aegis.label.*`` attributes.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Iterator

from aegis_probe.storage.otlp_json import SpanRecord, decode_request
from aegis_probe.storage.store import SPANS_FILE, TraceStore, merge_records
from aegis_probe.trajectory import Trajectory

from . import rows
from .base import ImportIssue, ImportResult, data_files, iter_records, label_flags, tick

_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}


def _trajectory(spans: list[SpanRecord], where: str, fast: bool = False) -> Trajectory | Any | ImportIssue:
    """A trace's trajectory with its labels checked, or the issue of a trace without step spans;
    ``fast``: made of :mod:`.rows`' structs where it can be (to be written out, :func:`.base.row`)."""
    traj = (rows.trajectory(spans) if fast else None) or Trajectory.from_spans(spans)
    if not traj.steps:
        return ImportIssue(where, f"trace {spans[0].trace_id if spans else '?'}", "no agent step spans")
    flags = {flag for f in traj.labels.faults for flag in label_flags(traj.steps, f.agent, f.step)}
    traj.labels.flags = sorted(flags)
    return traj


def _add_traces(result: ImportResult, records: Iterable[SpanRecord], where: str) -> None:
    for spans in merge_records(records).values():
        _add(result, _trajectory(spans, where))


def _add(result: ImportResult, item: Trajectory | ImportIssue) -> None:
    if isinstance(item, ImportIssue):
        result.errors.append(item)
    else:
        result.add(item)


def iter_otlp(path: str | os.PathLike[str], fast: bool = False) -> Iterator[Trajectory | Any | ImportIssue]:
    """Trajectories (and issues) from an OTLP/JSON(-lines) file or a store directory, one at a
    time: a store is read trace by trace through its index (:meth:`TraceStore.each_trace`), never
    whole. ``fast``: as :func:`_trajectory`."""
    store_file = Path(path) / SPANS_FILE
    bad = TraceStore(path).bad_lines() if store_file.is_file() and data_files(path) == [store_file] else None
    if bad is not None:
        for line, reason in bad:
            yield ImportIssue(str(store_file), f"line {line}", f"not an OTLP/JSON request: {reason}")
        for spans in TraceStore(path).each_trace(warn=False):
            tick()
            yield _trajectory(spans, str(path), fast)
        return
    result = ImportResult()
    records: list[SpanRecord] = []
    for file in data_files(path):
        for name, body in iter_records(file):
            try:
                if isinstance(body, Exception):
                    raise body
                records += decode_request(body)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                result.errors.append(ImportIssue(str(file), name, f"not an OTLP/JSON request: {exc}"))
    yield from result.errors
    for spans in merge_records(records).values():
        yield _trajectory(spans, str(path), fast)


def load_otlp(path: str | os.PathLike[str]) -> ImportResult:
    """Trajectories from an OTLP/JSON(-lines) file or a store directory."""
    result = ImportResult()
    for item in iter_otlp(path):
        _add(result, item)
    return result


def _tag_value(tag: dict[str, Any]) -> Any:
    value, kind = tag.get("value"), str(tag.get("type", "string")).lower()
    if kind == "int64":
        return int(value)  # type: ignore[arg-type]  # a bad value is the caller's per-record error
    if kind == "float64":
        return float(value)  # type: ignore[arg-type]
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    return value


def jaeger_spans(trace: dict[str, Any]) -> list[SpanRecord]:
    """Span records of one Jaeger trace object (``{"traceID", "spans", "processes"}``)."""
    processes = trace.get("processes") or {}
    out = []
    for sp in trace["spans"]:
        tags = {t["key"]: _tag_value(t) for t in sp.get("tags") or []}
        parent = next((r["spanID"] for r in sp.get("references") or [] if r.get("refType") == "CHILD_OF"), None)
        status_code = str(tags.pop("otel.status_code", "")).upper()
        status = "ERROR" if status_code == "ERROR" or tags.pop("error", False) is True else status_code or "UNSET"
        process = processes.get(sp.get("processID"), {})
        start_ns = int(sp["startTime"]) * 1000
        out.append(SpanRecord(
            trace_id=str(sp["traceID"]).rjust(32, "0"), span_id=str(sp["spanID"]).rjust(16, "0"),
            parent_span_id=str(parent).rjust(16, "0") if parent else None, name=sp["operationName"],
            start_ns=start_ns, end_ns=start_ns + int(sp.get("duration", 0)) * 1000,
            attributes={k: v for k, v in tags.items() if k not in ("span.kind", "otel.status_description",
                                                                      "otel.scope.name", "internal.span.format")},
            events=[{"name": str(next((f["value"] for f in log.get("fields", []) if f["key"] == "event"), "log")),
                     "time_ns": int(log.get("timestamp", 0)) * 1000,
                     "attributes": {f["key"]: _tag_value(f) for f in log.get("fields", []) if f["key"] != "event"}}
                    for log in sp.get("logs") or []],
            status=status if status in ("UNSET", "OK", "ERROR") else "UNSET",
            status_message=str(tags.get("otel.status_description", "")),
            kind=_KINDS.get(str(tags.get("span.kind", "internal")).lower(), 1),
            resource={"service.name": process.get("serviceName"), **{t["key"]: _tag_value(t) for t in process.get("tags") or []}},
            scope=str(tags.get("otel.scope.name", "")),
        ))
    return out


def _jaeger_body(body: Any, where: str) -> ImportResult:
    result = ImportResult()
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        result.errors.append(ImportIssue(where, "body", "not a Jaeger API response (no 'data' list)"))
        return result
    for i, trace in enumerate(body["data"]):
        name = f"trace {trace.get('traceID', i) if isinstance(trace, dict) else i}"
        try:
            records = jaeger_spans(trace)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            result.errors.append(ImportIssue(where, name, f"bad Jaeger trace: {exc!r}"))
            continue
        _add_traces(result, records, where)
    return result


def load_jaeger(source: str | os.PathLike[str], *, timeout: float = 30.0) -> ImportResult:
    """Trajectories from a Jaeger ``/api/traces`` response: a saved JSON file or an http(s) URL."""
    text = str(source)
    if text.startswith(("http://", "https://")):
        with urllib.request.urlopen(text, timeout=timeout) as resp:  # noqa: S310 - caller's URL
            return _jaeger_body(json.loads(resp.read()), text)
    result = ImportResult()
    for file in data_files(Path(text)):
        for name, body in iter_records(file):
            if isinstance(body, Exception):
                result.errors.append(ImportIssue(str(file), name, str(body)))
            else:
                result.extend(_jaeger_body(body, str(file)))
    return result


load = load_otlp
