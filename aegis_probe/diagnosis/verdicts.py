"""A diagnosis's verdict written onto the stored run as the label set of its own source."""

from __future__ import annotations

from ..storage.store import TraceStore
from ..trajectory import Fault, Trajectory, label_attributes


def write_verdict(store: TraceStore, run: Trajectory, source: str, step: int, reason: str) -> None:
    """Add ``run``'s step ``step`` as ``source``'s fault, next to every other label (append-only)."""
    target = run.steps[step]
    fault = Fault(agent=target.agent, step=step, span_id=target.span_id, reason=reason)
    trace_id = run.trace_id or ""
    with store.updating():  # read and added to while no other writer can
        store.amend(trace_id, attributes=label_attributes(store.trace(trace_id), source, [fault]))
