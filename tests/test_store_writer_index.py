"""The store writer hands the index each line's trace starts and sessions (it encoded the spans):
the entries are those the index reads back from the lines themselves, and a line it cannot
vouch for (spans of two scopes, a span with events) is read by the index as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from aegis_probe.capture.leanspans import LeanTracerProvider
from aegis_probe.storage import index
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore


def _entries_and_reread(store: TraceStore) -> tuple[list[index.Entry], list[index.Entry]]:
    """The index's entries as written, and as the index reads them from the data file."""
    assert store.flush()
    path = index.index_path(store.file)
    written = list(index.entries(path))
    path.unlink()
    index._KNOWN.clear()
    assert index.update(store.file) is not None
    return written, list(index.entries(path))


@pytest.mark.parametrize("shape", ["plain", "two scopes", "events", "long session", "no session"])
def test_the_writers_index_entries_are_what_the_index_reads_back(tmp_path: Path, shape: str, monkeypatch) -> None:
    calls: list[bytes] = []
    real = index._fast_entry
    monkeypatch.setattr(index, "_fast_entry", lambda data: calls.append(data) or real(data))
    store = TraceStore(tmp_path / "store")
    provider = LeanTracerProvider()
    provider.add_span_processor(StoreSpanProcessor(store))
    tracer, other = provider.get_tracer("aegis_probe"), provider.get_tracer("someone.else")
    session = "s" * 300 if shape == "long session" else None if shape == "no session" else "session-7"
    attrs = {} if session is None else {"session.id": session}
    for run in range(3):
        with tracer.start_as_current_span(f"run {run}", attributes=attrs):
            for i in range(4):
                with (other if shape == "two scopes" and i == 2 else tracer).start_as_current_span(f"step {i}", attributes={**attrs, "n": i}) as span:
                    if shape == "events" and i == 1:
                        span.add_event("something", {"session.id": "another"})
    assert store.flush()
    read = len(calls)  # lines the index read itself while the writer wrote
    written, reread = _entries_and_reread(store)
    assert len(written) == 3 and [(e.traces, e.sessions) for e in written] == [(e.traces, e.sessions) for e in reread]
    assert all(len(e.traces) == 1 for e in written)
    assert all(e.sessions == ({} if session is None else {next(iter(e.traces)): session}) for e in written) or shape == "events"
    assert read == (0 if shape in ("plain", "no session") else 3)  # a line the writer vouches for is not read again
    provider.shutdown()
