"""A run started under a span of the app's own (a web request handler's, real-use sweep): each run
is still one trace (README, docs/trajectory.md), linked to the request's span, so its trajectory,
outcome and labels are its own even when one request runs several teams; the service's other
traces stay out of the trace store."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aegis_probe
from aegis_probe.demos import autogen as demo
from aegis_probe.modelserver import ModelServer

TASK = "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"


def test_runs_inside_a_request_span_are_traces_of_their_own_linked_to_it(tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # the service's provider, also aegis-probe's here
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    web = provider.get_tracer("web-framework")
    store = tmp_path / "store"
    runs = []
    with ModelServer(demo.policy) as server, web.start_as_current_span("POST /solve") as request:
        for task, expected in ((TASK, "126"), (TASK.replace("17", "11"), "108")):
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
            probe = aegis_probe.instrument(app, tracer_provider=provider, store=store)
            answer = demo.run_app(app, task)
            probe.set_outcome(expected in answer, answer=answer, expected=expected)  # was: KeyError into the app
            traj = probe.trajectory()
            runs.append(traj)
            probe.uninstrument()
    first, second = runs
    assert first.trace_id != second.trace_id != format(request.get_span_context().trace_id, "032x")
    for traj, task in zip(runs, (TASK, TASK.replace("17", "11"))):
        # was: framework None, app "/solve", no task, and both runs' steps in one trajectory
        assert (traj.framework, traj.app, traj.task) == ("autogen", "RoundRobinGroupChat", task)
        assert [s.index for s in traj.steps] == [0, 1, 2] and traj.outcome.success is True
    roots = [s for s in exporter.get_finished_spans() if s.name == "invoke_workflow RoundRobinGroupChat"]
    assert [r.parent for r in roots] == [None, None]
    assert all([link.context for link in r.links] == [request.get_span_context()] for r in roots)
    # The request's own trace is the service's, not a run: it stays out of the store.
    assert sorted(t.trace_id for t in aegis_probe.load_trajectories(store)) == sorted(t.trace_id for t in runs)


def test_an_app_instrumented_per_request_adds_the_store_once(tmp_path):
    provider = TracerProvider()  # the service's
    exporter = InMemorySpanExporter()
    store = tmp_path / "store"
    with ModelServer(demo.policy) as server:
        for _ in range(3):  # a team built and instrumented per request
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
            with aegis_probe.instrument(app, tracer_provider=provider, store=store, exporter=exporter):
                demo.run_app(app, TASK)
    lines = (store / "spans.jsonl").read_text().splitlines()
    span_ids = [s["spanId"] for line in lines for rs in json.loads(line)["resourceSpans"]
                for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert len(lines) == 3 and len(span_ids) == len(set(span_ids)), "was: the k-th run written k times"
    provider.force_flush()
    exported = [s.context.span_id for s in exporter.get_finished_spans()]
    assert len(exported) == len(set(exported)) == len(span_ids)


def test_a_probe_goes_with_its_app_when_the_app_is_dropped_without_uninstrument(tmp_path):
    import gc
    import time
    import weakref

    probes = []
    with ModelServer(demo.policy) as server:
        for _ in range(3):  # a service that instruments a team per request and never uninstruments
            app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
            probe = aegis_probe.instrument(app, store=tmp_path / "store")
            assert "126" in demo.run_app(app, TASK)
            probes.append(weakref.ref(probe))
            del app, probe
    for _ in range(50):  # a thread winding down (the model server's, the writer's) may hold the last one a moment
        gc.collect()
        if all(p() is None for p in probes):
            break
        time.sleep(0.1)
    assert [p() for p in probes] == [None, None, None], "was: every probe (and its last run) kept for good"
    app = demo.build_app("http://127.0.0.1:9/v1", "m", "k")
    kept = aegis_probe.instrument(app)  # a probe its app still holds stays, and uninstrument() reaches it
    gc.collect()
    aegis_probe.uninstrument()
    assert not kept.active
