"""``traces export ID|--all``: the stored traces as OTLP/JSON lines, or sent to an OTLP collector.

Each trace is one line: an OTLP ``ExportTraceServiceRequest`` in JSON holding all its spans, with
the amendments made after the run (outcomes, labels, verdicts) merged in, as ``report FILE`` and
``load_trajectories`` read them. ``--otlp-endpoint URL`` sends the same spans
with the OTLP/HTTP (protobuf) exporter to a collector (Jaeger, Phoenix, an OpenTelemetry Collector):
URL is the collector's base (``/v1/traces`` is added unless it ends so), and the exporter's
``OTEL_EXPORTER_OTLP_HEADERS`` / ``_CERTIFICATE`` / ``_COMPRESSION`` settings apply.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence
from urllib.parse import urlsplit

from .common import add_examples, check_replaceable, http_url, seconds
from ..storage.otlp_encode import encode_request
from ..storage.otlp_json import SpanRecord
from ..report.html import write_atomically
from ..storage.store import TraceStore

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: Spans per OTLP request (the SDK's batch processor sends at most this many at once).
BATCH = 512
TRACES_PATH = "/v1/traces"


def add_parser(actions: argparse._SubParsersAction, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``export`` action of ``traces`` (``common``: the options every action takes)."""
    p = actions.add_parser("export", parents=[common], help="write traces as OTLP/JSON lines, or send them to an OTLP collector",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("trace_id", metavar="ID", nargs="?", help="the trace to export (a unique prefix is enough)")
    which.add_argument("--all", action="store_true", help="export every trace of the store")
    p.add_argument("--out", metavar="FILE", help="write the OTLP/JSON lines to FILE (default: standard output, "
                                                 "unless --otlp-endpoint is given); an existing file is replaced only "
                                                 "when it holds OTLP/JSON lines, or with --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file that holds no OTLP/JSON lines")
    p.add_argument("--otlp-endpoint", metavar="URL", help="send the spans to the OTLP/HTTP collector at URL "
                                                          "(e.g. http://localhost:4318)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long to try sending each batch, retries included (default 10)")
    add_examples(p, "3f2a    # one trace to standard output", "--all --out traces.jsonl",
                 "--all --otlp-endpoint http://localhost:4318")
    return p


def run(args: argparse.Namespace, store: TraceStore) -> int:
    seconds("--timeout", args.timeout)
    if args.out is not None:
        if os.path.isdir(args.out):
            raise ValueError(f"--out {args.out}: a directory; give the file's name (e.g. {Path(args.out) / 'traces.jsonl'})")
        check_replaceable("--out", args.out, lambda head: head.lstrip().startswith(b'{"resourceSpans"'),
                          "OTLP/JSON lines", args.force)
    url = traces_url(args.otlp_endpoint) if args.otlp_endpoint is not None else None
    traces = _selected(store, args.trace_id if not args.all else None)
    spans = sum(len(t) for t in traces)
    what = f"{len(traces)} trace{'s' if len(traces) != 1 else ''} ({spans} spans)"
    if args.out or url is None:
        lines = "".join(encode_request(t) + "\n" for t in traces).encode("utf-8")
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            write_atomically(Path(args.out), lines)
            print(f"{what} written to {args.out}")
        else:
            sys.stdout.buffer.write(lines)
            sys.stdout.flush()
    if url is not None:
        send(url, [s for t in traces for s in t], args.timeout)
        print(f"{what} sent to {url}", file=sys.stdout if args.out else sys.stderr)
    return 0


def _selected(store: TraceStore, trace_id: str | None) -> list[list[SpanRecord]]:
    """One trace (``trace_id``, or a unique prefix) or, with None, every trace, oldest first."""
    if trace_id is not None:
        return [store.trace(trace_id)]
    traces = list(store.traces().values())
    if not traces:
        raise LookupError(f"no traces in {store.path}{store.nested_hint()}")
    return sorted(traces, key=lambda t: min(s.start_ns for s in t))


def traces_url(endpoint: str) -> str:
    """The collector's traces URL for ``endpoint`` (a base URL, or one ending in ``/v1/traces``)."""
    base = http_url("--otlp-endpoint", endpoint, "the collector's http(s):// URL, e.g. http://localhost:4318").rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def send(url: str, records: Sequence[SpanRecord], timeout: float) -> None:
    """Send ``records`` to the collector at ``url`` in batches; ``ConnectionError`` naming the
    collector and why (its answer, or the connection's error) when a batch does not go through."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
    try:
        for start in range(0, len(records), BATCH):
            with _exporter_messages() as messages:
                result = exporter.export([readable(r) for r in records[start:start + BATCH]])
            if result is not SpanExportResult.SUCCESS:
                sent = f"; the first {start} spans were sent" if start else ""
                raise ConnectionError(f"could not send the spans to {url}{sent}: {_why(url, messages, timeout)}")
    finally:
        exporter.shutdown()


def _why(url: str, messages: list[str], timeout: float) -> str:
    """Why the exporter gave up: that nothing answers at the URL's host and port (whether or not
    the exporter logged its connection errors as transient), else the error it kept retrying on
    (from its log messages), else its last word."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)),
                                 timeout=timeout).close()
    except OSError as exc:
        return f"nothing answers at {parts.netloc} ({exc.strerror or exc})"
    for message in messages:
        transient = re.fullmatch(r"Transient error (.*) encountered while exporting .*", message)
        if transient:
            return f"{transient.group(1)} (still failing after {timeout:g} s of retries)"
    return messages[-1] if messages else "the exporter gave no reason"


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(" ".join(record.getMessage().split()))


class _exporter_messages:
    """The exporter's warnings and errors while it sends, kept for the error line (not printed)."""

    def __enter__(self) -> list[str]:
        self.logger = logging.getLogger("opentelemetry.exporter")
        self.handler, self.propagate = _Collect(), self.logger.propagate
        self.logger.addHandler(self.handler)
        self.logger.propagate = False
        return self.handler.messages

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = self.propagate


def readable(rec: SpanRecord) -> "ReadableSpan":
    """``rec`` as the SDK's finished span, for an exporter: the same ids, names, times, attributes,
    events, status, kind, resource and scope."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    def context(span_id: str) -> SpanContext:
        return SpanContext(int(rec.trace_id, 16), int(span_id, 16), is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))

    code = StatusCode[rec.status]
    return ReadableSpan(
        name=rec.name, context=context(rec.span_id),
        parent=context(rec.parent_span_id) if rec.parent_span_id else None,
        resource=Resource(rec.resource), attributes=rec.attributes,
        events=[Event(e["name"], e.get("attributes") or {}, e.get("time_ns")) for e in rec.events],
        kind=SpanKind(max(rec.kind - 1, 0)), instrumentation_scope=InstrumentationScope(rec.scope),
        status=Status(code, (rec.status_message or None) if code is StatusCode.ERROR else None),
        start_time=rec.start_ns, end_time=rec.end_ns,
    )
