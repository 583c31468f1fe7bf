"""Verified injection campaigns: baseline runs, sampled plans, verification, labelled traces.

For each task a deterministic baseline runs first (temperature 0, fixed seed); if it succeeds,
``plans_per_run`` plans are sampled over agents x modes x strategies and each runs with its plan.
A run is kept only if the baseline succeeded, the plan was applied, and the injected run failed
(an app exception after the fault was applied counts as a failure; other errors are logged,
recorded and retried when the campaign resumes; so is a run that takes longer than
``run_timeout``, recorded as timed out).
Everything is recorded in ``OUT/runs.jsonl``, so an interrupted campaign resumes where it stopped;
kept runs go to the trace store ``OUT/traces`` (labels on their root spans), baselines to
``OUT/baselines``. Runs execute on an :class:`~aegis_probe.executors.Executor` (threads, or
Ray tasks that send back their records and spans); this process alone writes the records and stores.

The app contract is :class:`aegis_probe.apps.AppSpec` (the demo modules satisfy it).

Tasks file: JSON lines ``{"id", "task", "type": "math"|"code"|..., "expected", "judge",
"tests", "tolerance", "timeout"}`` (see :func:`~aegis_probe.injection.judges.judge_for`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import random
import threading
from collections import defaultdict
from concurrent.futures import Future, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from ..capture import semconv as sc
from ..apps import AppSpec, Endpoint
from ..errors import AegisProbeError, one_line
from ..executors import Executor, Failure, NotRetried, ThreadExecutor
from ..capture.interception import UnansweredCalls
from ..storage.jsonl import read_jsonl
from ..capture.leanspans import LeanTracerProvider
from ..modelserver import ModelServer
from ..storage.otlp_json import SpanRecord
from ..storage.store import TraceStore
from ..trajectory import Trajectory
from .judges import judge_for
from .operators import Manipulator
from .plan import MODES, STRATEGIES, InjectionPlan, Target

logger = logging.getLogger("aegis_probe")

RUNS_FILE = "runs.jsonl"
#: Held (flock) by the campaign writing to its output directory.
LOCK_FILE = ".campaign.lock"


#: ``(runs.jsonl, line)`` of the unreadable records warned of (the file is only appended to).
_warned_lines: set[tuple[str, int]] = set()


def read_records(out: str | Path, errors: bool = False) -> dict[str, dict[str, Any]]:
    """Finished runs of the campaign in ``out`` by key: the last record of each key wins, error
    records are not finished (``errors=True`` keeps them), and an unreadable line (a crash
    mid-write) is skipped with a warning, so that run is redone. A line that is JSON but no run
    record (a field missing or of the wrong type: edited by hand, or from another tool) is a
    ``ValueError`` naming ``file:line`` and the field; the file is left as it is."""
    path = Path(out) / RUNS_FILE
    if not path.exists():
        return {}
    found: dict[str, dict[str, Any]] = {}
    for no, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))  # bytes that are not UTF-8: a ValueError, that line only
        except ValueError:
            if (str(path), no) not in _warned_lines:  # once: the records are read again and again as runs finish
                _warned_lines.add((str(path), no))
                logger.warning("%s:%d: unreadable run record skipped; the run will be redone", path, no)
            continue
        problem = record_problem(rec)
        if problem is not None:
            raise ValueError(f"{path}:{no}: {problem} (correct or delete that line to resume)")
        found[rec["key"]] = rec
    return {k: r for k, r in found.items() if errors or "error" not in r}


def _str(value: Any) -> bool:
    return isinstance(value, str)


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _step_counts(value: Any) -> bool:
    return isinstance(value, dict) and all(type(n) is int and n >= 0 for n in value.values())


def _objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


_STRING, _FLAG = ("a string", _str), ("true or false", _bool)
#: Per kind of record, the fields the campaign reads and what each must be.
_REQUIRED: dict[str, dict[str, tuple[str, Any]]] = {
    "error": {"error": _STRING},
    "baseline": {"success": _FLAG, "agent_steps": ("an object of agent: step count", _step_counts)},
    "injected": {"success": _FLAG, "applied": ("a list of objects", _objects), "flipped": _FLAG, "kept": _FLAG,
                 "mode": _STRING, "strategy": _STRING},
}
#: Fields read when present.
_OPTIONAL: dict[str, tuple[str, Any]] = {
    "task_id": ("a string or number", lambda v: isinstance(v, (str, int)) and not isinstance(v, bool)),
    "task_hash": _STRING, "answer": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "trace_id": ("a string or null", lambda v: v is None or isinstance(v, str)),
}


def record_problem(rec: Any) -> str | None:
    """What makes ``rec`` (a decoded line of ``runs.jsonl``) no run record the campaign can
    resume from, or None: a field it reads that is missing or of the wrong type."""
    if not isinstance(rec, dict):
        return f"expected a run record (a JSON object), got {type(rec).__name__}"
    if not isinstance(rec.get("key"), str):
        return "run record without its `key` (a string)" if "key" not in rec else \
            f"run record's field `key` is {json.dumps(rec['key'])}, not a string"
    kind = "error" if "error" in rec else rec.get("kind")
    if kind not in _REQUIRED:
        return (f"run record {rec['key']!r} lacks field `kind` (\"baseline\" or \"injected\")" if "kind" not in rec else
                f"run record {rec['key']!r}: field `kind` is {json.dumps(kind)[:80]}, not \"baseline\" or \"injected\"")
    fields = {**_REQUIRED[kind], **{k: v for k, v in _OPTIONAL.items() if k in rec}}
    if "task_hash" in rec:
        fields["task_id"] = _OPTIONAL["task_id"]  # the changed task is named by it
    if _has_stored_trace(rec):
        fields["trace_id"] = ("a string: its trace is stored", _str)
    for name, (what, ok) in fields.items():
        if name not in rec:
            return f"run record {rec['key']!r} lacks field `{name}` ({what})"
        if not ok(rec[name]):
            return f"run record {rec['key']!r}: field `{name}` is {json.dumps(rec[name])[:80]}, not {what}"
    return None


def _has_stored_trace(record: dict[str, Any]) -> bool:
    """Whether the run of ``record`` has its trace in a store: a kept injected run, a successful baseline."""
    return bool(record.get("kept") or (record.get("kind") == "baseline" and record.get("success")))


def task_fingerprint(task: dict[str, Any]) -> str:
    """What a run record remembers of its task (all its fields), to tell a task changed since."""
    return hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()[:16]


def _drop_changed_tasks(out: Path, tasks: list[dict[str, Any]], done: dict[str, dict[str, Any]]) -> None:
    """Take the finished runs made for another version of their task (the tasks file changed
    since, e.g. a corrected ``expected``) out of ``done``, so that they are redone. ``ValueError``
    when such a run is in a store (a kept run, a successful baseline): its trace and labels,
    judged by the old task, cannot be taken back."""
    current = {json.dumps(t["id"]): task_fingerprint(t) for t in tasks}
    for key, rec in list(done.items()):
        made_for, now = rec.get("task_hash"), current.get(json.dumps(rec.get("task_id")))
        if made_for is None or now is None or made_for == now:
            continue
        if _has_stored_trace(rec):
            raise ValueError(f"{out / RUNS_FILE}: task {rec['task_id']!r} changed since run {key} was made and "
                             f"stored; give another --out, or the task as it was")
        logger.warning("run %s: its task changed since; the run will be redone", key)
        del done[key]


class CampaignBusy(AegisProbeError, OSError):
    """Another campaign is running into the same output directory."""


@contextmanager
def _only_campaign(out: Path) -> Iterator[None]:
    """Hold ``out`` for this campaign (a lock on its :data:`LOCK_FILE`, let go when the process
    ends, ``kill -9`` too): a second campaign into it at the same time would run every run
    again, and its stores would hold each kept run twice."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_FILE, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CampaignBusy(f"{out} is in use by another inject campaign: wait for it to end, or choose another --out") from None
        yield
    finally:
        os.close(fd)


class RunTimeout(AegisProbeError, NotRetried, TimeoutError):
    """A campaign's run took longer than its ``run_timeout`` (recorded as timed out, never retried
    by the executor: its run may still hang where it was left; a resumed campaign runs it again)."""


class _Collector(SpanProcessor):
    """Keeps finished spans by trace until the campaign takes them."""

    def __init__(self) -> None:
        self._spans: dict[int, list[ReadableSpan]] = defaultdict(list)
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans[span.context.trace_id].append(span)

    def take(self, trace_id: str) -> list[SpanRecord]:
        with self._lock:
            spans = self._spans.pop(int(trace_id, 16), [])
        return [SpanRecord.from_readable(s) for s in spans]


@dataclass
class RunResult:
    """One finished run: its answer, outcome, applied faults and spans."""

    answer: str | None
    success: bool
    applied: list[dict[str, Any]]
    records: list[SpanRecord]
    app_error: str | None = None

    @property
    def trajectory(self) -> Trajectory:
        return Trajectory.from_spans(self.records)


@dataclass
class Campaign:
    """A campaign over ``tasks`` for ``app`` into ``out`` (see :func:`run_campaign`)."""

    app: AppSpec
    tasks: list[dict[str, Any]]
    out: Path
    plans_per_run: int = 3
    seed: int = 0
    concurrency: int = 1
    endpoint: Endpoint | None = None
    manipulators: dict[str, Manipulator] = field(default_factory=dict)
    operator: str = "deterministic"
    modes: tuple[str, ...] = tuple(MODES)
    strategies: tuple[str, ...] = STRATEGIES
    progress: bool = True
    executor: Executor | None = None  # default: ``concurrency`` threads
    run_timeout: float | None = None  # seconds a run may take (build, run, judge); None: no limit

    def __post_init__(self) -> None:
        self.out = Path(self.out).absolute()  # runs may change the working directory (see TraceStore)
        self._provider = LeanTracerProvider(sampler=ALWAYS_ON)  # every run is judged and labelled: none is sampled out
        self._collector = _Collector()
        self._provider.add_span_processor(self._collector)
        self._lock = threading.Lock()
        self.kept_store = TraceStore(self.out / "traces")
        self.baseline_store = TraceStore(self.out / "baselines")
        self._stored: set[str] = set()  # trace ids known to be in a store (read once, then kept up to date)

    def __reduce__(self) -> tuple[Any, ...]:
        """Sent to a worker process (a Ray task's :meth:`execute`) as what a run needs there."""
        return (partial(Campaign, seed=self.seed, manipulators=self.manipulators, operator=self.operator,
                        progress=False, run_timeout=self.run_timeout), (self.app, [], Path(".")))

    # -- records -------------------------------------------------------------------------
    def records(self) -> dict[str, dict[str, Any]]:
        """Finished runs by key (see :func:`read_records`). A record is written before its run's
        trace, so a run whose trace is not in its store (the campaign stopped between the two) is
        not finished: it is redone, and no store ever holds a trace without a record."""
        found = read_records(self.out)
        traced = {k: r["trace_id"] for k, r in found.items() if _has_stored_trace(r)}
        if not self._stored.issuperset(traced.values()):  # the stores are read only for a trace not seen yet
            self._stored |= set(self.kept_store.traces()) | set(self.baseline_store.traces())
            for key in [k for k, trace_id in traced.items() if trace_id not in self._stored]:
                logger.warning("run %s: its trace was never stored (the campaign stopped); the run will be redone", key)
                del found[key]
        return found

    def _check_stores(self) -> None:
        """``ValueError`` when a store of ``out`` (``traces/``, ``baselines/``) or its trace file is
        of the wrong kind (a file, a directory): before any run, not when the first trace is written."""
        for store in (self.kept_store, self.baseline_store):
            if store.path.exists() and not store.path.is_dir():
                raise ValueError(f"{store.path}: not a directory (this campaign's trace store); move it away to resume")
            if store.file.is_dir():
                raise ValueError(f"{store.file}: a directory, not a trace file; move it away to resume")

    def _write(self, record: dict[str, Any]) -> None:
        """Append ``record`` to ``runs.jsonl``. A write that fails (a full disk) takes back what it
        wrote, so the file is as it was, and names the file."""
        path = self.out / RUNS_FILE
        data = (json.dumps(record) + "\n").encode("utf-8")
        with self._lock:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(path, "ab+", buffering=0) as fh:
                end = fh.seek(0, 2)
                if end and (fh.seek(-1, 2), fh.read(1))[1] != b"\n":
                    data = b"\n" + data  # end a record cut short by a crash, so this one stays readable
                try:
                    view = memoryview(data)
                    while view:
                        view = view[fh.write(view):]
                except OSError as exc:
                    try:
                        fh.truncate(end)
                    except OSError:
                        logger.warning("%s: could not take back a record cut short (%s); it is skipped on resume", path, exc)
                    raise OSError(exc.errno, exc.strerror, str(path)) from None

    # -- one run -------------------------------------------------------------------------
    def execute(self, endpoint: Endpoint, task: dict[str, Any], plan: InjectionPlan | None) -> RunResult:
        """Run the app once on ``task`` (with ``plan`` applied, if any) and judge it. With a
        ``run_timeout``, the run goes in a daemon thread of its own: past the timeout it is left
        there (a thread cannot be stopped), its result dropped, and :class:`RunTimeout` raised."""
        if self.run_timeout is None:
            return self._execute(endpoint, task, plan)
        result: Future[RunResult] = Future()

        def run() -> None:
            try:
                result.set_result(self._execute(endpoint, task, plan))
            except BaseException as exc:  # noqa: BLE001 - the run's outcome, taken below
                result.set_exception(exc)

        threading.Thread(target=run, name="aegis-timed-run", daemon=True).start()
        if not wait([result], timeout=self.run_timeout).done:
            raise RunTimeout(f"the run took longer than {self.run_timeout:g} s (run timeout); it was abandoned")
        return result.result()

    def _execute(self, endpoint: Endpoint, task: dict[str, Any], plan: InjectionPlan | None) -> RunResult:
        import aegis_probe

        app = self.app.build(endpoint, task=task["task"], temperature=0.0, seed=self.seed)
        probe = aegis_probe.instrument(app, tracer_provider=self._provider, store=False)
        injector = None
        unanswered = UnansweredCalls()
        error: str | None = None
        try:
            with ExitStack() as stack:
                if plan is not None:
                    injector = stack.enter_context(probe.inject(
                        plan, manipulators=self.manipulators, agents=self.app.agents,
                        termination=self.app.termination, task_type=task.get("type", "generic")))
                stack.enter_context(probe.intercept(unanswered))
                try:
                    answer = self.app.run_app(app, task["task"])
                except Exception as exc:  # an injected fault that crashes the app is a failed run
                    if injector is None or not injector.applied:
                        raise
                    answer, error = None, probe.redact(f"{type(exc).__name__}: {exc}")
        finally:
            trace_id = probe.last_trace_id
            probe.uninstrument()
            records = self._collector.take(trace_id) if trace_id else []
        if not records:
            raise RuntimeError("the run produced no trace (is the app instrumented by its adapter?)")
        outcome = judge_for(task)(task["task"], answer)
        if unanswered and not outcome.success:  # the endpoint's failure, not the app's nor a fault's: an error run
            raise RuntimeError(f"the model endpoint failed {len(unanswered)} call(s) of the run"
                               + (f": {one_line(error)}" if error else ""))
        root = next(r for r in records if r.parent_span_id is None)
        root.attributes[sc.OUTCOME_SUCCESS] = bool(outcome.success)
        if probe.config.capture_content:  # answers are message content
            root.attributes[sc.OUTCOME_ANSWER] = probe.redact(answer or "")
            if outcome.expected is not None:
                root.attributes[sc.OUTCOME_EXPECTED] = probe.redact(outcome.expected)
        applied = [f.model_dump() for f in injector.applied_in(root.attributes[sc.RUN_ID])] if injector else []
        return RunResult(answer if answer is None else probe.redact(answer), bool(outcome.success), applied, records, error)

    # -- planning ------------------------------------------------------------------------
    def plans_for(self, task_id: str, agent_steps: dict[str, int]) -> list[InjectionPlan]:
        """``plans_per_run`` one-target plans sampled (seeded by task) over agents x modes x strategies."""
        # bytes seed exactly as the text does (random encodes it as UTF-8), also for a lone surrogate in the id
        rng = random.Random(f"{self.seed}:{task_id}".encode("utf-8", "surrogatepass"))
        combos = [(a, m, s) for a in self.app.agents if agent_steps.get(a) for m in self.modes for s in self.strategies]
        chosen = rng.sample(combos, min(self.plans_per_run, len(combos)))
        return [
            InjectionPlan(targets=[Target(agent=a, mode=m, strategy=s, operator=self.operator, nth=rng.randrange(agent_steps[a]))])  # type: ignore[arg-type]
            for a, m, s in chosen
        ]

    # -- the campaign --------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        """Run (or resume) the campaign; return the summary rows."""
        with ExitStack() as stack:
            executor = self.executor or ThreadExecutor(self.concurrency)
            executor.ship(self.app)
            stack.enter_context(executor)
            endpoint = self.endpoint
            if endpoint is None:
                if self.app.policy is None:
                    raise ValueError("the app module has no scripted `policy`; give an endpoint (--base-url)")
                server = stack.enter_context(ModelServer(self.app.policy))
                endpoint = Endpoint(server.base_url, "aegis-scripted", "not-needed")
            stack.enter_context(_only_campaign(self.out))
            self._check_stores()
            done = self.records()
            _drop_changed_tasks(self.out, self.tasks, done)
            bar = stack.enter_context(_progress(len(self.tasks) * (1 + self.plans_per_run), self.progress))
            self._stage(executor, endpoint, [(f"{t['id']}/baseline", t, None) for t in self.tasks], done, bar)
            done = self.records()
            injected = []
            for t in self.tasks:
                base = done.get(f"{t['id']}/baseline")
                if base is None or not base["success"]:
                    bar.update(self.plans_per_run)
                    continue
                injected += [(f"{t['id']}/plan-{k}", t, plan) for k, plan in enumerate(self.plans_for(t["id"], base["agent_steps"]))]
            self._stage(executor, endpoint, injected, done, bar)
        return summarize(self.records().values())

    def _stage(self, executor: Executor, endpoint: Endpoint, jobs: Sequence[tuple[str, dict[str, Any], InjectionPlan | None]],
               done: dict, bar: Any) -> None:
        """Run the jobs not done yet on ``executor``; record each result here, as it comes."""
        todo = [j for j in jobs if j[0] not in done]
        bar.update(len(jobs) - len(todo))
        for i, result in executor.run_all([partial(self.execute, endpoint, task, plan) for _, task, plan in todo]):
            self._record(*todo[i], result)
            bar.update(1)

    def _record(self, key: str, task: dict[str, Any], plan: InjectionPlan | None, result: RunResult | Failure) -> None:
        base = {"key": key, "task_id": task["id"], "task_hash": task_fingerprint(task)}
        if plan is not None:
            target = plan.targets[0]
            base.update(plan=json.loads(plan.to_json()), agent=target.agent, mode=target.mode, strategy=target.strategy)
        if isinstance(result, Failure):
            logger.warning("run %s failed: %s", key, one_line(result.error))
            timed_out = result.error.startswith(f"{RunTimeout.__name__}:")  # the type's name crosses processes
            self._write({**base, "error": result.error, "traceback": result.traceback, **({"timed_out": True} if timed_out else {})})
            return
        trace_id = result.records[0].trace_id if result.records else None
        if plan is None:
            steps: defaultdict[str, int] = defaultdict(int)
            for step in result.trajectory.steps:
                if step.llm_calls:
                    steps[step.agent] += 1
            self._write({**base, "kind": "baseline", "success": result.success, "answer": result.answer,
                         "agent_steps": dict(steps), "trace_id": trace_id})
            if result.success:  # after its record (see :meth:`records`)
                self._store(self.baseline_store, result.records)
            return
        flipped = not result.success
        kept = flipped and bool(result.applied)
        self._write({**base, "kind": "injected", "success": result.success, "answer": result.answer,
                     "applied": result.applied, "flipped": flipped, "kept": kept, "trace_id": trace_id,
                     "app_error": result.app_error})
        if kept:  # after its record (see :meth:`records`)
            self._store(self.kept_store, result.records)

    def _store(self, store: TraceStore, records: list[SpanRecord]) -> None:
        store.append(records)
        if records:
            self._stored.add(records[0].trace_id)


def summarize(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (mode, strategy): attempted, applied, flipped and kept injected runs."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in records:
        if rec.get("kind") != "injected":
            continue
        row = rows.setdefault((rec["mode"], rec["strategy"]), {"mode": rec["mode"], "strategy": rec["strategy"],
                                                                "attempted": 0, "applied": 0, "flipped": 0, "kept": 0})
        row["attempted"] += 1
        row["applied"] += bool(rec["applied"])
        row["flipped"] += rec["flipped"]
        row["kept"] += rec["kept"]
    return [rows[k] for k in sorted(rows)]


def format_summary(rows: list[dict[str, Any]]) -> str:
    """The summary rows as a text table with a total line."""
    cols = ("mode", "strategy", "attempted", "applied", "flipped", "kept")
    total = {"mode": "total", "strategy": "", **{c: sum(r[c] for r in rows) for c in cols[2:]}}
    body = [*rows, total]
    widths = [max(len(c), *(len(str(r[c])) for r in body)) for c in cols]
    line = lambda r: "  ".join(str(r[c]).ljust(w) if i < 2 else str(r[c]).rjust(w) for i, (c, w) in enumerate(zip(cols, widths)))  # noqa: E731
    return "\n".join([line(dict(zip(cols, cols))), *(line(r) for r in body)])


def baselines(out: str | Path, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task, how its baseline went: ``state`` is "succeeded", "failed" (with ``answer`` and
    ``expected``), "error" (with ``error``: the run raised) or "not run"."""
    found = read_records(out, errors=True)
    rows = []
    for task in tasks:
        rec = found.get(f"{task['id']}/baseline")
        row: dict[str, Any] = {"task_id": task["id"], "expected": task.get("expected")}
        if rec is None:
            row["state"] = "not run"
        elif "error" in rec:
            row.update(state="error", error=rec["error"])
        else:
            row.update(state="succeeded" if rec.get("success") else "failed", answer=rec.get("answer"))
        rows.append(row)
    return rows


def format_baselines(rows: list[dict[str, Any]]) -> str:
    """Baselines attempted / succeeded / failed, then one line per task whose baseline did not succeed."""
    ok = sum(r["state"] == "succeeded" for r in rows)
    lines = [f"baselines: {len(rows)} attempted, {ok} succeeded, {len(rows) - ok} failed"]
    width = max((len(str(r["task_id"])) for r in rows), default=0)
    for r in rows:
        if r["state"] == "failed":
            why = f"wrong answer {r['answer']!r}" + (f" (expected {r['expected']!r})" if r["expected"] is not None else "")
        elif r["state"] == "error":
            why = f"the run raised {one_line(r['error'])}"
        elif r["state"] == "not run":
            why = "not run"
        else:
            continue
        lines.append(f"  {str(r['task_id']):<{width}}  {' '.join(why.split())[:300]}")
    return "\n".join(lines)


def check_tasks(tasks: list[dict[str, Any]], where: str = "tasks") -> list[dict[str, Any]]:
    """``tasks`` if every record can be run and judged (its judge is built once here, so a bad
    ``tolerance`` or ``judge`` stops the campaign before any run); else ``ValueError`` naming
    ``where`` and the record."""
    if not tasks:
        raise ValueError(f"{where}: no tasks")
    seen: dict[str, int] = {}
    for no, task in enumerate(tasks, 1):
        name = f"{where}: record {no} (id {task.get('id')!r})"
        ident = task.get("id")
        if isinstance(ident, bool) or not isinstance(ident, (str, int)) or not str(ident).strip():
            raise ValueError(f"{name}: `id` must be a non-empty string or an integer")
        if not isinstance(task.get("task"), str) or not task["task"].strip():
            raise ValueError(f"{name}: `task` must be a non-empty string")
        if not isinstance(task.get("type", ""), str):
            raise ValueError(f"{name}: `type` must be a string (math, code, ...)")
        if task.get("expected") is None and not task.get("tests"):
            raise ValueError(f"{name}: no `expected` answer or `tests` to judge the run by")
        if isinstance(task.get("expected"), (bool, list, dict)):
            raise ValueError(f"{name}: `expected` must be a string or a number")
        try:
            judge_for(task)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{name}: {exc}") from None
        key = str(task["id"])
        if key in seen:
            raise ValueError(f"{name}: duplicate id (also record {seen[key]})")
        seen[key] = no
    return tasks


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """Task records of a JSON-lines file (each needs ``id``, ``task`` and ``expected`` or ``tests``)."""
    return check_tasks(read_jsonl(path, required=("id", "task")), str(path))


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="injection runs", unit="run")


def run_campaign(app: AppSpec | str, tasks: list[dict[str, Any]] | str | Path, out: str | Path, **options: Any) -> list[dict[str, Any]]:
    """Run (or resume) a verified injection campaign; return the per-(mode, strategy) summary.

    ``options``: ``plans_per_run``, ``seed``, ``concurrency``, ``endpoint``, ``manipulators``,
    ``operator``, ``modes``, ``strategies``, ``progress``, ``executor``, ``run_timeout`` (see :class:`Campaign`).
    """
    spec = AppSpec.load(app) if isinstance(app, str) else app
    records = load_tasks(tasks) if isinstance(tasks, (str, Path)) else tasks
    return Campaign(spec, records, Path(out), **options).run()
