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

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

from ..capture import semconv as sc
from ..apps import AppSpec, Endpoint
from ..errors import one_line
from ..executors import Executor
from ..capture.probe import Judge
from ..storage.store import TraceStore
from ..redact import redact_secrets
from ..trajectory import Fault, Trajectory, label_attributes
from .recording import load_recording
from .replayer import ReplayResult, replay

#: ``fixer(trajectory, step_index) -> corrected action text`` (None: no correction to try).
Fixer = Callable[[Trajectory, int], "str | None"]


@dataclass
class Attempt:
    """One counterfactual replay."""

    step: int
    agent: str
    correction: str
    success: bool | None
    answer: str | None
    error: str | None = None
    #: The replay says nothing about the correction: the model endpoint failed a live call (or the
    #: replay itself could not run) and the run did not succeed.
    inconclusive: bool = False


@dataclass
class BlameReport:
    """Outcome of a decisive-error search."""

    trace_id: str
    search: str
    step: int | None = None
    agent: str | None = None
    evidence: Attempt | None = None
    attempts: list[Attempt] = field(default_factory=list)
    exhausted: str | None = None  # which budget (or inconclusive replay) ended the search early, if any
    tokens: int = 0

    @property
    def found(self) -> bool:
        return self.step is not None


class _Search:
    def __init__(self, trace_id: str, app: AppSpec, fixer: Fixer, judge: Judge, endpoint: Endpoint,
                 store: TraceStore, max_replays: int, max_tokens: int | None, on_attempt: Callable[[Attempt], None] | None):
        self.app, self.fixer, self.judge = app, fixer, judge
        self.endpoint, self.store = endpoint, store
        self.max_replays, self.max_tokens, self.on_attempt = max_replays, max_tokens, on_attempt
        self.spans = store.trace(trace_id)  # read once: every replay starts from these spans
        self.original = Trajectory.from_spans(self.spans)
        self.calling = {c.step_index for c in load_recording(self.spans).values()}  # steps that called the model
        if self.original.outcome.success is True:
            raise ValueError(f"trace {self.original.trace_id} succeeded: blame needs a failed run")
        self.report = BlameReport(trace_id=self.original.trace_id or trace_id, search="")
        self._cache: dict[tuple[int, str], Attempt] = {}
        self.replays = 0

    def budget_left(self) -> bool:
        if self.replays >= self.max_replays:
            self.report.exhausted = f"max_replays={self.max_replays}"
        elif self.max_tokens is not None and self.report.tokens >= self.max_tokens:
            self.report.exhausted = f"max_tokens={self.max_tokens}"
        return self.report.exhausted is None

    def correction(self, t: int) -> str | None:
        """The fixer's correction of step t; None when there is nothing to replay (also for a step
        that made no model call: its action cannot be substituted, so the fixer is not asked)."""
        if t not in self.calling:
            return None
        correction = self.fixer(self.original, t)
        if correction is not None and not isinstance(correction, str):
            raise ValueError(f"the fixer returned {type(correction).__name__} {correction!r:.40} for step {t}; "
                            "it must return the corrected text (str) or None")
        return None if correction is None or correction == self.original.steps[t].output else correction

    def record(self, t: int, correction: str, success: bool | None, answer: str | None, error: str | None,
               tokens: int, inconclusive: bool = False) -> Attempt:
        """Count one finished replay of step t against the budgets and report it."""
        self.replays += 1
        self.report.tokens += tokens
        attempt = Attempt(t, self.original.steps[t].agent, correction, success, answer, error,
                          inconclusive=inconclusive and not success)
        self._cache[(t, correction)] = attempt
        self.report.attempts.append(attempt)
        if self.on_attempt:
            self.on_attempt(attempt)
        return attempt

    def verdict(self, attempt: Attempt) -> bool | None:
        """Whether the attempt flipped the run (the earliest flipping step is the decisive one);
        None when it cannot tell, which ends the search: a later step must not be blamed for it."""
        if attempt.inconclusive:
            self.report.exhausted = (f"the replay of step {attempt.step} could not reach the model "
                                     f"({one_line(attempt.error or 'a model call failed')})")
            return None
        if attempt.success and (self.report.step is None or attempt.step < self.report.step):
            self.report.step, self.report.agent, self.report.evidence = attempt.step, attempt.agent, attempt
        return bool(attempt.success)

    def flips(self, t: int) -> bool | None:
        """Whether correcting step t flips the run; None when the budget ran out."""
        correction = self.correction(t)
        if correction is None:
            return False
        attempt = self._cache.get((t, correction))
        if attempt is None:
            if not self.budget_left():
                return None
            result: ReplayResult = replay(self.spans, self.app, until_step=t,
                                          substitute=correction, endpoint=self.endpoint, judge=self.judge, store=self.store)
            success = result.trajectory.outcome.success if result.trajectory else None
            attempt = self.record(t, correction, success, result.answer, result.error, result.tokens,
                                  inconclusive=result.live_failed > 0)
        return self.verdict(attempt)


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
    state = _Search(trace_id, app, fixer, judge, endpoint, store, max_replays, max_tokens, on_attempt)
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
