"""Spectrum-based fault localisation of a failed run over live re-runs of its app (as FAMAS
applies it to multi-agent logs): no fixer and no judge model needed.

The app is run ``n`` more times on the run's task, live (its own model, sampled), and each run is
judged pass/fail by the run judge. Every step is an *event* keyed by its agent and action
(:func:`action_key`: the tools it called with their normalised arguments, else its normalised
text); with ``actions="similar"`` (:class:`ActionKeys`) one agent's text actions across the runs
are clustered by message similarity into events, so that paraphrases of one message are one
event. An event's suspiciousness comes from how many failing (``ef``) and passing (``ep``) runs
hold it, out of ``F`` failing and ``P`` passing runs (the diagnosed run counts as a failing one):

- Ochiai (default): ``ef / sqrt(F * (ef + ep))``
- Tarantula: ``(ef/F) / (ef/F + ep/P)``
- DStar (star 2): ``ef^2 / (ep + F - ef)`` (no denominator: ``ef^2`` plus one, above every finite score)

The diagnosed run's most suspicious step is reported, the earliest of equals (a later step that
always follows a wrong action is as suspicious as the action itself, and is its effect). With no
passing run every event is as suspicious as any other in its runs, so nothing is reported.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from ..apps import AppSpec, Endpoint
from ..capture.probe import Judge, instrument
from ..executors import Executor, Failure, ThreadExecutor
from ..storage.otlp_json import SpanRecord
from ..storage.store import TraceStore
from ..trajectory import Step, Trajectory


def ochiai(ef: int, ep: int, failed: int, passed: int) -> float:
    return ef / math.sqrt(failed * (ef + ep)) if ef else 0.0


def tarantula(ef: int, ep: int, failed: int, passed: int) -> float:
    fail_rate = ef / failed if failed else 0.0
    pass_rate = ep / passed if passed else 0.0
    return fail_rate / (fail_rate + pass_rate) if fail_rate else 0.0


def dstar(ef: int, ep: int, failed: int, passed: int) -> float:
    rest = ep + failed - ef
    return ef ** 2 / rest if rest else ef ** 2 + 1.0


FORMULAS: dict[str, Callable[[int, int, int, int], float]] = {"ochiai": ochiai, "tarantula": tarantula, "dstar": dstar}

_SPACE = re.compile(r"\s+")
_IDS = re.compile(r"\b(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|call_\w+|[0-9a-f]{16,})\b", re.I)


def _normal(text: str) -> str:
    """``text`` lower-cased, its whitespace collapsed, fresh ids (UUIDs, call ids, hex) as ``#id``."""
    return _IDS.sub("#id", _SPACE.sub(" ", text).strip().lower())


_PUNCT_SPACE = re.compile(r"\s*([^\w\s])\s*")


def _tight(value: Any) -> Any:
    """Argument values normalised: strings as :func:`_normal` without spaces around punctuation."""
    if isinstance(value, str):
        return _PUNCT_SPACE.sub(r"\1", _normal(value))
    if isinstance(value, dict):
        return {k: _tight(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tight(v) for v in value]
    return value


def _arguments(raw: str | None) -> str:
    """Tool-call arguments as sorted compact JSON of normalised values (not JSON: the normalised text)."""
    try:
        return json.dumps(_tight(json.loads(raw or "")), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return _tight(raw or "")


def action_key(step: Step) -> str:
    """A step's event: its agent and the tools it called with normalised arguments, or its normalised text."""
    if step.tool_calls:
        return f"{step.agent} -> " + "; ".join(f"{c.name}({_arguments(c.arguments)})" for c in step.tool_calls)
    return f"{step.agent}: {_normal(step.output)}"


ACTIONS = ("exact", "similar")
#: The action keying by default: the better one on benchmarks/diagnosis.py (docs/replay.md).
DEFAULT_ACTIONS = "similar"
#: Default word-set Jaccard similarity at which two texts of one agent (with the same numbers) are one event.
SIMILARITY = 0.5

_WORD = re.compile(r"[^\W\d_]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a & b| / |a | b|``; two empty sets are equal (1.0)."""
    return len(a & b) / len(a | b) if a or b else 1.0


class ActionKeys:
    """Each step's event key, in the order steps are given: ``exact`` is :func:`action_key`;
    ``similar`` clusters one agent's text actions (steps without tool calls) by message
    similarity: a text joins the first cluster of its agent whose first text (its leader) holds
    the same numbers in the same order and whose word set's Jaccard similarity to its own is at
    least ``similarity``, else it leads a cluster of its own. Numbers must match because in agent
    messages they are content (an amount, a result), while wording is style: ``Sure. The total is
    84.`` and ``The total is 84 coins.`` are one event, ``The total is 126.`` another."""

    def __init__(self, actions: str = DEFAULT_ACTIONS, similarity: float = SIMILARITY) -> None:
        if actions not in ACTIONS:
            raise ValueError(f"unknown action keying {actions!r}: use one of {', '.join(ACTIONS)}")
        if not 0.0 <= similarity <= 1.0:
            raise ValueError(f"similarity must be within [0, 1], not {similarity}")
        self.similar, self.similarity = actions == "similar", similarity
        self._leaders: dict[str, list[tuple[list[str], frozenset[str], str]]] = {}

    def __call__(self, step: Step) -> str:
        key = action_key(step)
        if not self.similar or step.tool_calls:
            return key
        text = _normal(step.output)
        numbers, words = _NUMBER.findall(text), frozenset(_WORD.findall(text))
        leaders = self._leaders.setdefault(step.agent, [])
        for lead_numbers, lead_words, lead_key in leaders:
            if lead_numbers == numbers and jaccard(lead_words, words) >= self.similarity:
                return lead_key
        leaders.append((numbers, words, key))
        return key


@dataclass
class EventScore:
    """One event's spectrum and score."""

    key: str
    agent: str
    ef: int
    ep: int
    score: float


@dataclass
class SpectrumReport:
    """Outcome of a spectrum diagnosis."""

    trace_id: str
    formula: str
    actions: str = DEFAULT_ACTIONS
    step: int | None = None
    agent: str | None = None
    score: float | None = None
    passed: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # runs that raised (not counted as either)
    ranking: list[EventScore] = field(default_factory=list)
    reruns: list[Trajectory] = field(default_factory=list)  # the judged re-runs (to localise again, keyed otherwise)
    model_calls: int = 0
    tokens: int = 0
    why_not: str | None = None  # why no step was reported

    @property
    def found(self) -> bool:
        return self.step is not None


def localize(target: Trajectory, runs: list[Trajectory], formula: str = "ochiai", actions: str = DEFAULT_ACTIONS,
             similarity: float = SIMILARITY) -> SpectrumReport:
    """Rank the events of ``target`` (a failed run) and ``runs`` (judged re-runs), their steps keyed
    by ``actions`` (:class:`ActionKeys`); report the target's most suspicious step."""
    if formula not in FORMULAS:
        raise ValueError(f"unknown spectrum formula {formula!r}: use one of {', '.join(FORMULAS)}")
    judged = [target, *(r for r in runs if r.outcome.success is not None)]
    keyer = ActionKeys(actions, similarity)
    keys = [[keyer(s) for s in r.steps] for r in judged]  # the target's texts lead their clusters
    failing = [k for r, k in zip(judged, keys) if r.outcome.success is False]
    passing = [k for r, k in zip(judged, keys) if r.outcome.success is True]
    report = SpectrumReport(trace_id=target.trace_id or "", formula=formula, actions=actions, passed=len(passing),
                            failed=len(failing))
    ef: Counter[str] = Counter(k for run in failing for k in set(run))
    ep: Counter[str] = Counter(k for run in passing for k in set(run))
    agents = {k: s.agent for r, run in zip(judged, keys) for s, k in zip(r.steps, run)}
    score = FORMULAS[formula]
    report.ranking = sorted((EventScore(k, agents[k], ef[k], ep[k], score(ef[k], ep[k], len(failing), len(passing)))
                             for k in agents), key=lambda e: -e.score)
    if not passing:
        report.why_not = f"no passing run among the {len(judged)} judged: every event is as suspicious as any other"
        return report
    scores = {e.key: e.score for e in report.ranking}
    best = max(zip(target.steps, keys[0]), key=lambda sk: (scores[sk[1]], -sk[0].index), default=None)
    if best is not None:
        report.step, report.agent, report.score = best[0].index, best[0].agent, scores[best[1]]
    return report


@dataclass
class LiveRun:
    """One live re-run: its spans (from a scratch store) and whether it raised."""

    records: list[SpanRecord]
    error: str | None = None


def live_run(app: AppSpec, endpoint: Endpoint, judge: Judge, task: str, seed: int, temperature: float) -> LiveRun:
    """Run ``app`` once on ``task`` live, instrumented and judged, in a scratch store."""
    with tempfile.TemporaryDirectory(prefix="aegis-spectrum-") as scratch:
        store = TraceStore(scratch)
        target = app.build(endpoint, task=task, temperature=temperature, seed=seed)
        probe = instrument(target, store=store, judge=judge)
        error = None
        try:
            app.run_app(target, task)
        except Exception as exc:  # the app failed: the run failed, the judge has said so
            error = probe.redact(f"{type(exc).__name__}: {exc}")
        finally:
            probe.flush()
            probe.uninstrument()
        run_id = probe.last_trace_id
        records = store.trace(run_id) if run_id else []
    return LiveRun(records, error)


def spectrum(
    trace_id: str,
    app: AppSpec,
    *,
    judge: Judge,
    endpoint: Endpoint,
    store: TraceStore,
    runs: int = 10,
    formula: str = "ochiai",
    actions: str = DEFAULT_ACTIONS,
    similarity: float = SIMILARITY,
    temperature: float = 1.0,
    executor: Executor | None = None,
    on_run: Callable[[], None] | None = None,
) -> SpectrumReport:
    """Re-run ``app`` ``runs`` times on the stored failed run's task and localise its fault."""
    if formula not in FORMULAS:
        raise ValueError(f"unknown spectrum formula {formula!r}: use one of {', '.join(FORMULAS)}")
    ActionKeys(actions, similarity)  # a wrong keying fails before any re-run
    target = Trajectory.from_spans(store.trace(trace_id))
    if target.outcome.success is not False:
        raise ValueError(f"trace {target.trace_id} did not fail: the spectrum diagnoses a failed (judged) run")
    if target.task is None:
        raise ValueError(f"trace {target.trace_id} has no captured task; the spectrum re-runs it and needs it")
    executor = executor or ThreadExecutor(1)
    calls = [partial(live_run, app, endpoint, judge, target.task, seed, temperature) for seed in range(runs)]
    trajectories: list[Trajectory] = []
    errors: list[str] = []
    executor.ship(app)
    with executor:
        for _, result in executor.run_all(calls):
            if on_run:
                on_run()
            if isinstance(result, Failure) or not result.records:
                errors.append(result.error if isinstance(result, Failure) else "the run left no trace")
                continue
            trajectories.append(Trajectory.from_spans(result.records))
    report = localize(target, trajectories, formula, actions, similarity)
    report.errors, report.reruns = errors, trajectories
    report.model_calls = sum(len(s.llm_calls) for t in trajectories for s in t.steps)
    report.tokens = sum((s.usage.input_tokens or 0) + (s.usage.output_tokens or 0) for t in trajectories for s in t.steps)
    return report
