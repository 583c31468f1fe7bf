"""The blame scan with its candidate steps replayed in parallel on an executor.

Each candidate step's replay is independent, so up to ``executor.concurrency`` of them run at
once, in step order, each in a scratch trace store where it runs; its spans come back here. The
results are then taken in step order exactly as the sequential scan takes them: the budgets are
checked before each step, and the search stops at the earliest flipping step. So the report (step,
attempts, tokens, exhausted budget) and the trace store are those of the sequential scan.

Budgets across workers: no replay starts once ``max_replays`` have started or the finished ones
have spent ``max_tokens``. Replays of steps after the decisive one that were already running are
cancelled; their work is not reported, and their tokens can exceed ``max_tokens`` by at most what
the replays in flight spend (the sequential scan overshoots by one replay).
"""

from __future__ import annotations

import tempfile
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from functools import partial

from ..apps import AppSpec, Endpoint
from ..executors import Executor, Failure, outcome
from ..storage.otlp_json import SpanRecord
from ..capture.probe import Judge
from ..storage.store import TraceStore
from .replayer import replay
from .search import SearchState



@dataclass
class StepReplay:
    """What one counterfactual replay sends back: its verdict and its trace's spans."""

    success: bool | None
    answer: str | None
    error: str | None
    tokens: int
    records: list[SpanRecord] = field(default_factory=list)
    live_failed: int = 0


def replay_step(app: AppSpec, spans: list[SpanRecord], t: int, correction: str, endpoint: Endpoint,
                judge: Judge) -> StepReplay:
    """Replay with step ``t`` corrected, in a scratch store; return the verdict and the spans."""
    with tempfile.TemporaryDirectory(prefix="aegis-replay-") as scratch:
        store = TraceStore(scratch)
        result = replay(spans, app, until_step=t, substitute=correction, endpoint=endpoint, judge=judge, store=store)
        records = [r for trace in store.traces().values() for r in trace]
    success = result.trajectory.outcome.success if result.trajectory else None
    return StepReplay(success, result.answer, result.error, result.tokens, records, result.live_failed)


def scan_in_parallel(search: SearchState, executor: Executor) -> None:
    """Run the scan of ``search`` on ``executor``; the report ends up in ``search.report``."""
    executor.ship(search.app)
    with executor:
        _scan(search, executor)


def _scan(search: SearchState, executor: Executor) -> None:
    n = len(search.original.steps)
    corrections: dict[int, str | None] = {}
    futures: dict[int, Future] = {}
    started = 0  # steps before this one have their correction and, if any, a replay started

    def room() -> bool:
        spent = sum(f.result().tokens for f in futures.values() if f.done() and f.exception() is None)
        return len(futures) < search.max_replays and (search.max_tokens is None or spent < search.max_tokens)

    def fill_window() -> None:
        nonlocal started
        while started < n and sum(not f.done() for f in futures.values()) < executor.concurrency:
            t = started
            if t not in corrections:
                corrections[t] = search.correction(t)
            correction = corrections[t]
            if correction is not None:
                if not room():
                    return
                futures[t] = executor.submit(partial(replay_step, search.app, search.spans, t, correction,
                                                     search.endpoint, search.judge))
            started += 1

    try:
        for t in range(n):
            fill_window()  # if step t is not started yet, nothing runs (steps before it are taken): it is now
            correction = corrections[t]
            if correction is None:
                continue
            if not search.budget_left() or t not in futures:  # out of budget at t, as the sequential scan would be
                return
            while not futures[t].done():  # keep the window full while step t is running
                wait([futures[t], *(f for f in futures.values() if not f.done())], return_when=FIRST_COMPLETED)
                fill_window()
            result = outcome(futures[t])
            if isinstance(result, Failure):  # the replay itself could not run
                attempt = search.record(t, correction, None, None, result.error, 0, inconclusive=True)
            else:
                search.store.append(result.records)
                attempt = search.record(t, correction, result.success, result.answer, result.error, result.tokens,
                                        inconclusive=result.live_failed > 0)
            if search.verdict(attempt) is not False:
                return
    finally:
        for future in futures.values():
            if not future.done():
                executor.cancel(future)
