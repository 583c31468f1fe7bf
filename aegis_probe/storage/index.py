"""The store's line index: one small JSON line per line of ``spans.jsonl``, in ``spans.jsonl.idx``.

An entry says where a line is and which traces it holds:
``{"l": line number, "o": byte offset, "n": bytes with the newline, "w": a clock, "t": {trace id: earliest span start}}``,
plus ``"u": {trace id: session id}`` when the line says a session, and ``"x": reason`` for a line
that is not a valid record. ``w`` never decreases along the index and is at least every span start
of its line and of the lines before it, so a reader walking the index backwards knows when no
earlier line can hold a trace that started later (:func:`recent`).

The index always covers a prefix of the data file, line by line. The store writer appends an entry
for each line it writes while the index is current (:func:`note_written`); a reader brings it up to
date from the data file when it is missing or behind (:func:`update`: old stores, other writers, a
crash between the two writes). Both hold the index file's lock (``flock``) while they append.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

logger = logging.getLogger("aegis_probe.storage.store")

SUFFIX = ".idx"
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT
_TAIL = 1 << 16  # bytes read back to find the last entry

# A span as this store's writer encodes it (otlp_encode._SPAN): its trace id and start, read without decoding the line.
_SPAN = re.compile(rb'"traceId":"([0-9a-f]{32})","spanId":"[0-9a-f]{16}","name":"(?:[^"\\]|\\.)*",'
                   rb'"kind":\d+,"startTimeUnixNano":"(\d+)"')
_SESSION = re.compile(rb'"key":"session\.id","value":\{"stringValue":("(?:[^"\\]|\\.)*")\}')


def index_path(data: Path) -> Path:
    """The index file of a store file."""
    return data.with_name(data.name + SUFFIX)


@dataclass
class Entry:
    """One line of the data file, as the index says it."""

    line: int
    offset: int
    size: int
    clock: int
    traces: dict[str, int] = field(default_factory=dict)  # trace id -> earliest span start in the line
    sessions: dict[str, str] = field(default_factory=dict)
    bad: str | None = None

    @classmethod
    def parse(cls, raw: bytes) -> "Entry":
        d = json.loads(raw)
        return cls(d["l"], d["o"], d["n"], d["w"], d.get("t", {}), d.get("u", {}), d.get("x"))

    def text(self) -> bytes:
        d: dict[str, Any] = {"l": self.line, "o": self.offset, "n": self.size, "w": self.clock, "t": self.traces}
        if self.sessions:
            d["u"] = self.sessions
        if self.bad is not None:
            d["x"] = self.bad
        return json.dumps(d, separators=(",", ":")).encode() + b"\n"

    @property
    def end(self) -> int:
        return self.offset + self.size


def _fast_entry(data: bytes) -> tuple[dict[str, int], dict[str, str]] | None:
    """Trace starts and sessions of a line this store's writer encoded, read by pattern; None when
    the line is not in that shape (then it is decoded)."""
    starts: dict[str, int] = {}
    n = 0
    for trace_id, start in _SPAN.findall(data):
        n += 1
        key, value = trace_id.decode(), int(start)
        if value < starts.get(key, value + 1):
            starts[key] = value
    if n == 0 or n != data.count(b'"traceId"'):
        return None
    sessions = {}
    if b'"session.id"' in data:
        found = _SESSION.findall(data)
        if len(starts) != 1 or not found:
            return None
        sessions[next(iter(starts))] = json.loads(found[0])
    return starts, sessions


def _decoded_entry(data: bytes) -> tuple[dict[str, int], dict[str, str], str | None]:
    """Trace starts, sessions and the reason it is bad (else None) of any line, decoded."""
    from .otlp_json import decode_request
    from .store import _UNREADABLE, _reason

    try:
        records = decode_request(json.loads(data))
    except _UNREADABLE as exc:
        return {}, {}, _reason(exc)
    starts: dict[str, int] = {}
    sessions: dict[str, str] = {}
    for rec in records:
        if rec.start_ns < starts.get(rec.trace_id, rec.start_ns + 1):
            starts[rec.trace_id] = rec.start_ns
        session = rec.attributes.get("session.id")
        if isinstance(session, str):
            sessions[rec.trace_id] = session
    return starts, sessions, None


def _entry(data: bytes, line: int, offset: int, clock: int, known: Known | None = None) -> Entry:
    fast = known if known is not None else _fast_entry(data) if data.strip() else ({}, {})
    if fast is not None:
        starts, sessions, bad = fast[0], fast[1], None
    else:
        starts, sessions, bad = _decoded_entry(data)
    clock = max([clock, *starts.values()])
    return Entry(line, offset, len(data) + 1, clock, starts, sessions, bad)


def _last(fd: int) -> Entry | None:
    """The index's last entry (None when empty); a partial last entry (a crash) is cut off."""
    size = os.fstat(fd).st_size
    while size:
        start = max(0, size - _TAIL)
        chunk = os.pread(fd, size - start, start)
        cut = chunk.rstrip(b"\n").rfind(b"\n")
        if cut < 0 and start > 0:  # an entry longer than the chunk (a line of many traces)
            size_needed = _TAIL * 2
            while cut < 0 and start > 0:
                start = max(0, size - size_needed)
                chunk = os.pread(fd, size - start, start)
                cut = chunk.rstrip(b"\n").rfind(b"\n")
                size_needed *= 2
        tail = chunk[cut + 1:]
        try:
            if not tail.endswith(b"\n"):
                raise ValueError("no newline")
            return Entry.parse(tail)
        except (ValueError, KeyError, TypeError):
            logger.warning("%s: dropping a partial last index entry", "index")
            os.ftruncate(fd, start + cut + 1)
            size = start + cut + 1
    return None


@dataclass
class _State:
    """What this process last knew of an index: its size, and its last entry's end, line and clock."""

    size: int
    end: int
    line: int
    clock: int


_KNOWN: dict[Path, _State] = {}


def _current(fd: int, path: Path) -> _State:
    size = os.fstat(fd).st_size
    known = _KNOWN.get(path)
    if known is not None and known.size == size:
        return known
    last = _last(fd)
    state = _State(os.fstat(fd).st_size, last.end if last else 0, last.line if last else 0, last.clock if last else 0)
    _KNOWN[path] = state
    return state


#: A line's trace starts and sessions (by trace id in hex), as :func:`_fast_entry` reads them.
Known = tuple[dict[str, int], dict[str, str]]


def note_written(data_file: Path, offset: int, data: bytes, known: Known | None = None) -> None:
    """Index a line just written at ``offset`` (the writer holds the data file's lock), if the
    index covers everything before it; else leave it to the next reader (:func:`update`).
    ``known``: the line's trace starts and sessions, when its writer knows them (not read again)."""
    path = index_path(data_file)
    fd = os.open(path, _APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = _current(fd, path)
        if state.end != offset or b"\n" in data:  # behind, or text of several lines: read from the file
            return
        entry = _entry(data, state.line + 1, offset, max(state.clock, time.time_ns()), known)
        text = entry.text()
        os.write(fd, text)
        _KNOWN[path] = _State(state.size + len(text), entry.end, entry.line, entry.clock)
    finally:
        os.close(fd)


def update(data_file: Path) -> Path | None:
    """Bring the index of ``data_file`` up to date with its complete lines; the index's path, or
    None when it cannot be written (a read-only store: the caller reads the data file itself)."""
    path = index_path(data_file)
    try:
        fd = os.open(path, _APPEND, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = _current(fd, path)
        size = data_file.stat().st_size
        if state.end > size or (state.end and _byte_before(data_file, state.end) != b"\n"):
            logger.info("%s: the index does not match its store file; rebuilt", path)
            os.ftruncate(fd, 0)
            state = _State(0, 0, 0, 0)
        if state.end < size:
            state = _extend(fd, data_file, state)
            _KNOWN[path] = state
        return path
    except OSError as exc:
        logger.debug("%s: index not updated: %s", path, exc)
        return None
    finally:
        os.close(fd)


def _byte_before(data_file: Path, end: int) -> bytes:
    with open(data_file, "rb") as fh:
        fh.seek(end - 1)
        return fh.read(1)


def _extend(fd: int, data_file: Path, state: _State) -> _State:
    out: list[bytes] = []
    written = 0
    offset, line, clock = state.end, state.line, state.clock
    with open(data_file, "rb") as fh:
        fh.seek(offset)
        for raw in fh:
            if not raw.endswith(b"\n"):  # a line being written, or cut short by a crash: not indexed
                break
            line += 1
            entry = _entry(raw[:-1], line, offset, clock)
            clock, offset = entry.clock, entry.end
            out.append(entry.text())
            if len(out) >= 4096:
                written += os.write(fd, b"".join(out))
                out.clear()
    if out:
        written += os.write(fd, b"".join(out))
    return _State(state.size + written, offset, line, clock)


def entries(index: Path) -> Iterator[Entry]:
    """The entries of an index, first to last."""
    with open(index, "rb") as fh:
        for raw in fh:
            if raw.endswith(b"\n"):
                yield Entry.parse(raw)


def _backwards(index: Path) -> Iterator[Entry]:
    """The entries of an index, last to first (read in chunks from the end)."""
    with open(index, "rb") as fh:
        pos = fh.seek(0, os.SEEK_END)
        rest = b""
        while pos > 0:
            start = max(0, pos - _TAIL)
            fh.seek(start)
            chunk = fh.read(pos - start) + rest
            pos = start
            lines = chunk.split(b"\n")
            if not rest and not chunk.endswith(b"\n"):  # the end: an entry being written
                lines.pop()
            rest = lines.pop(0) if pos > 0 else b""
            for raw in reversed(lines):
                if raw:
                    yield Entry.parse(raw)
        if rest:
            yield Entry.parse(rest)


def matching(index: Path, prefix: str) -> Iterator[Entry]:
    """The entries of lines that hold a trace whose id starts with ``prefix`` (lower case), and
    those of bad lines (found by a byte search: the other entries are not decoded)."""
    needle = b'"' + prefix.encode("utf-8", "surrogatepass")
    with open(index, "rb") as fh:
        for raw in fh:
            if (needle in raw or b'"x":' in raw) and raw.endswith(b"\n"):
                entry = Entry.parse(raw)
                if entry.bad is not None or any(t.startswith(prefix) for t in entry.traces):
                    yield entry


def bad_entries(index: Path) -> list[Entry]:
    """The entries of the bad lines of a store file (a byte search over the index)."""
    with open(index, "rb") as fh:
        return [Entry.parse(raw) for raw in fh if b'"x":' in raw and raw.endswith(b"\n")]


def recent(index: Path, limit: int, session: str | None = None) -> dict[str, list[Entry]]:
    """The ``limit`` traces (0: all) that started last (of ``session`` only, when given), each with
    the entries of its lines, newest first; only the tail of the index that can hold them is read.

    Walking back, an entry whose clock is at most the ``limit``-th latest start found so far ends
    the walk: no line before it holds a span that started later.
    """
    starts: dict[str, int] = {}
    lines: dict[str, list[Entry]] = {}
    sessions: dict[str, str] = {}
    wanted: dict[str, int] = {}  # the traces listed if they start late enough: their starts
    threshold: int | None = None  # the limit-th latest start among them (None: not known, or too few)
    for entry in _backwards(index):
        if threshold is None and limit and len(wanted) >= limit:
            threshold = heapq.nlargest(limit, wanted.values())[-1]
        if threshold is not None and entry.clock <= threshold:  # ties at the limit: the later written listed
            break
        sessions.update(entry.sessions)
        for trace_id, start in entry.traces.items():
            if start < starts.get(trace_id, start + 1):
                starts[trace_id] = start
            lines.setdefault(trace_id, []).append(entry)
        for trace_id in entry.traces.keys() | entry.sessions.keys():
            if trace_id in starts and (session is None or sessions.get(trace_id) == session):
                wanted[trace_id] = starts[trace_id]
                threshold = None
    chosen = sorted(wanted, key=lambda t: wanted[t], reverse=True)
    return {t: lines[t][::-1] for t in (chosen[:limit] if limit else chosen)}
