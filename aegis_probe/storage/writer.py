"""The store's write path: finished spans go to a background writer thread, never encoded on the app's.

``StoreSpanProcessor.on_end`` only appends the span to a bounded queue (a full queue drops the
span and counts it: :attr:`StoreSpanProcessor.dropped_spans`, logged). One writer thread per
process, woken when a trace's root span ends (or every ``WAKE_BATCH`` spans), encodes the spans,
shortens long attributes that repeat an earlier span's (:mod:`.store_delta`), and appends a
trace as one line when its root span has been taken. Crash safety is as before: a ``kill -9``
loses at most the traces still in flight.

Readers in this process see every finished run: :func:`flush_writers` (called by every store
read) waits until the queue is written. At exit the queue is written within ``EXIT_FLUSH_S``.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import sys
import threading
import weakref
from collections import deque
from pathlib import Path
from typing import Any, Iterable, Protocol

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .otlp_encode import request_json, sdk_span_json
from .otlp_json import resource_attributes
from .delta import MIN_SHARED, Bases, want_hints
from . import index


logger = logging.getLogger("aegis_probe.storage.store")


class LineSink(Protocol):
    """Where the writer puts a trace: one encoded export request a line (a :class:`.store.TraceStore`)."""

    path: Path  # named in the writer's error lines

    def write_line(self, line: str, entry: "index.Known | None" = None) -> None: ...


#: Spans waiting for the writer, per process, before new ones are dropped.
MAX_QUEUE = 8192
#: The writer is woken when a trace's root span ends, or when this many spans wait: waking it
#: for every span would cost a thread switch per span.
WAKE_BATCH = 256
#: Seconds a flush (before a read, at exit) waits for the writer.
FLUSH_TIMEOUT_S = 10.0
EXIT_FLUSH_S = 5.0


class _Flush:
    """A queue marker: the writer sets ``done`` when it gets here (after writing unfinished
    traces of ``partial`` processors)."""

    __slots__ = ("done", "partial")

    def __init__(self, partial: Iterable["StoreSpanProcessor"]) -> None:
        self.done = threading.Event()
        self.partial = list(partial)


class SpanWriter:
    """A bounded queue of (processor, span) and the daemon thread that works it off."""

    def __init__(self, max_queue: int = MAX_QUEUE) -> None:
        self.max_queue = max_queue
        self._processors: "weakref.WeakSet[StoreSpanProcessor]" = weakref.WeakSet()
        self._reset()
        _WRITERS.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._items: deque = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def _start(self, processor: "StoreSpanProcessor") -> None:
        with self._lock:
            self._processors.add(processor)
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="aegis-store-writer", daemon=True)
                thread.start()
                self._thread = thread

    def flush(self, timeout: float = FLUSH_TIMEOUT_S, partial: Iterable["StoreSpanProcessor"] = ()) -> bool:
        """Wait until everything queued so far is written (and the unfinished traces of
        ``partial``); False if that took longer than ``timeout`` seconds."""
        thread = self._thread
        marker = _Flush(partial)
        if thread is None or thread is threading.current_thread() or not thread.is_alive():
            self._work(marker)  # nothing queued, or called by the writer itself: do it here
            return True
        self._items.append(marker)
        self._wake.set()
        return marker.done.wait(timeout)

    def _run(self) -> None:
        items, wake = self._items, self._wake
        while True:
            wake.wait()
            wake.clear()
            while items:
                item = items.popleft()
                if type(item) is tuple:  # (processor, span)
                    try:
                        item[0]._take(item[1])
                    except Exception:  # never let the writer thread die
                        logger.exception("aegis-probe: trace store writer error")
                else:
                    self._work(item)

    @staticmethod
    def _work(marker: _Flush) -> None:
        """Write the unfinished traces ``marker`` asks for, then tell its waiter."""
        try:
            for processor in marker.partial:
                processor._write_unfinished()
        except Exception:  # never let the writer thread die
            logger.exception("aegis-probe: trace store writer error")
        finally:
            marker.done.set()

    def processors(self) -> list["StoreSpanProcessor"]:
        with self._lock:
            return list(self._processors)


_WRITERS: "weakref.WeakSet[SpanWriter]" = weakref.WeakSet()
_SHARED: SpanWriter | None = None


def shared_writer() -> SpanWriter:
    """The process's writer (created on first use)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = SpanWriter()
    return _SHARED


def flush_writers(timeout: float = FLUSH_TIMEOUT_S) -> bool:
    """Write everything queued by finished spans so far, in every writer (flush-before-read)."""
    return all([w.flush(timeout) for w in list(_WRITERS)])


def _flush_at_exit() -> None:
    for writer in list(_WRITERS):
        writer.flush(EXIT_FLUSH_S, partial=writer.processors())


def _after_fork() -> None:
    """A forked child has no writer thread and must not write the parent's queued spans."""
    for writer in list(_WRITERS):
        writer._reset()
    for writer in list(_WRITERS):
        for processor in writer.processors():
            processor._traces.clear()
    _flush_in_multiprocessing_children()


def _flush_in_multiprocessing_children() -> None:
    """A multiprocessing child (fork, forkserver) ends with ``os._exit``: atexit handlers do not
    run there, its finalizers do. Once multiprocessing is loaded (no import of it here), have
    each child it starts register one (after its start clears those it inherited)."""
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        mp_util.register_after_fork(_flush_at_exit, _flush_at_process_end)


_finalizer_pid: int | None = None


def _flush_at_process_end(_: object) -> None:
    """In a multiprocessing child: write the queue at its end, and each run's trace when the run
    ends, before the child's work returns (a pool's ``terminate()``, which leaving ``with Pool()``
    calls, kills its workers without running finalizers)."""
    global _finalizer_pid
    if _finalizer_pid != os.getpid():  # once per process
        _finalizer_pid = os.getpid()
        from multiprocessing.util import Finalize

        Finalize(None, _flush_at_exit, exitpriority=100)


atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
_flush_in_multiprocessing_children()


#: A span encoded for its line: (resource attributes, scope name, span text).
Encoded = tuple[dict[str, Any], str, str]


class _Trace:
    """Writer-thread state of a trace whose root has not been taken: its id in hex, its encoded
    spans, the delta bases of its long attributes, and what the store's index reads of its next
    line (:meth:`known`)."""

    __slots__ = ("bases", "hex", "spans", "start", "session", "plain")

    def __init__(self, trace_id: int) -> None:
        self.hex = format(trace_id, "032x")
        self.spans: list[Encoded] = []
        self.bases: Bases = {}
        self.start, self.plain = -1, True
        self.session: str | None = None

    def note(self, span: ReadableSpan, attrs: Any, resource: dict[str, Any], scope: str) -> None:
        """Keep the earliest start and the first session of the spans written so far, or that the
        line is not plain: spans of several resources or scopes (the line groups them), events, a
        session the index would not read as one (not a short string), or one on the resource."""
        start = span._start_time or 0
        if self.start < 0 or start < self.start:
            self.start = start
        if not self.plain:
            return
        session = attrs.get(SESSION_ID)
        first = self.spans[0]
        events: Any = span._events  # a BoundedList: its deque read, not its Python __len__
        if (first[0] is not resource or first[1] != scope or getattr(events, "_dq", events)
                or (session is not None and not (type(session) is str and len(session) < MIN_SHARED))
                or SESSION_ID in resource):
            self.plain = False
        elif self.session is None:
            self.session = session

    def known(self) -> "index.Known | None":
        """The trace starts and sessions of a line of the spans noted (what the index would read
        back from it), then forgotten for the next line; None when the index must read the line."""
        known: index.Known | None = None
        if self.plain:
            known = ({self.hex: self.start}, {} if self.session is None else {self.hex: self.session})
        self.start, self.session, self.plain = -1, None, True
        return known


#: write_line function -> whether it takes the line's index entry (a sink of the protocol's first form does not).
_TAKES_ENTRY: dict[Any, bool] = {}


def _takes_entry(write: Any) -> bool:
    """Whether a sink's ``write_line`` takes ``entry`` (remembered per function)."""
    func = getattr(write, "__func__", write)
    known = _TAKES_ENTRY.get(func)
    if known is None:
        if len(_TAKES_ENTRY) >= 64:
            _TAKES_ENTRY.clear()
        try:
            known = "entry" in inspect.signature(write).parameters
        except (TypeError, ValueError):
            known = False
        _TAKES_ENTRY[func] = known
    return known


def _encoded(span: ReadableSpan, trace: _Trace | None) -> Encoded:
    scope = span._instrumentation_scope  # ReadableSpan's fields: its properties are Python calls
    return (resource_attributes(span._resource), scope.name if scope else "",
            sdk_span_json(span, trace.hex, trace.bases) if trace else sdk_span_json(span, format(span.context.trace_id, "032x")))


#: Instrumentation scope (tracer name) of aegis-probe's own spans.
SCOPE = "aegis_probe"
#: The attribute the store's index reads a trace's session from.
SESSION_ID = "session.id"
#: Runs a ``runs_only`` processor remembers, so that spans ending after a run's root are kept too.
_KNOWN_RUNS = 1024


class StoreSpanProcessor(SpanProcessor):
    """Sends finished spans to a store (a :class:`LineSink`): one line per trace, written off the app thread.

    ``max_queue`` gives this processor its own writer with that bound (default: the process's
    shared writer, :data:`MAX_QUEUE` spans). ``runs_only`` keeps only traces that hold
    aegis-probe's spans: the store on a provider other instrumentations share (a web framework's
    request traces are not runs).
    """

    def __init__(self, store: LineSink, *, max_queue: int | None = None, runs_only: bool = False) -> None:
        self.store = store
        self.runs_only = runs_only
        self._runs: dict[int, None] = {}  # writer thread: trace ids of runs written (runs_only)
        self.writer = shared_writer() if max_queue is None else SpanWriter(max_queue)
        #: Spans dropped because the writer's queue was full.
        self.dropped_spans = 0
        self._drop_lock = threading.Lock()
        self._closed = False
        # Writer-thread state: the traces whose root has not been taken, by trace id.
        self._traces: dict[int, _Trace] = {}
        self._resource: tuple[Any, dict[str, Any]] = (None, {})  # the last span's resource and its attributes
        want_hints()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        parent: Any = span._parent  # on the app thread: no property calls (a SpanContext is a tuple)
        if self._closed:  # after shutdown: write it alone, at once, on this thread
            encoded = [_encoded(span, None)]
            if self._keeps(span.context.trace_id, encoded):
                self._write(encoded)
        else:  # queued for the writer (O(1), never blocks), which is woken at a root or when enough spans wait
            root = parent is None or parent[2]
            writer = self.writer
            items = writer._items
            if len(items) >= writer.max_queue:
                self._dropped()
                return
            if writer._thread is None:
                writer._start(self)
            items.append((self, span))
            if (root or len(items) >= WAKE_BATCH) and not writer._wake.is_set():  # after the append:
                writer._wake.set()  # the writer clears the event before it drains
            if root and _finalizer_pid == os.getpid():  # a multiprocessing child (_flush_at_process_end)
                writer.flush()

    def _dropped(self) -> None:
        with self._drop_lock:
            self.dropped_spans += 1
            n = self.dropped_spans
        if n & (n - 1) == 0:  # 1, 2, 4, 8, ...: logged, not flooding the log
            logger.warning("aegis-probe: trace store queue full (%d spans); %d span(s) dropped so far",
                           self.writer.max_queue, n)

    # -- writer thread -------------------------------------------------------------------
    def _take(self, span: ReadableSpan) -> None:
        """Encode ``span``; write its trace once the root is in."""
        ctx: Any = span._context  # a SpanContext is a tuple: trace id, span id, is remote, ...
        trace_id = ctx[0]
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = _Trace(trace_id)
        resource = span._resource  # _encoded(span, trace), with the provider's resource attributes kept
        if resource is not self._resource[0]:
            self._resource = (resource, resource_attributes(resource))
        scope = span._instrumentation_scope
        name = scope.name if scope else ""
        trace.spans.append((self._resource[1], name, sdk_span_json(span, trace.hex, trace.bases)))
        attrs = span._attributes
        inner = getattr(attrs, "_dict", None)  # the SDK's BoundedAttributes: its inner dict
        trace.note(span, inner if type(inner) is dict else (attrs or {}), self._resource[1], name)
        parent = span._parent
        if parent is None or parent[2]:  # the root (or a remote parent's child): the trace is complete
            del self._traces[trace_id]
            if self._keeps(trace_id, trace.spans):
                self._write(trace.spans, trace.known())

    def _keeps(self, trace_id: int, spans: list[Encoded]) -> bool:
        """Whether ``spans`` of a trace go to the store: always, or with ``runs_only`` when the
        trace is a run's (it holds aegis-probe's spans, or an earlier line of it did)."""
        if not self.runs_only or trace_id in self._runs:
            return True
        if not any(scope == SCOPE for _, scope, _ in spans):
            return False
        self._runs[trace_id] = None
        if len(self._runs) > _KNOWN_RUNS:
            del self._runs[next(iter(self._runs))]
        return True

    def _write_unfinished(self) -> None:
        """Write the spans of traces whose root has not ended (kept: their deltas' bases); with
        ``runs_only``, those of traces not known to be runs wait for their root."""
        for trace_id, trace in list(self._traces.items()):
            if trace.spans and self._keeps(trace_id, trace.spans):
                spans, trace.spans = trace.spans, []
                self._write(spans, trace.known())

    def _write(self, spans: list[Encoded], known: "index.Known | None" = None) -> None:
        """One line of ``spans``; ``known``: what the store's index reads of it, when the writer knows."""
        try:
            write = self.store.write_line
            if known is not None and _takes_entry(write):
                write(request_json(spans), known)
            else:
                write(request_json(spans))
        except OSError as exc:  # a full disk, a read-only or removed directory: one line, the writer goes on
            logger.error("aegis-probe: could not write %d spans to %s: %s", len(spans), self.store.path, exc)
        except Exception:  # a bug: with its traceback, the writer goes on
            logger.exception("aegis-probe: could not write %d spans to %s", len(spans), self.store.path)

    # -- SpanProcessor -------------------------------------------------------------------
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write everything, unfinished traces included (``Probe.flush``, provider shutdown)."""
        return self.writer.flush(timeout_millis / 1000, partial=[self])

    def shutdown(self) -> None:
        self.force_flush(int(EXIT_FLUSH_S * 1000))
        self._closed = True
