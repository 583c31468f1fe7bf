"""CrewAI adapter, in the environment of its own (.venv-crewai: crewai 1.15 needs mcp>=1.30 and
openai 2.x, the main environment pins mcp<1.20).

In the main environment only :func:`test_in_own_environment` runs: it runs this file and the
shared conformance and replay suites (their ``crewai`` cases) in .venv-crewai and asserts they
pass, skipping with the reason when that environment is absent. Everything runs against the
loopback model server with CrewAI's telemetry, tracing and version check switched off.
"""

from __future__ import annotations

import asyncio
import json
import re
import os

import pytest
from own_env import INSIDE, importable, run_in_own_env

#: CrewAI 1.15's opt-outs (never OTEL_SDK_DISABLED: it would switch off aegis-probe's SDK too).
TELEMETRY_OFF = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false",
                 "CREWAI_DISABLE_VERSION_CHECK": "true"}
HERE = importable("crewai")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment(tmp_path):
    """CrewAI keeps kickoff outputs and keys under the user's data dir: a temporary one here."""
    run_in_own_env(".venv-crewai", "tests/test_crewai.py", "crewai",
                   env={**TELEMETRY_OFF, "XDG_DATA_HOME": str(tmp_path)})


#: The tests below need crewai: they run in .venv-crewai (through test_in_own_environment).
needs_crewai = pytest.mark.skipif(not HERE, reason="crewai is not installed here (it runs in .venv-crewai)")
if HERE:
    os.environ.update(TELEMETRY_OFF)
    import aegis_probe
    from aegis_probe.capture import semconv as sc
    from aegis_probe.demos import crewai as demo
    from aegis_probe.demos.task import request_texts
    from aegis_probe.modelserver import Reply
    from framework_checks import (blame_finds_planted_step, campaign_keeps_labelled_failures,
                                  raising_tool_policy, the_one_run_ended_cancelled, uninstrument_restores_originals)

MANAGER = "Crew Manager"


def _instrumented(model_server, provider, tmp_path, policy=None, app=None, **options):
    server = model_server(policy or demo.policy)
    app = app(server.base_url) if app else demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", **options)


def _steps(exporter):
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.STEP_INDEX) is not None]
    return sorted(spans, key=lambda s: s.attributes[sc.STEP_INDEX])


@needs_crewai
def test_telemetry_is_off():
    from crewai.telemetry import Telemetry

    assert Telemetry()._is_telemetry_disabled()


@needs_crewai
def test_task_turns_are_steps(model_server, provider, exporter, tmp_path):
    from aegis_probe.demos.task import judge

    app, probe = _instrumented(model_server, provider, tmp_path, judge=judge)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    steps = _steps(exporter)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == list(demo.AGENTS)
    ours = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]
    assert len({s.context.trace_id for s in ours}) == 1
    traj = probe.trajectory()
    assert [len(s.llm_calls) for s in traj.steps] == [1, 2, 1], "raw-response calls are chat spans"
    assert [t.name for t in traj.steps[1].tool_calls] == [demo.TOOL] and traj.steps[1].tool_calls[0].result == "126"
    assert traj.task == demo.TASK and traj.outcome.success
    assert traj.outcome.answer.endswith("FINAL ANSWER: 126")


@needs_crewai
def test_injected_answer_reaches_the_crew(model_server, provider, tmp_path):
    """An interceptor's answer goes back through the raw-response wrapper CrewAI parses."""
    from aegis_probe.capture.interception import LLMResponse

    class Reviewer:
        def before(self, call):
            return LLMResponse(content="FINAL ANSWER: 7") if call.agent == "reviewer" else None

        def after(self, call, response):
            return response

    app, probe = _instrumented(model_server, provider, tmp_path)
    with probe.intercept(Reviewer()):
        assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 7"


@needs_crewai
@pytest.mark.parametrize("kickoff", ["akickoff", "kickoff_async"])
def test_async_kickoff_is_one_run(kickoff, model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    output = asyncio.run(getattr(app, kickoff)(inputs={"task": demo.TASK}))
    assert demo.EXPECTED in output.raw
    probe.flush()
    ours = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]
    assert len({s.context.trace_id for s in ours}) == 1
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == list(demo.AGENTS)
    assert [len(s.llm_calls) for s in probe.trajectory().steps] == [1, 2, 1]


@needs_crewai
def test_task_of_several_inputs_keeps_their_text(model_server, provider, exporter, tmp_path):
    """Several inputs: the task is their JSON with the text as written (was ``\\u``-escaped: "Z\\u00fcrich")."""
    app, probe = _instrumented(model_server, provider, tmp_path)
    inputs = {"task": demo.TASK, "city": "Zürich"}
    app.kickoff(inputs=inputs)
    probe.flush()
    task = probe.trajectory().task
    assert "Zürich" in task and json.loads(task) == inputs


@needs_crewai
def test_replay_from_a_task_is_a_run(model_server, provider, exporter, tmp_path):
    """``Crew.replay(task_id)`` re-runs the crew from a task of its last kickoff (the earlier tasks'
    stored outputs as context): a run whose steps are the re-run turns, its task the kickoff's."""
    app, probe = _instrumented(model_server, provider, tmp_path)
    demo.run_app(app, demo.TASK)
    exporter.clear()
    output = app.replay(str(app.tasks[1].id))
    assert demo.EXPECTED in output.raw
    probe.flush()
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 1 and roots[0].attributes[sc.TASK] == demo.TASK
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == list(demo.AGENTS[1:])
    exporter.clear()
    with pytest.raises(ValueError, match="not found"):  # an unknown task: CrewAI's error, and no run
        app.replay("no-such-task")
    assert exporter.get_finished_spans() == ()


@needs_crewai
@pytest.mark.parametrize("kickoff", ["kickoff_for_each", "kickoff_for_each_async", "akickoff_for_each"])
def test_kickoff_for_each_is_one_run_per_input(kickoff, model_server, provider, exporter, tmp_path):
    """``kickoff_for_each*`` kick off a copy of the crew per input: each copy's kickoff is a run."""
    app, probe = _instrumented(model_server, provider, tmp_path)
    inputs = [{"task": demo.TASK}, {"task": demo.TASK.replace("17", "18")}]
    outputs = getattr(app, kickoff)(inputs=inputs)
    if asyncio.iscoroutine(outputs):
        outputs = asyncio.run(outputs)
    assert demo.EXPECTED in outputs[0].raw
    probe.flush()
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert sorted(s.attributes[sc.TASK] for s in roots) == sorted(i["task"] for i in inputs)
    for root in roots:
        steps = [s for s in _steps(exporter) if s.context.trace_id == root.context.trace_id]
        assert [s.attributes[sc.AGENT_NAME] for s in steps] == list(demo.AGENTS)


@needs_crewai
@pytest.mark.parametrize("kickoff", ["kickoff", "akickoff"])
def test_streaming_crew_is_one_run(kickoff, model_server, provider, exporter, tmp_path):
    """``Crew(stream=True)``: the kickoff returns a streaming output whose iteration kicks the crew off again."""
    from crewai import Crew

    def streaming(base_url):
        base = demo.build_app(base_url, "aegis-scripted", "sk-test")
        return Crew(name="streamed", agents=base.agents, tasks=base.tasks, stream=True)

    app, probe = _instrumented(model_server, provider, tmp_path, app=streaming)

    async def consume():
        streamed = await app.akickoff(inputs={"task": demo.TASK})
        return [chunk async for chunk in streamed], streamed

    if kickoff == "kickoff":
        streamed = app.kickoff(inputs={"task": demo.TASK})
        chunks = list(streamed)
    else:
        chunks, streamed = asyncio.run(consume())
    assert chunks and demo.EXPECTED in streamed.result.raw
    probe.flush()
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 1 and roots[0].attributes[sc.TASK] == demo.TASK
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == list(demo.AGENTS)


def _delegating(body):
    """Scripted manager: delegates each task to the one coworker its tool names, then returns the answer."""
    system, seen = request_texts(body)
    if not system.startswith(f"You are {MANAGER}"):
        return demo.policy(body)
    messages = body["messages"]
    if messages[-1].get("role") == "tool":
        return Reply(content=str(messages[-1].get("content")))
    delegate = next(t["function"] for t in body["tools"] if t["function"]["name"] == "delegate_work_to_coworker")
    coworker = delegate["description"].split("coworkers: ")[1].split("\n")[0].strip()
    return Reply(tool_calls=[("delegate_work_to_coworker", {"task": seen[0], "context": "", "coworker": coworker})])


@needs_crewai
def test_hierarchical_crew_manager_turns_are_steps(model_server, provider, exporter, tmp_path):
    from crewai import Crew, Process

    def hierarchical(base_url):
        base = demo.build_app(base_url, "aegis-scripted", "sk-test")
        return Crew(name="managed", agents=base.agents, tasks=base.tasks, process=Process.hierarchical,
                    manager_llm=demo.llm(base_url, "aegis-scripted", "sk-test"))

    app, probe = _instrumented(model_server, provider, tmp_path, _delegating, hierarchical)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    steps = _steps(exporter)
    names = [s.attributes[sc.AGENT_NAME] for s in steps]
    assert names == [MANAGER, "planner", MANAGER, "calculator", MANAGER, "reviewer"]
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(6))
    by_id = {s.context.span_id: s for s in exporter.get_finished_spans()}
    for manager, worker in zip(steps[::2], steps[1::2]):  # the coworker's turn runs in the delegation tool
        tool = by_id[worker.parent.span_id]
        assert tool.attributes[sc.TOOL_NAME] == "delegate_work_to_coworker"
        assert by_id[tool.parent.span_id] is manager


@needs_crewai
def test_tool_error_is_an_error_span_and_the_run_goes_on(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    demo.run_app(app, demo.TASK)  # CrewAI hands the error to the model as the tool's output
    probe.flush()
    tools = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert tools and all(s.status.status_code.name == "ERROR" for s in tools)


@needs_crewai
@pytest.mark.parametrize("kickoff", ["kickoff", "akickoff"])
def test_retried_turn_is_a_failed_step_then_a_step_beside_it(kickoff, model_server, provider, exporter, tmp_path):
    """CrewAI retries a failed turn (``max_retry_limit``) by calling ``execute_task`` again from inside
    it: the failed attempt is a failed step of its own (it was nested around the retry and ended
    with the retry's output, as if it had succeeded), the retry a step beside it."""
    calls = []

    def policy(body):
        calls.append(body)
        if len(calls) == 1:
            raise RuntimeError("model overloaded")
        return demo.policy(body)

    app, probe = _instrumented(model_server, provider, tmp_path, policy)
    output = app.kickoff(inputs={"task": demo.TASK}) if kickoff == "kickoff" else asyncio.run(
        app.akickoff(inputs={"task": demo.TASK}))
    assert demo.EXPECTED in output.raw
    probe.flush()
    steps = _steps(exporter)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", *demo.AGENTS]
    root = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert all(s.parent.span_id == root.context.span_id for s in steps)
    assert [s.status.status_code.name for s in steps] == ["ERROR", "UNSET", "UNSET", "UNSET"]
    assert probe.trajectory().steps[0].output == ""


@needs_crewai
def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from crewai import Agent, Crew
    from crewai.events.event_bus import CrewAIEventsBus
    from crewai.llm import LLM
    from crewai.llms.base_llm import BaseLLM
    from crewai.llms.providers.openai.completion import OpenAICompletion
    from crewai.tools.base_tool import BaseTool, Tool

    names = [(Crew, "kickoff"), (Crew, "akickoff"), (Crew, "copy"), (Agent, "execute_task"), (Agent, "aexecute_task"),
             (Agent, "_handle_execution_error"), (Agent, "_handle_execution_error_async"), (BaseTool, "run"),
             (Tool, "run"), (BaseLLM, "_emit_call_completed_event"), (LLM, "_handle_emit_call_events"),
             (BaseLLM, "_handle_tool_execution"), (CrewAIEventsBus, "emit"), (OpenAICompletion, "call"),
             (OpenAICompletion, "acall"), (LLM, "call"), (LLM, "acall")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


@needs_crewai
def test_content_off_keeps_task_text_out(model_server, tmp_path, provider, exporter):
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", capture_content=False)
    demo.run_app(app, demo.TASK)
    probe.flush()
    dumped = json.dumps([dict(s.attributes) for s in exporter.get_finished_spans()], default=str)
    # as words: a random id ("5bf126f0-...") may hold the digits
    assert not re.search(r"\bpens\b", dumped) and not re.search(r"\b126\b", dumped)


@needs_crewai
def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


@needs_crewai
def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("crewai_math.py", demo, tmp_path)


@needs_crewai
@pytest.mark.parametrize("kickoff", ["kickoff", "akickoff"])
def test_kickoff_that_raises_is_the_probes_last_run(kickoff, model_server, provider, tmp_path):
    """The app's exception (a task callback's) ends the kickoff: it passes unchanged, and the failed run
    is the probe's last run with its error, judged (``probe.trajectory()`` found no run before)."""
    class Broken(Exception):
        pass

    error = Broken("the report could not be filed")
    judged = []
    app, probe = _instrumented(model_server, provider, tmp_path, judge=lambda task, answer: judged.append(task) or False)

    def file_report(output):
        raise error

    app.tasks[-1].callback = file_report
    with pytest.raises(Broken) as raised:
        if kickoff == "kickoff":
            app.kickoff(inputs={"task": demo.TASK})
        else:
            asyncio.run(app.akickoff(inputs={"task": demo.TASK}))
    assert raised.value is error
    traj = probe.trajectory()
    assert traj.task == demo.TASK and traj.error.startswith("Broken") and judged == [demo.TASK]


@needs_crewai
def test_streaming_crew_closed_before_its_end_ends_its_run_cancelled(model_server, tmp_path):
    """An ``akickoff`` streaming output the app closes after its first chunk: CrewAI cancels the crew's
    task, and the run ends cancelled (ERROR, ``error.type`` ``CancelledError``), as autogen's, stored
    and the probe's last run; the app gets what it gets uninstrumented (no error)."""
    from crewai import Crew


    server = model_server(demo.policy)

    def streaming() -> object:
        base = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
        return Crew(name="streamed", agents=base.agents, tasks=base.tasks, stream=True)

    async def first_chunk(app: object) -> bool:
        streamed = await app.akickoff(inputs={"task": demo.TASK})
        async for _ in streamed:
            break
        await streamed.aclose()
        return streamed.is_cancelled

    assert asyncio.run(first_chunk(streaming())) is True
    app = streaming()
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    assert asyncio.run(first_chunk(app)) is True
    the_one_run_ended_cancelled(probe, tmp_path / "store")
