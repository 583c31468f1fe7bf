"""Checks every newer framework's demo passes the same way (tests/test_langgraph.py,
test_openai_agents.py, test_ag2.py, test_crewai.py): a planted failure blamed on the calculator's
step, an injection campaign that keeps labelled failures, ``uninstrument()`` restoring every
patched original, a model error reaching the app as uninstrumented, trace-every-app mode, and a
policy whose calculator tool raises. Against the loopback model server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Awaitable, Callable

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.apps import AppSpec, Endpoint
from aegis_probe.counterfactual import blame
from aegis_probe.demos.task import judge
from aegis_probe.injection.campaign import run_campaign
from aegis_probe.modelserver import Policy, Reply
from aegis_probe.storage.store import TraceStore
from aegis_probe.trajectory import load_trajectories
from test_replay import _planted_failure, _record

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "injection"
CORRECTION = "(17 + 25) * 3 = 126"


def blame_finds_planted_step(demo: ModuleType, model_server, tmp_path: Path, policy: Policy | None = None) -> None:
    """The calculator evaluates the wrong expression at step 1 (``policy``, else every tool call's
    expression made wrong); blame (scan) finds and labels that step."""
    store = TraceStore(tmp_path / "store")
    policy = policy or _planted_failure(demo)
    trace_id = _record(demo, policy, model_server, store)
    failed = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert failed.outcome.success is False and failed.steps[1].agent == "calculator"

    def fixer(traj, t):
        return CORRECTION if traj.steps[t].agent == "calculator" else traj.steps[t].output

    live = model_server(policy)
    report = blame(trace_id, AppSpec(demo.build_app, demo.run_app), fixer=fixer, judge=judge,
                   endpoint=Endpoint(live.base_url, "aegis-scripted", "sk-test"), search="scan", store=store)
    assert report.found and report.step == 1 and report.agent == "calculator"
    assert report.evidence.success and "126" in report.evidence.answer
    labelled = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert [(f.agent, f.step) for f in labelled.labels.faults] == [("calculator", 1)]


def campaign_keeps_labelled_failures(example: str, demo: ModuleType, tmp_path: Path) -> None:
    """An injection campaign over two math tasks keeps failed runs, each labelled with its fault's step."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join((EXAMPLES / "math_tasks.jsonl").read_text().splitlines()[:2]) + "\n")
    out = tmp_path / "campaign"
    rows = run_campaign(f"{EXAMPLES / example}:build_app", tasks, out, plans_per_run=4, seed=3,
                        modes=("FM-1.1", "FM-2.6", "FM-3.3"), progress=False)
    kept = {t.trace_id: t for t in load_trajectories(out / "traces")} if (out / "traces").exists() else {}
    assert sum(r["kept"] for r in rows) == len(kept) > 0
    for traj in kept.values():
        assert traj.framework == demo.FRAMEWORK and traj.outcome.success is False
        fault = traj.labels.faults[0]
        assert fault.agent in demo.AGENTS and traj.steps[fault.step].agent == fault.agent


def uninstrument_restores_originals(names: list[tuple[Any, str]], instrument: Callable[[], object]) -> None:
    """``instrument()`` replaces every ``owner.name`` in ``names``; ``aegis_probe.uninstrument()`` restores each exactly."""
    before = {(owner, name): vars(owner)[name] for owner, name in names}
    instrument()
    assert all(vars(owner)[name] is not saved for (owner, name), saved in before.items())
    aegis_probe.uninstrument()
    assert all(vars(owner)[name] is saved for (owner, name), saved in before.items())


def model_error_as_uninstrumented(demo: ModuleType, provider: Any, exporter: Any) -> list[Any]:
    """The demo against a port nothing listens on, bare and instrumented: the app gets the same
    exception (message and whether an ``APIConnectionError`` caused it), and the key is on no span.
    aegis-probe's finished spans."""
    from openai import APIConnectionError

    key = "sk-test-key-do-not-leak-1234567890"
    with pytest.raises(Exception) as bare:  # nothing listens on port 9
        demo.run_app(demo.build_app("http://127.0.0.1:9/v1", "aegis-scripted", key), demo.TASK)
    app = demo.build_app("http://127.0.0.1:9/v1", "aegis-scripted", key)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    with pytest.raises(type(bare.value)) as raised:
        demo.run_app(app, demo.TASK)
    assert str(raised.value) == str(bare.value)
    assert isinstance(raised.value.__cause__, APIConnectionError) == isinstance(bare.value.__cause__, APIConnectionError)
    probe.flush()
    spans = ours(exporter)
    assert "do-not-leak" not in str([dict(s.attributes) for s in spans])
    return spans


def agents_traced_without_instrument(demo: str, cwd: Path) -> str:
    """Trace-every-app mode: ``AegisInstrumentor`` set up before a fresh process imports
    ``aegis_probe.demos.<demo>`` (and so its framework), whose app then runs without
    ``instrument()``; the agent names of its steps, in order, as the process prints them."""
    script = textwrap.dedent(f"""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from aegis_probe import AegisInstrumentor
        from aegis_probe.modelserver import ModelServer

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        AegisInstrumentor().instrument(tracer_provider=provider, store=False)
        from aegis_probe.demos import {demo} as demo  # imports the framework only now

        with ModelServer(demo.policy) as server:
            demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), demo.TASK)
        steps = sorted((s for s in exporter.get_finished_spans() if "aegis.step.index" in s.attributes),
                       key=lambda s: s.attributes["aegis.step.index"])
        print([s.attributes["gen_ai.agent.name"] for s in steps])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def raising_tool_policy(demo: ModuleType) -> Policy:
    """The demo's policy, except each call of its calculator tool gets an expression the tool raises on."""
    def policy(body):
        reply = demo.policy(body)
        if reply.tool_calls and reply.tool_calls[0][0] == demo.TOOL:
            return Reply(tool_calls=[(demo.TOOL, {"expression": "(17 + 25) * 3 ++"})])  # the tool raises
        return reply

    return policy


def the_one_run_ended_cancelled(probe: Any, store_dir: Path) -> str:
    """The store's one trace is a run ended cancelled (ERROR, ``error.type`` ``CancelledError``) and is
    the probe's last run (what an app leaving a stream early gets, in every adapter); its trace id."""
    probe.flush()
    store = TraceStore(store_dir)
    (trace_id,) = store.traces()
    (root,) = [r for r in store.trace(trace_id) if r.parent_span_id is None]
    assert (root.status, root.attributes[sc.ERROR_TYPE]) == ("ERROR", "CancelledError")
    assert probe.last_run is not None and probe.last_run.trace_id == trace_id
    return trace_id


# -- real use: long runs, odd bytes, runs side by side (tests/test_realuse_<framework>.py) -------

#: Text every framework passes through as it is: NUL, a bidi override and right-to-left scripts,
#: emoji (a ZWJ sequence, a flag), C0/C1 control characters and line separators.
ODD = "nul\x00 rtl\u202eevil\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 emoji \U0001f600\U0001f469\u200d\U0001f469\u200d\U0001f467\U0001f1eb\U0001f1f7 ctl\x1b[31m\x07\x08\x7f\x85\u2028\r\n\t end"
#: Lone surrogates: what a reply carrying the JSON escapes ``\ud800`` and ``\udfff`` decodes to, and
#: what ``os.fsdecode`` makes of a byte that is not UTF-8 (``\udcff``). The openai client refuses to
#: send them, so they can only end a conversation.
LONE = "lone \ud800 high \udfff low \udcff byte"
#: A turn of 1 MiB (2**20 characters), the odd text at its start.
MEGA = (ODD + " " + "0123456789abcdef" * 65536)[: 1 << 20]


def escaped(text: str) -> str:
    """``text`` as the store records it: each lone surrogate as the six characters ``\\udxxx``."""
    return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def ours(exporter: Any) -> list[Any]:
    """aegis-probe's finished spans in ``exporter``, in start order."""
    return sorted((s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"),
                  key=lambda s: s.start_time)


def parent_of(span: Any, spans: list[Any]) -> Any:
    """``span``'s parent among ``spans`` (None: a root, or not among them)."""
    return next((p for p in spans if span.parent is not None and p.context.span_id == span.parent.span_id), None)


def _by_index(spans: list[Any]) -> list[Any]:
    steps = [s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None]
    return sorted(steps, key=lambda s: s.attributes[sc.STEP_INDEX])


def _step_of(span: Any, by_id: dict[str, Any]) -> Any:
    """The nearest step span above ``span`` (None: none)."""
    parent = by_id.get(span.parent_span_id) if span.parent_span_id else None
    while parent is not None and parent.attributes.get(sc.STEP_INDEX) is None:
        parent = by_id.get(parent.parent_span_id) if parent.parent_span_id else None
    return parent


def store_lines_are_valid(store_dir: Path) -> None:
    """Every line of the store's files is strict UTF-8 JSON."""
    import json

    for path in sorted(Path(store_dir).rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            json.loads(line.decode("utf-8"))


def lone_surrogate_task_fails_as_uninstrumented(build: Callable[[], Any], run: Callable[[Any], Any], server: Any,
                                                store_dir: Path, target: Callable[[Any], Any] = lambda app: app) -> Any:
    """``run(build())`` with :data:`LONE` as its task, bare and then instrumented (``target(app)``
    instrumented): the openai client refuses to send it, so the app gets the same
    ``UnicodeEncodeError`` and no request reaches ``server``; the store stays readable and the
    failed run is stored with its task escaped. Returns its trajectory."""
    with pytest.raises(UnicodeEncodeError) as bare:
        run(build())
    app = build()
    probe = aegis_probe.instrument(target(app), store=store_dir)
    with pytest.raises(UnicodeEncodeError) as instrumented:
        run(app)
    assert str(instrumented.value) == str(bare.value) and not server.requests
    probe.flush()
    store_lines_are_valid(store_dir)
    traj = probe.trajectory()
    assert traj.task == escaped(LONE) and traj.error
    return traj


def long_run_is_whole(probe: Any, store_dir: Path, agents: list[str], outputs: list[str], llm_calls: int) -> Any:
    """The store holds one trace, the run: exactly one step span per turn (``agents``, in order, with
    contiguous indices, each a child of the root), ``llm_calls`` chat spans, each under a step of its
    agent; the trajectory read back (``probe.trajectory()`` and ``load_trajectories``) has every step,
    in order, with its output (``outputs``). Returns that trajectory."""
    probe.flush()
    store = TraceStore(store_dir)
    (trace_id,) = store.traces()
    spans = store.trace(trace_id)
    (root,) = [s for s in spans if s.parent_span_id is None]
    by_id = {s.span_id: s for s in spans}
    steps = _by_index(spans)
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(len(agents)))
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == agents
    assert all(s.parent_span_id == root.span_id for s in steps)
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert len(chats) == llm_calls
    for chat in chats:
        step = _step_of(chat, by_id)
        assert step is not None and step.attributes[sc.AGENT_NAME] == chat.attributes[sc.AGENT_NAME], chat.name
    store_lines_are_valid(store_dir)
    traj = probe.trajectory()
    (loaded,) = load_trajectories(store_dir)
    for t in (traj, loaded):
        assert t.trace_id == trace_id and [s.index for s in t.steps] == list(range(len(agents)))
        assert [s.agent for s in t.steps] == agents and [s.output for s in t.steps] == outputs
        assert sum(len(s.llm_calls) for s in t.steps) == llm_calls
    return traj


def runs_stay_apart(store_dir: Path, tasks: dict[str, str], markers: dict[str, str]) -> dict[str, Any]:
    """Runs made at once (threads, asyncio tasks), one trace each, told apart by their ``tasks`` (run key
    -> task): every span of a run's trace says only that run's ``marker`` in its content (no other
    run's), each step belongs to the run's trace, and each run is labelled with its own outcome
    (``set_outcome`` by the caller: success for keys ending in ``ok``, answer the key). Returns key ->
    trajectory."""
    store = TraceStore(store_dir)
    traces = store.traces()
    assert len(traces) == len(tasks)
    out: dict[str, Any] = {}
    for spans in traces.values():
        traj = aegis_probe.Trajectory.from_spans(spans)
        (key,) = [k for k, task in tasks.items() if traj.task == task]
        out[key] = traj
        others = [m for k, m in markers.items() if k != key]
        for span in spans:
            text = "".join(str(v) for v in span.attributes.values())
            assert not any(m in text for m in others), (key, span.name)
        assert traj.steps and all(markers[key] in s.output for s in traj.steps if s.llm_calls), key
        assert (traj.outcome.success, traj.outcome.answer) == (key.endswith("ok"), key)
    assert set(out) == set(tasks)
    return out


def no_hook_errors(records: list[Any]) -> None:
    """No instrumentation hook failed (each failure is logged as 'error in ... hook', and swallowed)."""
    failed = [r.getMessage() for r in records if r.name.startswith("aegis_probe") and "hook" in r.getMessage()]
    assert failed == []


class SlowOrFast:
    """A policy answering ``fast`` tasks at once; a request that mentions ``slow`` waits (its arrival
    noted in :attr:`arrived`) until :attr:`release` is set, so its run can be cancelled mid-call."""

    def __init__(self) -> None:
        import threading

        self.arrived, self.release = threading.Event(), threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        slow = "slow" in str(body.get("messages"))
        if slow:
            self.arrived.set()
            self.release.wait(10)
        return Reply(content="done " + ("slow" if slow else "fast"))


async def cancel_one_beside_another(policy: SlowOrFast, run: Callable[[str], Any]) -> Any:
    """Start ``run("slow task")``, run ``run("fast task")`` to its end beside it, then cancel the slow
    one while its model call waits (as an app's timeout does); the fast one's result."""
    import asyncio

    slow = asyncio.ensure_future(run("slow task"))
    fast = await run("fast task")
    assert await asyncio.to_thread(policy.arrived.wait, 10)
    slow.cancel()
    try:
        await slow
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the slow run was not cancelled")
    policy.release.set()
    return fast


def cancelled_beside_whole(probe: Any, store_dir: Path) -> None:
    """The store holds the two runs of :func:`cancel_one_beside_another`, each in a trace of its own:
    the slow one ended cancelled (ERROR, ``CancelledError``), the fast one whole, neither holding the
    other's content."""
    import gc

    gc.collect()  # a cancelled run's leftovers (a stream, a coroutine) go
    probe.flush()
    traces = TraceStore(store_dir).traces()
    assert len(traces) == 2
    roots = {}
    for spans in traces.values():
        (root,) = [s for s in spans if s.parent_span_id is None]
        roots[root.attributes[sc.TASK]] = (root, spans)
    slow, fast = roots["slow task"], roots["fast task"]
    assert (slow[0].status, slow[0].attributes.get(sc.ERROR_TYPE)) == ("ERROR", "CancelledError")
    assert all(s.status != "ERROR" for s in fast[1]) and _by_index(fast[1])
    for (_, spans), other in ((slow, "fast"), (fast, "slow")):
        assert not any(f"done {other}" in str(s.attributes) or f"{other} task" in str(s.attributes) for s in spans)


def memory_held_after(run: Callable[[], None]) -> float:
    """MiB still allocated after ``run()`` (which builds an app, instruments it, runs it and lets both
    go) once its objects are collected: what the instrumentation keeps of an app that is gone. ``run``
    runs once before, unmeasured (imports, lazy set-up)."""
    import gc
    import tracemalloc

    run()
    gc.collect()
    gc.collect()  # what the first collection's finalizers let go of (an app dropped without uninstrument)
    tracemalloc.start()
    try:
        run()
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held / 2**20


def all_in_flight(runs: int, key_of: Callable[[dict[str, Any]], str],
                  reply: Callable[[str, dict[str, Any]], Reply]) -> Policy:
    """A model policy for ``runs`` runs at once: a request belongs to the run ``key_of(body)`` names,
    each run's first call waits for the other runs' first calls (so all are in flight together),
    and every call is answered ``reply(key, body)``."""
    barrier, started, lock = threading.Barrier(runs), set(), threading.Lock()

    def policy(body: dict[str, Any]) -> Reply:
        key = key_of(body)
        with lock:
            first = key not in started
            started.add(key)
        if first:
            barrier.wait(10)
        return reply(key, body)

    return policy


#: The four runs of the at-once tests: two in threads, two as asyncio tasks; "ok" ones succeed.
AT_ONCE = ("thread-a-ok", "thread-b-no", "async-c-ok", "async-d-no")


def run_at_once(one: Callable[[str], str], one_async: Callable[[str], Awaitable[str]]) -> list[str]:
    """Run :data:`AT_ONCE`'s thread runs with ``one`` in two threads while an event loop runs its
    task runs with ``one_async`` (all four at once, with :func:`all_in_flight`); their answers in
    :data:`AT_ONCE`'s order."""

    async def both() -> list[str]:
        return list(await asyncio.gather(*(one_async(key) for key in AT_ONCE[2:])))

    with ThreadPoolExecutor(2) as pool:
        threaded = pool.map(one, AT_ONCE[:2])
        in_loop = asyncio.run(both())
        return [*threaded, *in_loop]
