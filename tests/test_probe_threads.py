"""Which run ``probe.set_outcome()`` and ``probe.trajectory()`` mean without a trace id when one
probe's runs happen in several threads or asyncio tasks (trace-every-app mode): each caller's own
run, never another thread's or task's; where that cannot be told, an error asking for the trace id.

Real AutoGen demo teams on the scripted local model server; a barrier in the model makes two runs
be in flight at once where a test needs them to overlap."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")

import aegis_probe  # noqa: E402
from aegis_probe.demos import autogen as demo  # noqa: E402
from aegis_probe.capture.instrumentor import AegisInstrumentor  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.capture.probe import AmbiguousRun  # noqa: E402

TASKS = {  # two tasks the scripted model solves, told apart in the store by their text
    "pens": demo.TASK,
    "train": "A train travels 84 km in the first hour and 96 km in the second hour. How many km does it travel in total?",
}
WAIT_S = 120  # a safety net against a hang, never reached when the test passes


@pytest.fixture
def shared_probe(tmp_path):
    """The trace-every-app probe of AutoGen: every team's runs are its runs."""
    instrumentor = AegisInstrumentor()
    instrumentor.instrument(store=str(tmp_path / "store"))
    probe = instrumentor.probe("autogen")
    assert probe is not None
    yield probe
    instrumentor.uninstrument()


def _overlapping(policy: Any) -> Any:
    """``policy``, with the planner's first call of each of two runs held until both runs made it."""
    barrier = threading.Barrier(2, timeout=WAIT_S)

    def held(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][0].get("content") or ""
        if prompt.startswith(demo.SYSTEM["planner"]) and len(body["messages"]) == 2:  # system + task
            barrier.wait()
        return policy(body)

    return held


def _outcomes(probe: aegis_probe.Probe) -> dict[str, tuple[bool | None, str | None]]:
    """Per task name (else the task's text): the stored run's (success, answer) label."""
    assert probe.store is not None
    names = {text: name for name, text in TASKS.items()}
    trajs = [aegis_probe.Trajectory.from_spans(probe.store.trace(t)) for t in probe.store.traces()]
    return {names.get(t.task or "", t.task or ""): (t.outcome.success, t.outcome.answer) for t in trajs}


def test_each_thread_labels_its_own_run(shared_probe, model_server):
    """Thread A's run ends, then thread B's; only then does A call set_outcome(): it labels A's run,
    not the probe's latest (B's), and each thread's trajectory() is its own run."""
    server = model_server(demo.policy)
    a_ran, b_ran = threading.Event(), threading.Event()
    seen: dict[str, str | None] = {}

    def thread_a() -> None:
        demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), TASKS["pens"])
        a_ran.set()
        assert b_ran.wait(WAIT_S)
        shared_probe.set_outcome(True, answer="pens: right")
        seen["pens"] = shared_probe.trajectory().task

    def thread_b() -> None:
        assert a_ran.wait(WAIT_S)
        demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), TASKS["train"])
        b_ran.set()
        shared_probe.set_outcome(False, answer="train: wrong")
        seen["train"] = shared_probe.trajectory().task

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(thread_a), pool.submit(thread_b)]:
            done.result()
    shared_probe.flush()
    assert seen == TASKS
    assert _outcomes(shared_probe) == {"pens": (True, "pens: right"), "train": (False, "train: wrong")}


def test_threads_with_overlapping_runs_label_their_own_and_others_must_name_one(shared_probe, model_server):
    """Two threads' runs in flight at once: each thread still labels its own; the main thread,
    which ran none, gets AmbiguousRun (asking for the trace id) instead of either run, and writes nothing."""
    server = model_server(_overlapping(demo.policy))

    def run(name: str) -> str:
        demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), TASKS[name])
        shared_probe.set_outcome(name == "pens", answer=name)
        traj = shared_probe.trajectory()
        assert traj.task == TASKS[name] and traj.trace_id is not None
        return traj.trace_id

    with ThreadPoolExecutor(2) as pool:
        trace_ids = dict(zip(TASKS, pool.map(run, TASKS)))
    shared_probe.flush()
    expected = {"pens": (True, "pens"), "train": (False, "train")}
    assert _outcomes(shared_probe) == expected
    with pytest.raises(AmbiguousRun, match="pass trace_id="):
        shared_probe.set_outcome(False, answer="from main")
    with pytest.raises(AmbiguousRun, match="pass trace_id="):
        shared_probe.trajectory()
    assert _outcomes(shared_probe) == expected
    assert shared_probe.trajectory(trace_ids["train"]).task == TASKS["train"]  # by id: as ever


def test_asyncio_tasks_side_by_side_label_their_own_runs(shared_probe, model_server):
    """Two asyncio tasks of one event loop each run a team (in flight at once) and then label it:
    each labels its own run, whichever ended last; afterwards the thread that ran the loop, whose
    two runs overlapped, gets AmbiguousRun."""
    server = model_server(_overlapping(demo.policy))
    apps = {name: demo.build_app(server.base_url, "aegis-scripted", "sk-test") for name in TASKS}
    both_ran = asyncio.Event()
    ended: list[str] = []

    async def one(name: str) -> str | None:
        await apps[name].run(task=TASKS[name])
        ended.append(name)
        if len(ended) == 2:
            both_ran.set()
        await both_ran.wait()  # both runs over before either task labels
        shared_probe.set_outcome(name == "pens", answer=name)
        return shared_probe.trajectory().task

    async def main() -> list[str | None]:
        return await asyncio.gather(*(one(name) for name in TASKS))

    assert asyncio.run(main()) == list(TASKS.values())
    shared_probe.flush()
    assert _outcomes(shared_probe) == {"pens": (True, "pens"), "train": (False, "train")}
    with pytest.raises(AmbiguousRun, match="concurrently"):
        shared_probe.set_outcome(True)


def test_a_lone_run_elsewhere_is_still_found(shared_probe, model_server):
    """A run made in a worker thread, labelled from the main thread that ran none: with no other
    run of the probe in flight during it, the run is unambiguous and is the one labelled."""
    server = model_server(demo.policy)
    with pytest.raises(RuntimeError, match="no run has happened yet"):
        shared_probe.set_outcome(True)
    worker = threading.Thread(target=demo.run_app,
                              args=(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), TASKS["train"]))
    worker.start()
    worker.join()
    shared_probe.set_outcome(True, answer="180")
    assert shared_probe.trajectory().task == TASKS["train"]
    shared_probe.flush()
    assert _outcomes(shared_probe) == {"train": (True, "180")}


def test_a_run_in_flight_elsewhere_makes_it_ambiguous(model_server, tmp_path):
    """A finished run in a worker thread would be the main thread's choice, but not while another
    run of the probe (``probe.run()`` held open in a third thread) is in flight: AmbiguousRun."""
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    worker = threading.Thread(target=demo.run_app, args=(app, TASKS["train"]))
    worker.start()
    worker.join()
    assert probe.trajectory().task == TASKS["train"]
    opened, release = threading.Event(), threading.Event()

    def held_open() -> None:
        with probe.run("held open"):
            opened.set()
            assert release.wait(WAIT_S)

    holder = threading.Thread(target=held_open)
    holder.start()
    try:
        assert opened.wait(WAIT_S)
        with pytest.raises(AmbiguousRun, match="are in flight"):
            probe.set_outcome(True)
    finally:
        release.set()
        holder.join()
    probe.flush()
    assert _outcomes(probe) == {"train": (None, None), "held open": (None, None)}



def test_a_framework_run_in_flight_in_another_thread_makes_it_ambiguous(shared_probe, model_server):
    """Thread A's team run has ended; thread B's, opened by the AutoGen adapter (no ``probe.run()``),
    is held in flight by its model: the main thread, which ran none, gets AmbiguousRun instead of
    A's run (the probe's only finished one), while A's own call still gets A's run."""
    a_ran, b_in_flight, release = threading.Event(), threading.Event(), threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        if TASKS["train"] in str(body["messages"][-1].get("content")):  # B's first model call
            b_in_flight.set()
            assert release.wait(WAIT_S)
        return demo.policy(body)

    server = model_server(held)

    def thread_a() -> str | None:
        demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), TASKS["pens"])
        a_ran.set()
        assert b_in_flight.wait(WAIT_S)
        return shared_probe.trajectory().task

    def thread_b() -> None:
        assert a_ran.wait(WAIT_S)
        demo.run_app(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), TASKS["train"])

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(thread_a), pool.submit(thread_b)
        try:
            assert b_in_flight.wait(WAIT_S)
            assert a.result(WAIT_S) == TASKS["pens"]  # A's own run, B's in flight
            with pytest.raises(AmbiguousRun, match="are in flight"):
                shared_probe.trajectory()
            with pytest.raises(AmbiguousRun, match="are in flight"):
                shared_probe.set_outcome(True, answer="from main")
        finally:
            release.set()
        b.result(WAIT_S)
    shared_probe.flush()
    assert _outcomes(shared_probe) == {"pens": (None, None), "train": (None, None)}
