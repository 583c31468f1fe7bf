"""Decisive-error search: the earliest step whose correction turns a failed run into a success.

For each candidate step t, a *fixer* proposes a corrected action for t; the run is replayed with
steps before t from the recording, the corrected action at t, and the rest live, then judged.

- ``scan`` (exact): t = 0, 1, 2, ... until a correction flips the outcome.
- ``bisect`` (heuristic): binary search for the earliest flipping t, *assuming* that no
  correction before the decisive step flips the run and any correction at or after it does.
  That holds when later agents can repair an earlier mistake once corrected, not in general; it
  costs about log2(n) replays instead of up to n, and its answer should be confirmed with scan.

- ``candidates`` (``blame --method judge --verify``): only the given steps (a judge's proposals),
  earliest first, until a correction flips the outcome: the judge proposes, replay decides.

The search method is called ``search`` everywhere ("mode" is a failure mode only). The verdict is
written as the label set of its own source (``blame:replay:<search>``, or the caller's), never
over another's.

Budgets (replays, live tokens) end the search cleanly with a partial report. Results are cached
by (step, corrected action), and a correction identical to the recorded action is not replayed
(its prefix and action equal the failed original).
"""

from __future__ import annotations

from typing import Callable, Literal, Sequence

from ..capture import semconv as sc
from ..apps import AppSpec, Endpoint
from ..executors import Executor
from ..capture.probe import Judge
from ..storage.store import TraceStore
from ..redact import redact_secrets
from ..trajectory import Fault, Trajectory, label_attributes
from .search import Attempt, BlameReport, Fixer, SearchState


def blame(
    trace_id: str,
    app: AppSpec,
    *,
    fixer: Fixer,
    judge: Judge,
    endpoint: Endpoint,
    search: Literal["scan", "bisect", "candidates"] = "scan",
    candidates: Sequence[int] = (),
    source: str | None = None,
    max_replays: int = 20,
    max_tokens: int | None = None,
    store: TraceStore,
    on_attempt: Callable[[Attempt], None] | None = None,
    write_label: bool = True,
    executor: Executor | None = None,
) -> BlameReport:
    """Find the decisive error of a failed run; write it onto the trace as the label of ``source``
    (default ``blame:replay:<search>``). ``candidates``: the steps ``search="candidates"`` tries.

    With an ``executor``, the scan replays its candidate steps in parallel on it, with the same
    result as the sequential scan (see :mod:`~aegis_probe.counterfactual.parallel_scan`); bisect
    stays sequential.
    """
    state = SearchState(trace_id, app, fixer, judge, endpoint, store, max_replays, max_tokens, on_attempt)
    state.report.search = search
    n = len(state.original.steps)
    if search == "scan" and executor is not None:
        from .parallel_scan import scan_in_parallel

        scan_in_parallel(state, executor)
    elif search in ("scan", "candidates"):
        for t in (range(n) if search == "scan" else sorted({c for c in candidates if 0 <= c < n})):
            if state.flips(t) is not False:
                break
    elif search == "bisect":
        lo, hi = 0, n - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            verdict = state.flips(mid)
            if verdict is None:
                break
            if verdict:
                hi = mid - 1
            else:
                lo = mid + 1
    else:
        raise ValueError(f"unknown blame search {search!r}: use 'scan', 'bisect' or 'candidates'")
    if write_label and state.report.found:
        _write_label(store, state.original, state.report, source or f"blame:replay:{search}")
    return state.report


def _write_label(store: TraceStore, original: Trajectory, report: BlameReport, source: str) -> None:
    step = original.steps[report.step]  # type: ignore[index]
    evidence = report.evidence
    fault = Fault(agent=report.agent, step=report.step, span_id=step.span_id,
                  reason=f"decisive error (search {report.search}): correcting step {report.step} flips the run to success")
    trace_id = original.trace_id or ""
    with store.updating():  # read and added to while no other search can (two searches of one trace at once)
        spans = store.trace(trace_id)
        # Added next to the trace's other labels (an injection's, another search's), never over them.
        store.amend(trace_id, attributes=label_attributes(spans, source, [fault]))
        searched = sum(e.get("name") == sc.EVENT_BLAME for s in spans if s.span_id == step.span_id for e in s.events)
        store.amend(trace_id, step.span_id, events=[{
            "name": sc.EVENT_BLAME,
            "time_ns": (step.end_ns or 0) + searched,  # one event per search: events of a span are told apart by name and time
            "attributes": {"search": report.search, "correction": redact_secrets(evidence.correction) if evidence else "",
                           "new_answer": redact_secrets(evidence.answer or "") if evidence else ""},
        }])
