"""OpenAI Agents SDK adapter, in the environment of its own (.venv-openai-agents: openai-agents 0.24
needs pydantic>=2.12.2, the main environment pins 2.12.0).

In the main environment only :func:`test_in_own_environment` runs: it runs this file and the
shared conformance and replay suites (their ``openai-agents`` cases) in .venv-openai-agents and
asserts they pass, skipping with the reason when that environment is absent. Everything runs
against the loopback model server, with the SDK's trace export replaced by a local collector.
"""

from __future__ import annotations

import asyncio

import pytest
from own_env import INSIDE, importable, run_in_own_env

HERE = importable("agents.run")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-openai-agents", "tests/test_openai_agents.py", "openai",
                   env={"OPENAI_AGENTS_DISABLE_TRACING": "1"})


#: The tests below need the SDK: they run in .venv-openai-agents (through test_in_own_environment).
needs_sdk = pytest.mark.skipif(not HERE, reason="openai-agents is not installed here (it runs in .venv-openai-agents)")
if HERE:
    import aegis_probe
    from aegis_probe.capture import semconv as sc
    from aegis_probe.demos import openai_agents as demo
    from aegis_probe.modelserver import Reply
    from framework_checks import (blame_finds_planted_step, campaign_keeps_labelled_failures,
                                  raising_tool_policy, the_one_run_ended_cancelled, uninstrument_restores_originals)

class _Collector:
    """The SDK's own trace processor interface; records which spans the SDK itself started."""

    def __init__(self) -> None:
        self.spans: list[object] = []

    def on_trace_start(self, trace): ...
    def on_trace_end(self, trace): ...
    def on_span_start(self, span):
        self.spans.append(span)
    def on_span_end(self, span): ...
    def shutdown(self): ...
    def force_flush(self): ...


@pytest.fixture
def sdk_traces():
    """The SDK's trace export replaced by a local collector (nothing leaves the machine)."""
    from agents import set_trace_processors, set_tracing_disabled

    collector = _Collector()
    set_trace_processors([collector])
    set_tracing_disabled(False)
    yield collector
    set_tracing_disabled(True)
    set_trace_processors([])


def _instrumented(model_server, provider, tmp_path, policy=None):
    server = model_server(policy or demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(exporter):
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.STEP_INDEX) is not None]
    return sorted(spans, key=lambda s: s.attributes[sc.STEP_INDEX])


@needs_sdk
def test_turns_are_steps_and_handoffs_switch_agent(model_server, provider, exporter, tmp_path, sdk_traces):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    steps = _steps(exporter)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "calculator", "reviewer"]
    assert [s.attributes.get(sc.STEP_NEXT_SPEAKER) for s in steps] == ["calculator", None, "reviewer", None]
    assert sdk_traces.spans == [], "the SDK's own tracing is off for instrumented runs: one span per step"
    traj = probe.trajectory()
    assert [t.name for t in traj.steps[1].tool_calls] == [demo.TOOL] and traj.steps[1].tool_calls[0].result == "126"

    aegis_probe.uninstrument()
    demo.run_app(app, demo.TASK)
    assert sdk_traces.spans, "uninstrumented, the SDK traces as the user configured it"


@needs_sdk
def test_run_config_as_the_app_gave_it_keeps_sdk_tracing_off(model_server, provider, exporter, tmp_path, sdk_traces,
                                                               monkeypatch):
    """``run_config`` as a dict (the SDK takes one) is still untraced (``dataclasses.replace`` failed on
    it: the SDK traced the run); with none given the SDK still closes the model provider it made."""
    from agents import Runner
    from agents.models.multi_provider import MultiProvider

    closed = []
    original = MultiProvider.aclose

    async def aclose(self):
        closed.append(self)
        await original(self)

    monkeypatch.setattr(MultiProvider, "aclose", aclose)
    app, probe = _instrumented(model_server, provider, tmp_path)
    Runner.run_sync(app, demo.TASK, run_config={"workflow_name": "math"})
    assert sdk_traces.spans == [] and len(_steps(exporter)) == 4
    Runner.run_sync(app, demo.TASK)
    assert len(closed) == 2, "the Runner's own model provider is closed, as without instrumentation"


@needs_sdk
def test_async_run_is_one_trace(model_server, provider, exporter, tmp_path):
    from agents import Runner

    app, probe = _instrumented(model_server, provider, tmp_path)
    result = asyncio.run(Runner.run(app, demo.TASK))
    assert demo.EXPECTED in result.final_output
    probe.flush()
    ours = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]
    assert len({s.context.trace_id for s in ours}) == 1 and len(_steps(exporter)) == 4
    assert probe.trajectory().task == demo.TASK


@needs_sdk
def test_clone_of_instrumented_agent_is_traced(model_server, provider, exporter, tmp_path):
    """``agent.clone(...)`` (a variant of the starting agent: other instructions, model settings) is
    traced like the agent it copies."""
    app, probe = _instrumented(model_server, provider, tmp_path)
    variant = app.clone(instructions=app.instructions + " Be brief.")
    assert demo.EXPECTED in demo.run_app(variant, demo.TASK)
    probe.flush()
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)][0] == "planner"
    assert probe.trajectory().task == demo.TASK


@needs_sdk
def test_follow_up_run_task_is_its_new_user_message(model_server, provider, exporter, tmp_path):
    """A follow-up turn (the SDK's ``result.to_input_list()`` plus a new user message): its task is the new message."""
    from agents import Runner

    app, probe = _instrumented(model_server, provider, tmp_path)
    first = Runner.run_sync(app, demo.TASK)
    follow_up = "Thanks. Please check it once more: " + demo.TASK
    Runner.run_sync(app, first.to_input_list() + [{"role": "user", "content": follow_up}])
    probe.flush()
    assert probe.trajectory().task == follow_up


@needs_sdk
def test_follow_up_run_from_a_handoff_object_target_is_traced(model_server, provider, exporter, tmp_path):
    """A handoff made with ``handoff(agent, on_handoff=...)`` leads to an instrumented agent too: the
    next turn of the chat, run from ``result.last_agent``, is traced (it was not registered: no run)."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, handoff
    from openai import AsyncOpenAI

    def policy(body):
        asked = body["messages"][0]["content"] == "Triage." and body["messages"][-1]["role"] != "tool"
        return Reply(tool_calls=[("transfer_to_billing", {})]) if asked else Reply(content="Billing here.")

    server = model_server(policy)
    model = OpenAIChatCompletionsModel(model="aegis-scripted", openai_client=AsyncOpenAI(base_url=server.base_url,
                                                                                         api_key="sk-test"))
    billing = Agent(name="billing", instructions="Billing.", model=model)
    triage = Agent(name="triage", instructions="Triage.", model=model,
                   handoffs=[handoff(billing, on_handoff=lambda context: None)])
    aegis_probe.instrument(triage, tracer_provider=provider, store=False)
    first = Runner.run_sync(triage, "I was charged twice.")
    assert first.last_agent is billing
    Runner.run_sync(first.last_agent, first.to_input_list() + [{"role": "user", "content": "And a refund?"}])
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert sorted((s.name, s.attributes[sc.TASK]) for s in roots) == [
        ("invoke_workflow billing", "And a refund?"), ("invoke_workflow triage", "I was charged twice.")]


@needs_sdk
def test_runs_of_one_session_are_one_conversation(model_server, provider, exporter, tmp_path):
    """A chat kept in a session (``session=SQLiteSession(id)``): its runs share the session's id as
    ``gen_ai.conversation.id`` (each had a new one), as a LangGraph checkpointer thread does."""
    from agents import Runner, SQLiteSession

    app, probe = _instrumented(model_server, provider, tmp_path)
    session = SQLiteSession("user-42")
    Runner.run_sync(app, demo.TASK, session=session)
    Runner.run_sync(app, "Once more: " + demo.TASK, session=session)
    probe.flush()
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 2
    assert {s.attributes[sc.CONVERSATION_ID] for s in exporter.get_finished_spans()} == {"user-42"}


@needs_sdk
def test_streamed_run_is_traced_like_a_run(model_server, provider, exporter, tmp_path):
    from agents import Runner

    app, probe = _instrumented(model_server, provider, tmp_path)

    async def stream() -> object:
        result = Runner.run_streamed(app, demo.TASK)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(stream())
    assert demo.EXPECTED in result.final_output
    probe.flush()
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == ["planner", "calculator", "calculator", "reviewer"]
    traj = probe.trajectory()
    assert [len(s.llm_calls) for s in traj.steps] == [1, 1, 1, 1], "streamed completions are chat spans"
    assert traj.steps[3].output.endswith("FINAL ANSWER: 126")
    assert [t.name for t in traj.steps[1].tool_calls] == [demo.TOOL]


@needs_sdk
def test_streamed_run_past_max_turns_fails_like_a_run(model_server, provider, exporter, tmp_path):
    """The SDK ends a streamed run past ``max_turns`` normally and raises only in ``stream_events``."""
    from agents import MaxTurnsExceeded, Runner

    app, probe = _instrumented(model_server, provider, tmp_path)

    async def stream() -> None:
        result = Runner.run_streamed(app, demo.TASK, max_turns=2)
        async for _ in result.stream_events():
            pass

    with pytest.raises(MaxTurnsExceeded):
        asyncio.run(stream())
    probe.flush()
    root = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert root.status.status_code.name == "ERROR" and "MaxTurnsExceeded" in root.status.description


@needs_sdk
@pytest.mark.parametrize("streamed, serialized", [(False, False), (True, False), (False, True)])
def test_run_resumed_after_tool_approval(streamed, serialized, model_server, provider, exporter, tmp_path):
    """A tool that needs approval interrupts the run; the run resumed from its state (a ``RunState``
    input) is traced, the approved tool call inside its first step."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, RunState, function_tool
    from openai import AsyncOpenAI

    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Transfer money."""
        return f"transferred {amount}"

    def policy(body):
        asked = body.get("tools") and body["messages"][-1]["role"] != "tool"
        return Reply(tool_calls=[("transfer", {"amount": 100})]) if asked else Reply(content="done")

    server = model_server(policy)

    async def approve_and_resume():
        model = OpenAIChatCompletionsModel(model="aegis-scripted",
                                           openai_client=AsyncOpenAI(base_url=server.base_url, api_key="sk-test"))
        agent = Agent(name="banker", instructions="Move money.", model=model, tools=[transfer])
        probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
        first = await Runner.run(agent, "send 100")
        state = first.to_state()
        if serialized:  # as an app that stored the state while a human decided
            state = await RunState.from_string(agent, state.to_string())
        state.approve(state.get_interruptions()[0])
        if not streamed:
            return probe, await Runner.run(agent, state)
        result = Runner.run_streamed(agent, state)
        async for _ in result.stream_events():
            pass
        return probe, result

    probe, result = asyncio.run(approve_and_resume())
    assert result.final_output == "done"
    probe.flush()
    traj = probe.trajectory()
    assert traj.task == "send 100" and [s.agent for s in traj.steps] == ["banker", "banker"]
    assert [t.result for t in traj.steps[0].tool_calls] == ["transferred 100"]
    assert traj.steps[1].output == "done"
    # The resumed turn's input is the interrupted turn's; the next turn's, the approved tool's result.
    assert [[(m.role, m.content) for m in s.input_messages] for s in traj.steps] == [
        [("user", "send 100")], [("tool", "[tool_result transferred 100]")]]


@needs_sdk
def test_structured_final_output_is_the_answer_as_json(model_server, provider, tmp_path):
    """An agent with an ``output_type`` (a pydantic model): the judge gets its JSON, not its repr, with
    its text as written (not ``\\u``-escaped)."""
    import json

    from agents import Agent, OpenAIChatCompletionsModel, Runner
    from openai import AsyncOpenAI
    from pydantic import BaseModel

    class Total(BaseModel):
        total: int
        unit: str

    server = model_server(lambda body: Reply(content=json.dumps({"total": 126, "unit": "Münzen"})))
    model = OpenAIChatCompletionsModel(model="aegis-scripted", openai_client=AsyncOpenAI(base_url=server.base_url,
                                                                                         api_key="sk-test"))
    agent = Agent(name="solver", instructions="Add it up.", model=model, output_type=Total)
    answers = []
    aegis_probe.instrument(agent, tracer_provider=provider, store=False,
                           judge=lambda task, answer: answers.append(answer) or True)
    Runner.run_sync(agent, demo.TASK)
    assert [json.loads(a) for a in answers] == [{"total": 126, "unit": "Münzen"}] and "Münzen" in answers[0]


@needs_sdk
def test_tool_error_is_an_error_span_and_the_run_goes_on(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    demo.run_app(app, demo.TASK)  # the SDK hands the error to the model as the tool's output
    probe.flush()
    tools = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert tools and all(s.status.status_code.name == "ERROR" for s in tools)


@needs_sdk
def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    import agents.run as run_module
    from agents.run import AgentRunner
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
    from agents.run_internal import run_loop, tool_execution
    from openai.resources.chat.completions import AsyncCompletions

    client_create = vars(AsyncCompletions)["create"]
    names = [(AgentRunner, "run"), (run_module, "run_single_turn"), (run_module, "resolve_interrupted_turn"),
             (run_loop, "resolve_interrupted_turn"), (tool_execution, "_invoke_function_tool_with_metadata"),
             *((cls, name) for cls in (OpenAIResponsesModel, OpenAIChatCompletionsModel)
               for name in ("get_response", "stream_response"))]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))
    assert vars(AsyncCompletions)["create"] is client_create, "the model seam is the SDK's Model, not the openai client"


@needs_sdk
def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


@needs_sdk
def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("openai_agents_math.py", demo, tmp_path)


@needs_sdk
@pytest.mark.parametrize("streamed", [False, True])
def test_turn_input_is_what_the_agent_has_not_seen(streamed, model_server, provider, exporter, tmp_path):
    """As in the other adapters, a turn's input is what its agent has not seen yet: the items after its
    own model's last output in the run (its tools' results), all of the conversation on its first turn."""
    from agents import Runner

    app, probe = _instrumented(model_server, provider, tmp_path)
    if streamed:
        async def stream():
            result = Runner.run_streamed(app, demo.TASK)
            async for _ in result.stream_events():
                pass

        asyncio.run(stream())
    else:
        Runner.run_sync(app, demo.TASK)
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["planner", "calculator", "calculator", "reviewer"]
    inputs = [[(m.role, m.content) for m in s.input_messages] for s in steps]
    assert inputs[0] == [("user", demo.TASK)]
    assert inputs[1][0] == ("user", demo.TASK) and "transfer_to_calculator" in inputs[1][-2][1]
    assert inputs[2] == [("tool", "[tool_result 126]")]
    assert len(inputs[3]) == len(inputs[1]) + 5 and "transfer_to_reviewer" in inputs[3][-2][1]


@needs_sdk
def test_run_past_max_turns_is_the_probes_last_run(model_server, provider, exporter, tmp_path):
    """A run the SDK ends by raising (``MaxTurnsExceeded``) is the probe's last run, with its error, and
    judged: ``probe.trajectory()`` and ``set_outcome`` took the run before it (or found none)."""
    from agents import MaxTurnsExceeded, Runner

    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    judged = []
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store",
                                   judge=lambda task, answer: judged.append(task) or False)
    with pytest.raises(MaxTurnsExceeded) as raised:
        Runner.run_sync(app, demo.TASK, max_turns=2)
    probe.flush()
    traj = probe.trajectory()
    assert traj.trace_id == format(exporter.get_finished_spans()[-1].context.trace_id, "032x")
    assert traj.error.startswith("MaxTurnsExceeded") and len(traj.steps) == 2 and judged == [demo.TASK]
    assert str(raised.value) == "Max turns (2) exceeded"



def _cancelled_streamed_run(app: object, how: str, monkeypatch: pytest.MonkeyPatch,
                            caplog: pytest.LogCaptureFixture) -> tuple[object, list[str], list[str]]:
    """``Runner.run_streamed`` of ``app`` stopped by the app before its final output (``how``), its
    result then dropped: the final output, the types of the events the app read, and what was
    reported (unraisable exceptions and logged errors, first lines)."""
    import gc
    import sys

    from agents import Runner

    async def go() -> tuple[object, list[str]]:
        result = Runner.run_streamed(app, demo.TASK)
        seen: list[str] = []
        if how == "never read":  # asyncio.run cancels the run's task as it ends
            return result, seen
        async for event in result.stream_events():
            seen.append(event.type)
            if event.type == "run_item_stream_event" and "cancelled" not in seen:
                result.cancel(mode="after_turn" if how == "cancel after turn" else "immediate")
                seen.append("cancelled")
        return result, seen

    async def started() -> tuple[object, list[str]]:
        return Runner.run_streamed(app, demo.TASK), []

    gc.collect()
    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(
        f"{u.exc_type.__name__} in {getattr(u.object, '__qualname__', type(u.object).__name__)}"))
    caplog.clear()
    with caplog.at_level("ERROR"):
        if how == "loop closed":  # the run's task still pending when its loop closes
            loop = asyncio.new_event_loop()
            result, seen = loop.run_until_complete(started())
            loop.close()
        else:
            result, seen = asyncio.run(go())
        output = result.final_output
        del result
        gc.collect()
    return output, seen, reported + [r.getMessage().splitlines()[0] for r in caplog.records if r.levelname == "ERROR"]


@needs_sdk
@pytest.mark.parametrize("how", ["cancel", "cancel after turn", "never read", "loop closed"])
def test_streamed_run_stopped_before_its_output_ends_cancelled(how, model_server, provider, tmp_path, monkeypatch,
                                                               caplog):
    """A streamed run the app cancels (``result.cancel()``, either mode) or abandons (never reads it:
    the loop's end cancels it; its loop closed with the run pending and the result dropped) before its
    final output ends as cancelled (ERROR, ``error.type`` ``CancelledError``, stored, the probe's last
    run), as autogen's runs do, not as a success; the app sees and reports what it does uninstrumented."""

    server = model_server(demo.policy)
    plain = _cancelled_streamed_run(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), how, monkeypatch, caplog)
    assert plain[0] is None
    app, probe = _instrumented(model_server, provider, tmp_path)
    traced = _cancelled_streamed_run(app, how, monkeypatch, caplog)
    assert traced == plain
    trace_id = the_one_run_ended_cancelled(probe, tmp_path / "store")
    if how == "cancel after turn":  # the turn it was cancelled in finished: planner's handoff
        assert [s.agent for s in probe.trajectory(trace_id).steps] == ["planner"]


@needs_sdk
def test_each_item_is_converted_once_per_run(provider, exporter, tmp_path, monkeypatch):
    """Issue 32: a model call converts only the input items after those it shares with the run's last
    call (the SDK sends the conversation so far again, as new dicts), and a step's run items are
    converted once; each prompt recorded is still the whole conversation so far."""
    import json

    from aegis_probe.adapters import openai_agents_items
    from test_perf_calls import _benchmark_apps

    converted = []
    real = openai_agents_items.item_message
    monkeypatch.setattr(openai_agents_items, "item_message", lambda item: converted.append(item) or real(item))
    app, steps = _benchmark_apps().APPS["openai-agents"](), 20
    agent = app.build(steps)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
    try:
        app.play(agent, probe, steps)
    finally:
        probe.uninstrument()
    # per turn: its three new items (message, handoff call, handoff output) for the model call and the steps
    assert len(converted) <= 6 * steps, len(converted)
    prompts = [json.loads(s.attributes[sc.INPUT_MESSAGES]) for s in exporter.get_finished_spans()
               if s.name.startswith("chat")]
    # the instructions, the task, then three items per earlier turn
    assert [len(p) for p in prompts] == [2 + 3 * n for n in range(steps)]
    assert [p[0]["parts"][0]["content"] for p in prompts[:2]] == ["You are alice.", "You are bob."]
    assert prompts[-1][-3]["parts"][0]["content"] == "reply number 19, all good"
