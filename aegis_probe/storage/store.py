"""Embedded trace store: append-only OTLP/JSON lines in a directory, no collector needed.

Each finished trace is written as one line once its root span has ended, by a writer thread
(:mod:`.store_writer`; reads in this process wait for it); spans that end after the root are
written as lines of their own, long repeated attributes as deltas (:mod:`.store_delta`). Later facts about a trace (an outcome reported after the
run, labels, attributions) are appended as *amendments*: the span again, same ids, with merged
attributes and events; readers keep the last version of each span. Nothing is rewritten in place,
except that a partial last line left by a crash is dropped before the next append.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
import weakref
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping

from ..errors import AegisProbeError
from .otlp_encode import encode_request
from .otlp_json import SpanRecord, decode_request, utf8
from .delta import expand
from . import index
from .writer import StoreSpanProcessor, flush_writers

__all__ = ["SPANS_FILE", "StoreSpanProcessor", "TraceFileError", "TraceStore", "merge_records", "read_span_file", "span_files"]

logger = logging.getLogger(__name__)

SPANS_FILE = "spans.jsonl"

_BAD_RECORD = (ValueError, KeyError, TypeError, AttributeError)
#: Store file -> the error of this process's last failed write to it (cleared by a write that succeeds).
_failed_writes: dict[Path, str] = {}
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT


class TraceFileError(AegisProbeError, ValueError):
    """A trace file holds a line that is not a valid OTLP/JSON export request."""

    def __init__(self, path: Path, line_no: int, reason: str) -> None:
        super().__init__(f"{path}:{line_no}: not an OTLP/JSON trace record ({reason})")
        self.path, self.line_no, self.reason = path, line_no, reason


#: What a line of a trace file can raise when it is not a valid record (a deeply nested line
#: overflows the JSON parser's recursion; a huge number overflows an int).
_UNREADABLE = (*_BAD_RECORD, RecursionError, OverflowError)
#: Bad lines reported one by one per file; the rest are counted.
_MAX_WARNINGS = 5


_HEX_TRACE_ID = re.compile(rb'"traceId":"[0-9a-f]{32}"')


def _other_traces_only(raw: bytes, prefix: bytes) -> bool:
    """Whether a line certainly holds no span of the traces ``prefix`` starts: every trace id in it
    is written as this store writes them (``"traceId":"`` and lowercase hex) and none starts with
    ``prefix`` (scans in C, no decoding)."""
    if b'"traceId":"' + prefix in raw:
        return False
    n = raw.count(b'"traceId"')
    return n > 0 and n == len(_HEX_TRACE_ID.findall(raw))


def read_span_file(path: Path, trace_prefix: str | None = None) -> Iterator[SpanRecord]:
    """Span records of one OTLP/JSON-lines file, in file order (with ``trace_prefix``, lines that
    hold only other traces are passed over undecoded).

    A bad line (not JSON, not an export request, a truncated last line left by a crash) is
    skipped with a warning naming the file and line, so one bad line never makes the rest
    unreadable. A file with no valid line may be one JSON document (a request, pretty-printed, or
    a list of them); else it raises :class:`TraceFileError` naming its first bad line.
    """
    bad: list[tuple[TraceFileError, bool]] = []  # (error, on a last line without its newline)
    n_good = 0
    # lone surrogates (an argument's undecodable bytes, as os.fsdecode gives them) match no trace
    prefix = trace_prefix.lower().encode("utf-8", "surrogatepass") if trace_prefix is not None else None
    with open(path, "rb") as fh:  # line by line: a large store is never held whole
        size = 0
        for i, raw in enumerate(_lines(fh)):
            size += len(raw)
            if not raw.strip():
                continue
            if prefix is not None and _other_traces_only(raw, prefix):
                n_good += 1  # a line of this store's, of another trace
                continue
            try:
                records = decode_request(json.loads(raw))
            except _UNREADABLE as exc:
                bad.append((TraceFileError(path, i + 1, _reason(exc)), not raw.endswith(b"\n")))
                continue
            n_good += 1
            yield from records
        # another writer's line, not written whole yet: not an error
        if bad and bad[-1][1] and _write_in_progress(fh.fileno(), size):
            logger.debug("%s; line skipped (being written)", bad.pop()[0])
    if bad and not n_good:  # not JSON lines: perhaps one JSON document (a pretty-printed request)
        yield from _document_records(path, path.read_bytes(), bad[0][0])
        return
    for error, last in bad[:_MAX_WARNINGS]:
        logger.warning("%s; line skipped%s", error, " (a truncated last line)" if last else "")
    if len(bad) > _MAX_WARNINGS:
        logger.warning("%s: %d more bad lines skipped", path, len(bad) - _MAX_WARNINGS)


def _lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of a file as far as it was written when read: they stop at a line without its
    newline (the end of the file then; the rest of a line being written is not read as a line)."""
    for raw in fh:
        yield raw
        if not raw.endswith(b"\n"):
            return


def _write_in_progress(fd: int, size: int) -> bool:
    """Whether a last line without its newline is a write in progress (another thread's or
    process's, which holds the file's lock until its line is whole), not one a crash cut short:
    the lock is held, or the file grew past the ``size`` bytes read."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # no locks here (some network filesystems): a crash's, as before
        return False
    try:
        return os.fstat(fd).st_size > size
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _document_records(path: Path, data: bytes, first_bad: TraceFileError) -> list[SpanRecord]:
    """The records of a file holding one JSON document: an export request or a list of them.

    Raises ``first_bad`` (its first bad line) when the file is not one JSON document, and
    :class:`TraceFileError` for line 1 when it is one but not OTLP.
    """
    try:
        body = json.loads(data)
    except _UNREADABLE:
        raise first_bad from None
    try:
        return [rec for request in (body if isinstance(body, list) else [body]) for rec in decode_request(request)]
    except _UNREADABLE as exc:
        if b"\n" not in data.strip():  # one line: its own error says it
            raise first_bad from None
        raise TraceFileError(path, 1, f"a JSON document that is not an export request: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """A short reason for a bad line: JSON too deeply nested, a number out of range, a missing field, or the message."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    if isinstance(exc, OverflowError):
        return f"number out of range ({exc})"
    if isinstance(exc, KeyError) and exc.args:
        return f"missing field {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def merge_records(records: Iterable[SpanRecord]) -> dict[str, list[SpanRecord]]:
    """Group records by trace, keeping one record per span (amendments merged in file order)."""
    by_span: dict[tuple[str, str], SpanRecord] = {}
    for rec in records:
        key = (rec.trace_id, rec.span_id)
        prev = by_span.get(key)
        if prev is None:
            by_span[key] = rec
            continue
        prev.attributes.update(rec.attributes)
        known = {(e["name"], e["time_ns"]) for e in prev.events}
        prev.events.extend(e for e in rec.events if (e["name"], e["time_ns"]) not in known)
        if rec.status != "UNSET":
            prev.status, prev.status_message = rec.status, rec.status_message
    expand(by_span)  # long attributes stored as deltas of an earlier span's (store_delta)
    traces: dict[str, list[SpanRecord]] = defaultdict(list)
    for rec in by_span.values():
        traces[rec.trace_id].append(rec)
    for spans in traces.values():
        spans.sort(key=lambda r: (r.start_ns, r.span_id))
    return dict(traces)


#: The most trace ids an ambiguous prefix's error lists.
_LISTED = 10


def _listed(ids: list[str]) -> str:
    """``: id, id, ...`` (at most :data:`_LISTED`) and how to pick one, for an ambiguous prefix."""
    more = f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else ""
    return f": {', '.join(ids[:_LISTED])}{more}; give more of the id"


def span_files(source: str | os.PathLike[str]) -> list[Path]:
    """The ``*.jsonl``/``*.json`` files of a store directory, or the file itself (after this
    process's queued spans are written: flush-before-read)."""
    flush_writers()
    path = Path(source)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in {".jsonl", ".json"} and p.is_file())
    if path.is_file():
        return [path]
    raise FileNotFoundError(f"no trace store or trace file at {path}")


def _readable_records(path: Path, trace_prefix: str | None = None) -> Iterator[SpanRecord]:
    """A store's file: as :func:`read_span_file`, but a file with no valid line is skipped with a warning."""
    try:
        yield from read_span_file(path, trace_prefix)
    except TraceFileError as exc:
        logger.warning("%s; file skipped", exc)


def _end_last_line(fd: int, path: Path) -> None:
    """Before appending, end the file with a newline: a crash mid-write leaves a partial line.

    A partial line (not a JSON document) is dropped (readers skip it anyway) so that the next
    line does not glue onto it and corrupt the file; a complete one (any JSON document, another
    producer's too, or one too deeply nested to tell) just gets its newline.
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = size
    while start > 0:
        chunk_start = max(0, start - 65536)
        newline = os.pread(fd, start - chunk_start, chunk_start).rfind(b"\n")
        if newline >= 0:
            start = chunk_start + newline + 1
            break
        start = chunk_start
    try:
        json.loads(os.pread(fd, size - start, start))
    except ValueError:  # not JSON, or not UTF-8: cut short
        logger.warning("%s: dropping a partial last line (%d bytes) left by an interrupted write", path, size - start)
        os.ftruncate(fd, start)
        return
    except RecursionError:  # too deeply nested to tell: kept
        pass
    os.write(fd, b"\n")


def _after_fork() -> None:
    """A child forked while a thread of its parent wrote to a store: that write's lock (this
    process's, and the file's, held through the child's copy of the file descriptor until the
    child closes it) is let go, or the child's writes and all of the parent's later ones wait
    for good."""
    open_fds = _descriptors_of({str(store._file) for store in _STORES}) if _STORES else set()
    for store in list(_STORES):
        store._lock = threading.Lock()
        fd, store._fd = store._fd, None
        if fd is not None:
            open_fds.add(fd)
    for fd in open_fds:  # also one a fork caught between os.open and its note in _fd (or close)
        try:
            os.close(fd)
        except OSError:
            pass


def _descriptors_of(files: set[str]) -> set[int]:
    """This process's descriptors open on one of ``files`` (Linux's /proc; none elsewhere)."""
    found: set[int] = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}") in files:
                found.add(int(name))
        except (OSError, ValueError):
            continue
    return found


class TraceStore:
    """A directory of OTLP/JSON-lines trace files."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()  # the directory meant now: the app may change directory before a write
        self._file = self.path / SPANS_FILE
        self._lock = threading.Lock()
        self._fd: int | None = None  # the file while a write holds it (its lock)
        _STORES.add(self)

    @property
    def file(self) -> Path:
        return self._file

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the spans this process finished so far are written (the writer works off
        the app thread); False after ``timeout`` seconds."""
        return flush_writers(timeout)

    def append(self, records: Iterable[SpanRecord]) -> None:
        """Append one line holding ``records``; safe across threads and processes."""
        records = list(records)
        if records:
            self.write_line(encode_request(records))

    def write_line(self, line: str, entry: index.Known | None = None) -> None:
        """Append one encoded export request (no newline) as a line; safe across threads and processes.
        ``entry``: its trace starts and sessions, when the caller knows them (the index need not read them)."""
        data = utf8(line)  # lone surrogates escaped, never a lost trace
        with self._lock:
            try:
                self._write(data, entry)
            except OSError as exc:  # kept for readers of this process: why a trace is missing
                _failed_writes[self._file] = f"{type(exc).__name__}: {exc}"
                raise
            _failed_writes.pop(self._file, None)

    def _write(self, data: bytes, entry: index.Known | None = None) -> None:
        try:
            self._fd = fd = os.open(self._file, _APPEND, 0o644)
        except FileNotFoundError:  # no directory yet (or it was removed)
            self.path.mkdir(parents=True, exist_ok=True)
            self._fd = fd = os.open(self._file, _APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _end_last_line(fd, self._file)
            offset = os.fstat(fd).st_size
            written = os.writev(fd, (data, b"\n"))  # the line and its newline, without joining them
            if written < len(data) + 1:  # a short write (a full disk): the rest, or the error
                view = memoryview(data + b"\n")[written:]
                while view:
                    view = view[os.write(fd, view):]
            try:  # under the data file's lock: index entries in line order
                index.note_written(self._file, offset, data, entry)
            except OSError as exc:  # the next reader indexes the line from the data file
                logger.debug("%s: line not indexed: %s", self._file, exc)
        finally:
            self._fd = None
            os.close(fd)

    @contextmanager
    def updating(self) -> Iterator[None]:
        """Hold the store for a read-then-append (a label merged with those already stored): others
        doing the same, in any thread or process, wait until the block ends; plain appends do not."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY)  # the directory's own lock: no file of its own in the store
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # lets go of the lock

    def traces(self) -> dict[str, list[SpanRecord]]:
        """All traces of the store, merged, keyed by trace id (in file order)."""
        return self._merged()

    def _merged(self, trace_prefix: str | None = None) -> dict[str, list[SpanRecord]]:
        """The store's traces (with ``trace_prefix``: at least those it starts), after a flush."""
        self.flush()
        if not self.path.exists():
            return {}
        idx = self._index() if trace_prefix is not None else None
        if idx is not None and trace_prefix is not None:  # only the lines the index names
            prefix = trace_prefix.lower()
            found = list(index.matching(idx, prefix))
            self._warn_bad([e for e in found if e.bad is not None])
            return merge_records(self._records_at([e for e in found if e.bad is None],
                                                  lambda t: t.startswith(prefix)))
        return merge_records(rec for f in span_files(self.path) for rec in _readable_records(f, trace_prefix))

    def _index(self) -> Path | None:
        """The up-to-date line index of the store's file (:mod:`.index`), when that file is its
        only one; None otherwise (other files in the directory, a read-only store): read the files."""
        self.flush()
        try:
            if not self._file.is_file() or span_files(self.path) != [self._file]:
                return None
        except FileNotFoundError:
            return None
        idx = index.update(self._file)
        if idx is not None:
            self._warn_partial_tail(idx)
        return idx

    def _warn_partial_tail(self, idx: Path) -> None:
        """Warn of a last line without its newline that no write is finishing (a crash's), as :func:`read_span_file` does."""
        with open(self._file, "rb") as fh:
            last = next(index._backwards(idx), None)
            end = last.end if last else 0
            size = os.fstat(fh.fileno()).st_size
            if size <= end or _write_in_progress(fh.fileno(), size):
                return
            fh.seek(end)
            tail = fh.read()
        try:
            json.loads(tail)
            reason = "no newline"
        except _UNREADABLE as exc:
            reason = _reason(exc)
        line = (last.line if last else 0) + 1
        logger.warning("%s; line skipped (a truncated last line)", TraceFileError(self._file, line, reason))

    def _warn_bad(self, bad: list[index.Entry]) -> None:
        """Warn of the store file's bad lines, as :func:`read_span_file` does (the first few, then a count)."""
        for entry in bad[:_MAX_WARNINGS]:
            logger.warning("%s; line skipped", TraceFileError(self._file, entry.line, entry.bad or "?"))
        if len(bad) > _MAX_WARNINGS:
            logger.warning("%s: %d more bad lines skipped", self._file, len(bad) - _MAX_WARNINGS)

    def _records_at(self, entries: Iterable[index.Entry], wanted: Callable[[str], bool]) -> list[SpanRecord]:
        """The records of the traces ``wanted`` picks in the lines ``entries`` name (each read once, by offset)."""
        records: list[SpanRecord] = []
        fd = os.open(self._file, os.O_RDONLY)  # no buffered file object: one is read per trace (train import)
        try:
            for entry in sorted({e.offset: e for e in entries}.values(), key=lambda e: e.offset):
                try:
                    found = decode_request(os.pread(fd, entry.size - 1, entry.offset))
                except _UNREADABLE as exc:  # the file changed under its index
                    logger.warning("%s; line skipped", TraceFileError(self._file, entry.line, _reason(exc)))
                    continue
                records += (r for r in found if wanted(r.trace_id))
        finally:
            os.close(fd)
        return records

    def recent(self, limit: int, session: str | None = None) -> list[list[SpanRecord]] | None:
        """The spans of the ``limit`` traces (0: all) that started last, newest first (of
        ``session`` only, when given), read through the index: only its tail and those traces'
        lines are read. None when the store has no index (:meth:`_index`): read :meth:`traces`."""
        idx = self._index()
        if idx is None:
            return None
        self._warn_bad(index.bad_entries(idx))
        chosen = index.recent(idx, limit, session)
        merged = merge_records(self._records_at([e for lines in chosen.values() for e in lines], chosen.__contains__))
        return [merged[t] for t in chosen if t in merged]

    def bad_lines(self) -> list[tuple[int, str]] | None:
        """(line number, reason) of each line of the store's file that is no valid record, from
        its index; None when the store has no index (:meth:`_index`)."""
        idx = self._index()
        return None if idx is None else [(e.line, e.bad or "?") for e in index.bad_entries(idx)]

    def each_trace(self, warn: bool = True) -> Iterator[list[SpanRecord]]:
        """Every trace of the store, merged, one at a time (a trace once its last line is read);
        through the index, the memory held is a few numbers per line, never the store's traces.
        ``warn``: bad lines are warned about (else the caller reports :meth:`bad_lines`)."""
        idx = self._index()
        if idx is None:
            yield from self.traces().values()
            return
        if warn:
            self._warn_bad(index.bad_entries(idx))
        lines: dict[str, list[tuple[int, int, int]]] = {}  # trace id -> (line, offset, size) of its lines
        last: dict[int, list[str]] = defaultdict(list)  # line -> the traces whose last line it is
        for entry in index.entries(idx):
            for trace_id in entry.traces:
                lines.setdefault(trace_id, []).append((entry.line, entry.offset, entry.size))
        for trace_id, where in lines.items():
            last[where[-1][0]].append(trace_id)
        for line in sorted(last):
            for trace_id in last[line]:
                entries = [index.Entry(n, o, size, 0) for n, o, size in lines.pop(trace_id)]
                yield from merge_records(self._records_at(entries, trace_id.__eq__)).values()

    def trace(self, trace_id: str) -> list[SpanRecord]:
        """The spans of one trace; ``trace_id`` may be a unique prefix. Only lines that may hold
        it are decoded (a large store is not read whole for one trace). An empty id names none
        (it is a prefix of every id: an unset variable would pick the store's only trace)."""
        if not trace_id.strip():
            raise KeyError(f"an empty trace id names no trace in {self.path}")
        traces = self._merged(trace_id)
        matches = [t for t in traces if t.startswith(trace_id.lower())]
        if len(matches) != 1:
            what = "no trace" if not matches else f"{len(matches)} traces"
            failed = _failed_writes.get(self._file) if not matches else None
            raise KeyError(f"{what} matching {trace_id!r} in {self.path}"
                           + (f" (the last write to it failed: {failed})" if failed else "")
                           + (_listed(sorted(matches)) if matches else self.nested_hint()))
        return traces[matches[0]]

    def nested_hint(self) -> str:
        """``' (its folders a, b are trace stores: ...)'`` when the store's folders are stores (an
        injection campaign's traces/ and baselines/), else ``''``."""
        try:
            nested = sorted(p.name for p in self.path.iterdir() if (p / SPANS_FILE).is_file())
        except OSError:  # no directory (or not one)
            return ""
        return f" (its folders {', '.join(nested)} are trace stores: give one of them)" if nested else ""

    def amend(
        self,
        trace_id: str,
        span_id: str | None = None,
        *,
        attributes: Mapping[str, Any] | None = None,
        events: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """Append new attributes/events for a span (default: the trace's root span). Verdicts among
        a root span's new attributes (an outcome, a label) also become evaluation events on the
        spans they judge (:mod:`aegis_probe.capture.evaluations`)."""
        from ..capture.evaluations import stored_evaluations

        spans = self.trace(trace_id)
        found = (next((s for s in spans if s.parent_span_id is None), spans[0]) if span_id is None
                 else next((s for s in spans if s.span_id == span_id), None))
        if found is None:
            raise KeyError(f"no span {span_id} in trace {trace_id}")
        judged = stored_evaluations(spans, attributes or {}) if found.parent_span_id is None else []
        target = found
        target.attributes = dict(attributes or {})
        target.events = [
            {"name": e["name"], "time_ns": int(e.get("time_ns", 0)), "attributes": dict(e.get("attributes", {}))}
            for e in events
        ]
        self.append([target, *judged])


_STORES: "weakref.WeakSet[TraceStore]" = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
