"""The state of a decisive-error search (:mod:`.blame`): the failed run, the fixer's corrections,
each counterfactual replay made (an :class:`Attempt`) against the budgets, and the report. The
sequential searches of :mod:`.blame` and the parallel scan of :mod:`.parallel_scan` share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..apps import AppSpec, Endpoint
from ..capture.probe import Judge
from ..errors import one_line
from ..storage.store import TraceStore
from ..trajectory import Trajectory
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


class SearchState:
    """One decisive-error search: the failed run as read once, the fixer's corrections, the
    replays made so far (cached by step and correction) against the budgets, and the report."""

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
