"""CAMEL adapter: RolePlaying, Workforce and a lone ChatAgent, driven through real camel-ai and the
real openai client against the loopback model server."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any

import pytest

pytest.importorskip("camel.agents")

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import _MISSING, get_adapter
from aegis_probe.demos import camel as demo
from aegis_probe.demos.task import EXPECTED, EXPRESSION, calculate
from aegis_probe.modelserver import Reply

API_KEY = "sk-test-key-do-not-leak-1234567890"
MODEL = "aegis-scripted"


# -- helpers ---------------------------------------------------------------------------------
def backend(server) -> Any:
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.types import ModelPlatformType

    return ModelFactory.create(
        model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=MODEL, url=server.base_url,
        api_key=API_KEY, token_counter=StubTokenCounter(),
    )


def agent(server, name: str, prompt: str, tools: list | None = None, **kwargs: Any) -> Any:
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage

    return ChatAgent(BaseMessage.make_assistant_message(name, prompt), model=backend(server), tools=tools, **kwargs)


def tool_policy(body: dict[str, Any]) -> Reply:
    """Call the agent's tool once, then answer with its result."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content=f"The total is {last['content']}.")
    return Reply(tool_calls=[(body["tools"][0]["function"]["name"], {"expression": EXPRESSION})])


def shared_memory_policy(body: dict[str, Any]) -> Reply:
    """:func:`tool_policy` for two steps sharing one memory: a tool call answers a user message only.
    The other step's tool-call message may come last (camel orders a reply's tool results after it),
    and answering that with a third tool call would leave its step waiting for a partner that never comes."""
    messages = body["messages"]
    if messages[-1]["role"] == "user":
        return Reply(tool_calls=[(body["tools"][0]["function"]["name"], {"expression": EXPRESSION})])
    result = next(m["content"] for m in reversed(messages) if m["role"] == "tool")
    return Reply(content=f"The total is {result}.")


def ours(exporter) -> list:
    return sorted((s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"),
                  key=lambda s: s.start_time)


def parent_of(span, spans) -> Any:
    by_id = {s.context.span_id: s for s in spans}
    return by_id.get(span.parent.span_id) if span.parent else None


def steps_of(spans) -> list:
    return [s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None]


def op(spans, operation: str) -> list:
    return [s for s in spans if s.attributes.get(sc.OPERATION) == operation]


def run_demo(model_server, provider, tmp_path, **kwargs: Any) -> tuple[Any, Any, str | None]:
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", **kwargs)
    answer = demo.run_app(app, demo.TASK)
    probe.flush()
    return app, probe, answer


# -- RolePlaying -----------------------------------------------------------------------------
def test_role_playing_span_tree(model_server, provider, exporter, tmp_path):
    _, probe, answer = run_demo(model_server, provider, tmp_path)
    assert EXPECTED in answer
    spans = ours(exporter)
    assert len({s.context.trace_id for s in spans}) == 1
    root = next(s for s in spans if s.parent is None)
    assert root.name == "invoke_workflow Calculator & Customer"
    assert root.attributes[sc.FRAMEWORK] == "camel" and root.attributes[sc.TASK] == demo.TASK

    steps = steps_of(spans)
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2, 3]
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["Customer", "Calculator", "Customer", "Calculator"]
    assert [s.attributes[sc.AGENT_ROLE] for s in steps] == ["user", "assistant", "user", "assistant"]
    assert all(s.name == f"invoke_agent {s.attributes[sc.AGENT_NAME]}" and parent_of(s, spans) is root for s in steps)

    chats = op(spans, sc.OP_CHAT)
    assert len(chats) == 5 and all(s.name == f"chat {MODEL}" for s in chats)
    assert all(parent_of(s, spans) in steps for s in chats)
    assert all(s.attributes[sc.USAGE_INPUT_TOKENS] > 0 and s.attributes[sc.USAGE_OUTPUT_TOKENS] > 0 for s in chats)
    calculator_chats = [s for s in chats if s.attributes[sc.AGENT_NAME] == "Calculator"]
    assert [s.attributes[sc.AGENT_CALL_INDEX] for s in calculator_chats] == [0, 1, 2]

    (tool,) = op(spans, sc.OP_TOOL)
    assert tool.name == "execute_tool calculate" and parent_of(tool, spans) is steps[1]
    assert json.loads(tool.attributes[sc.TOOL_CALL_ARGUMENTS]) == {"expression": EXPRESSION}
    assert tool.attributes[sc.TOOL_CALL_RESULT] == EXPECTED
    assert tool.attributes[sc.TOOL_CALL_ID]

    traj = probe.trajectory()
    assert traj.agents == ["Customer", "Calculator"] and traj.task == demo.TASK
    assert EXPECTED in traj.steps[1].output and traj.steps[1].tool_calls[0].result == EXPECTED
    assert traj.steps[1].usage.input_tokens == sum(
        c.attributes[sc.USAGE_INPUT_TOKENS] for c in chats if parent_of(c, spans) is steps[1])


def test_each_conversation_is_one_run(model_server, provider, exporter, tmp_path):
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    demo.run_app(app, demo.TASK)
    demo.run_app(app, demo.TASK)
    spans = ours(exporter)
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 2 and len({s.context.trace_id for s in spans}) == 2
    for root in roots:
        steps = [s for s in steps_of(spans) if s.context.trace_id == root.context.trace_id]
        assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2, 3]
    assert len(aegis_probe.load_trajectories(tmp_path / "store")) == 2


def test_probe_run_groups_rounds_without_termination(model_server, provider, exporter, tmp_path):
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    with probe.run(task="one round only"):
        app.step(app.init_chat())  # the user's loop stops before CAMEL_TASK_DONE
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes[sc.TASK] == "one round only"
    assert [s.attributes[sc.AGENT_NAME] for s in steps_of(spans)] == ["Customer", "Calculator"]
    assert len({s.context.trace_id for s in spans}) == 1


def test_critic_in_the_loop_steps_stay_in_the_conversation(model_server, provider, exporter, tmp_path):
    """With a critic in the loop its choice follows each agent's step; the last round's choice (after
    the assistant's answer to CAMEL_TASK_DONE) belongs to the conversation's run, which then ends."""
    from camel.societies import RolePlaying
    from camel.toolkits import FunctionTool

    def policy(body: dict[str, Any]) -> Reply:
        if "critic" in str(body["messages"][0].get("content")).lower():
            return Reply(content="Option 1. The only option is fine.")
        return demo.policy(body)

    server = model_server(policy)
    app = RolePlaying(assistant_role_name=demo.ASSISTANT, user_role_name=demo.USER, task_prompt=demo.TASK,
                      with_task_specify=False, with_critic_in_the_loop=True, model=backend(server),
                      assistant_agent_kwargs={"tools": [FunctionTool(calculate)]})
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    assert EXPECTED in demo.run_app(app, demo.TASK)
    spans = ours(exporter)
    assert len({s.context.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.parent is None]
    steps = steps_of(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["Customer", "critic", "Calculator", "critic"] * 2
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(8))
    assert all(parent_of(s, spans) is root for s in steps)
    assert len(probe.trajectory().steps) == 8


def test_trace_every_app_mode_groups_a_conversation_stepped_without_init_chat(model_server, provider, exporter):
    """Trace-every-app mode (no ``instrument(app)``), a society built afterwards and stepped from the
    app's own first message: its rounds are one run, not one run per agent step."""
    from camel.messages import BaseMessage

    from aegis_probe.capture.instrumentor import AegisInstrumentor

    AegisInstrumentor().instrument(tracer_provider=provider, store=False)
    try:
        server = model_server(demo.policy)
        app = demo.build_app(server.base_url, MODEL, API_KEY)
        message = BaseMessage.make_user_message(demo.USER, f"{demo.TASK} Let us start.")
        for _ in range(demo.MAX_ROUNDS):
            assistant, user = app.step(message)
            message = assistant.msgs[-1]
            if any(demo.DONE in m.content for m in user.msgs):
                break
    finally:
        AegisInstrumentor().uninstrument()
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow Calculator & Customer"
    steps = steps_of(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["Customer", "Calculator"] * 2
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2, 3]


def test_role_playing_astep(model_server, provider, exporter):
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    aegis_probe.instrument(app, tracer_provider=provider, store=False)

    async def play() -> None:
        message = await app.ainit_chat()
        for _ in range(demo.MAX_ROUNDS):
            assistant, user = await app.astep(message)
            message = assistant.msgs[-1]
            if any(demo.DONE in m.content for m in user.msgs):
                return

    asyncio.run(play())
    spans = ours(exporter)
    assert len({s.context.trace_id for s in spans}) == 1
    steps = steps_of(spans)
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2, 3]
    assert len(op(spans, sc.OP_TOOL)) == 1 and all(parent_of(c, spans) in steps for c in op(spans, sc.OP_CHAT))


def test_content_capture_off(model_server, provider, exporter, tmp_path):
    run_demo(model_server, provider, tmp_path, capture_content=False)
    spans = ours(exporter)
    assert spans
    for s in spans:
        for key in (sc.INPUT_MESSAGES, sc.OUTPUT_MESSAGES, sc.TASK, sc.TOOL_CALL_ARGUMENTS, sc.TOOL_CALL_RESULT):
            assert key not in s.attributes
    exporter.clear()
    aegis_probe.uninstrument()
    run_demo(model_server, provider, tmp_path)
    spans = ours(exporter)
    step_inputs = [json.loads(s.attributes[sc.INPUT_MESSAGES]) for s in steps_of(spans)]
    assert step_inputs[1][0]["name"] == "Customer" and "Instruction" in step_inputs[1][0]["parts"][0]["content"]
    assert API_KEY not in json.dumps([dict(s.attributes) for s in spans], default=str)


# -- lone ChatAgent --------------------------------------------------------------------------
def test_lone_agent_with_tool(model_server, provider, exporter):
    server = model_server(tool_policy)
    calc = agent(server, "Calculator", "You compute.", tools=[calculate])
    aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    response = calc.step("What do 3 pens at 17 and 3 notebooks at 25 cost?")
    assert EXPECTED in response.msgs[0].content
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_agent Calculator" and root.attributes[sc.FRAMEWORK] == "camel"
    (step,) = steps_of(spans)
    assert step.attributes[sc.STEP_INDEX] == 0 and parent_of(step, spans) is root
    chats, (tool,) = op(spans, sc.OP_CHAT), op(spans, sc.OP_TOOL)
    assert len(chats) == 2 and all(parent_of(s, spans) is step for s in chats)
    assert chats[0].attributes[sc.RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert parent_of(tool, spans) is step and tool.attributes[sc.TOOL_CALL_RESULT] == EXPECTED
    out = json.loads(chats[0].attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]
    assert out["type"] == "tool_call" and out["name"] == "calculate"

    calc.step("And again?")  # a lone agent: one run per step call
    assert len({s.context.trace_id for s in ours(exporter)}) == 2


def test_step_timeout_thread_keeps_context(model_server, provider, exporter):
    threads: list[int] = []

    def calculate_here(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        threads.append(threading.get_ident())
        return calculate(expression)

    server = model_server(tool_policy)
    calc = agent(server, "Calculator", "You compute.", tools=[calculate_here], step_timeout=30)
    calc.step("warm-up, uninstrumented")
    aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    calc.step("What do 3 pens at 17 and 3 notebooks at 25 cost?")
    assert threads and all(t != threading.get_ident() for t in threads), "step_timeout runs the step in a pool thread"
    spans = ours(exporter)
    (step,) = steps_of(spans)
    assert len(op(spans, sc.OP_CHAT)) == 2
    assert all(parent_of(s, spans) is step for s in op(spans, sc.OP_CHAT) + op(spans, sc.OP_TOOL))
    assert len({s.context.trace_id for s in spans}) == 1


@pytest.mark.parametrize("pool_call", ["_step_impl", "_execute_tool_from_stream_data"])
def test_one_agent_stepped_from_two_threads_at_once(pool_call, model_server, provider, exporter, monkeypatch):
    """Two steps of one agent at once, each handing work to a pool thread (``step_timeout``'s step,
    a streamed tool call): both hand over before either pool thread starts, and each pool thread's
    spans still land in its own step's run."""
    import concurrent.futures

    submit = concurrent.futures.ThreadPoolExecutor.submit
    both_handed_over = threading.Barrier(2, timeout=20)

    def submit_together(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", None) == pool_call:
            both_handed_over.wait()
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", submit_together)
    server = model_server(shared_memory_policy)
    if pool_call == "_step_impl":
        calc = agent(server, "Calculator", "You compute.", tools=[calculate], step_timeout=30)
    else:
        calc = streaming_calculator(server.base_url)
    aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    streamed = pool_call != "_step_impl"
    threads = [threading.Thread(target=lambda task: consume(calc.step(task)) if streamed else calc.step(task),
                                args=(f"{STREAM_TASK} (customer {i})",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = ours(exporter)
    runs = {}
    for s in spans:
        runs.setdefault(s.context.trace_id, []).append(s)
    assert len(runs) == 2
    for trace in runs.values():
        (step,) = steps_of(trace)
        tools, chats = op(trace, sc.OP_TOOL), op(trace, sc.OP_CHAT)
        assert len(chats) == len(tools) + 1  # each tool result answered (the memory is shared)
        assert all(parent_of(s, trace) is step for s in tools + chats)


@pytest.mark.parametrize("app_kind", ["lone agent", "role playing", "role playing in probe.run", "workforce"])
def test_step_wrapper_is_the_only_frame_on_camels_stack_walk(app_kind, model_server, provider, exporter, monkeypatch):
    """``_step_impl`` walks the whole stack each step: without step_timeout only ``step``'s wrapper
    is on it (a conversation's run is attached by the step wrapper, not by wrapping ``RolePlaying.step``;
    a workforce's run by ``process_task`` alone, ``process_task_async`` inside it passing straight through),
    and a sync step's wrapper calls ``_step_impl`` in place of ``ChatAgent.step``: the walk is as deep as
    without aegis."""
    import inspect
    import sys

    from camel.agents import ChatAgent
    from camel.messages import BaseMessage

    from adapters import camel as adapter_module

    ours_on_stack: list[list[str]] = []
    depths: list[int] = []
    walk = ChatAgent._is_called_from_registered_toolkit

    def recording(self: Any) -> bool:
        frame, names = sys._getframe(1), []
        while frame is not None:
            if frame.f_code.co_filename == adapter_module.__file__:
                names.append(frame.f_code.co_name)
            frame = frame.f_back
        ours_on_stack.append(names)
        depths.append(len(inspect.stack(0)))
        return walk(self)

    monkeypatch.setattr(ChatAgent, "_is_called_from_registered_toolkit", recording)
    if app_kind == "lone agent":
        server = model_server(lambda body: Reply(content="Hello."))
        bare = ChatAgent(BaseMessage.make_assistant_message("Greeter", "You greet."), model=backend(server))
        bare.step("Hi")
        bare_depths, depths[:], ours_on_stack[:] = depths[:], [], []
        app = ChatAgent(BaseMessage.make_assistant_message("Greeter", "You greet."), model=backend(server))
        aegis_probe.instrument(app, tracer_provider=provider, store=False)
        app.step("Hi")
    elif app_kind == "workforce":
        from camel.tasks import Task

        server = model_server(workforce_policy)
        assert EXPECTED in build_workforce(server).process_task(Task(content=demo.TASK, id="0")).result
        bare_depths, depths[:], ours_on_stack[:] = depths[:], [], []
        app = build_workforce(server)
        aegis_probe.instrument(app, tracer_provider=provider, store=False)
        assert EXPECTED in app.process_task(Task(content=demo.TASK, id="0")).result
        assert {tuple(names) for names in ours_on_stack} == {("_step", "_process_task"), ("_astep", "_process_task")}
        assert depths == [d + 1 for d in bare_depths]  # the task's run: process_task's wrapper
        return
    else:
        server = model_server(demo.policy)
        demo.run_app(demo.build_app(server.base_url, MODEL, API_KEY), demo.TASK)
        bare_depths, depths[:], ours_on_stack[:] = depths[:], [], []
        app = demo.build_app(server.base_url, MODEL, API_KEY)
        probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
        if app_kind == "role playing":
            demo.run_app(app, demo.TASK)
        else:
            with probe.run(demo.TASK):
                demo.run_app(app, demo.TASK)
    spans = ours(exporter)
    assert ours_on_stack and ours_on_stack == [["_step"]] * len(ours_on_stack)
    assert len(steps_of(spans)) == len(ours_on_stack) and len({s.context.trace_id for s in spans}) == 1
    assert depths == bare_depths


# -- Workforce -------------------------------------------------------------------------------
def workforce_policy(body: dict[str, Any]) -> Reply:
    """Planner decomposes into one subtask, Coordinator assigns it, the worker uses the tool."""
    last = body["messages"][-1]
    text = str(last.get("content"))
    if last["role"] == "tool":
        return Reply(content=json.dumps({"content": f"The total is {last['content']}.", "failed": False}))
    if "<tasks>" in text:
        return Reply(content=f"<tasks>\n<task>Compute {EXPRESSION} with the calculate tool.</task>\n</tasks>")
    if "assignee_id" in text:
        worker = re.findall(r"<([0-9a-f\-]{36})>", text)[0]
        task_ids = re.findall(r"Task ID: (\S+)", text)
        assignments = [{"task_id": t, "assignee_id": worker, "dependencies": []} for t in task_ids]
        return Reply(content=json.dumps({"assignments": assignments}))
    if body.get("tools"):
        return Reply(tool_calls=[("calculate", {"expression": EXPRESSION})])
    return Reply(content=json.dumps({"reasoning": "The result is correct.", "quality_score": 95, "issues": []}))


def build_workforce(server) -> Any:
    from camel.societies.workforce import Workforce

    wf = Workforce(
        "Shop team",
        coordinator_agent=agent(server, "Coordinator", "You coordinate workers."),
        task_agent=agent(server, "Planner", "You plan tasks."),
        new_worker_agent=agent(server, "Helper", "You help."),
    )
    wf.add_single_agent_worker("Calculator: computes prices with the calculate tool",
                               worker=agent(server, "Calculator", "You compute.", tools=[calculate]))
    return wf


def check_workforce_trace(exporter) -> None:
    spans = ours(exporter)
    assert len({s.context.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow Shop team"
    steps = steps_of(spans)
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(len(steps)))
    assert {"Planner", "Coordinator", "Calculator"} <= {s.attributes[sc.AGENT_NAME] for s in steps}
    (tool,) = op(spans, sc.OP_TOOL)
    assert parent_of(tool, spans).attributes[sc.AGENT_NAME] == "Calculator"  # a clone of the registered worker
    assert all(parent_of(c, spans) in steps for c in op(spans, sc.OP_CHAT))


@pytest.mark.parametrize("entry", ["process_task", "process_task_async"])
def test_workforce(entry, model_server, provider, exporter, tmp_path):
    from camel.tasks import Task

    server = model_server(workforce_policy)
    wf = build_workforce(server)
    probe = aegis_probe.instrument(wf, tracer_provider=provider, store=tmp_path / "store")
    assert probe.apps[0].agents == ("Coordinator", "Planner", "Calculator")
    task = Task(content=demo.TASK, id="0")
    result = wf.process_task(task) if entry == "process_task" else asyncio.run(wf.process_task_async(task))
    assert EXPECTED in result.result
    check_workforce_trace(exporter)
    traj = probe.trajectory()
    assert traj.task == demo.TASK and EXPECTED in (traj.outcome.answer or EXPECTED)
    assert any(t.name == "calculate" for s in traj.steps for t in s.tool_calls)


def failing_worker_policy(strategy: str):
    """:func:`workforce_policy`, but the worker gives up on its first attempt; the planner's failure
    analysis answers with ``strategy`` (``replan``: a reworded task; ``reassign``: the coordinator assigns again)."""
    attempts: list[str] = []

    def policy(body: dict[str, Any]) -> Reply:
        text = str(body["messages"][-1].get("content"))
        if "N/A (task failed)" in text:  # the task planner's failure analysis
            return Reply(content=json.dumps({
                "reasoning": "The calculator did not use its tool.", "recovery_strategy": strategy,
                "modified_task_content": f"Evaluate {EXPRESSION} with the calculate tool." if strategy == "replan" else None,
                "issues": ["no tool used"]}))
        if body.get("tools") and body["messages"][-1]["role"] != "tool":
            attempts.append(text)
            if len(attempts) == 1:
                return Reply(content=json.dumps({"content": "I cannot compute this.", "failed": True}))
        return workforce_policy(body)

    return policy


@pytest.mark.parametrize("strategy", ["replan", "reassign"])
def test_workforce_failure_handling_turns_are_steps(strategy, model_server, provider, exporter, tmp_path):
    """A worker's task fails: the task planner's failure analysis (and, to reassign, the coordinator's
    new assignment) are steps between the failed attempt and the retry, in one trace."""
    from camel.tasks import Task

    server = model_server(failing_worker_policy(strategy))
    wf = build_workforce(server)
    probe = aegis_probe.instrument(wf, tracer_provider=provider, store=tmp_path / "store")
    result = wf.process_task(Task(content=demo.TASK, id="0"))
    assert EXPECTED in result.result
    check_workforce_trace(exporter)
    traj = probe.trajectory()
    handling = ["Planner"] if strategy == "replan" else ["Planner", "Coordinator"]
    assert [s.agent for s in traj.steps] == ["Planner", "Coordinator", "Calculator", *handling, "Calculator", "Planner"]
    failed, analysis, retry = traj.steps[2], traj.steps[3], traj.steps[3 + len(handling)]
    assert json.loads(failed.output)["failed"] is True and not failed.tool_calls
    assert "I cannot compute this." in " ".join(m.content for m in analysis.input_messages)
    assert json.loads(analysis.output)["recovery_strategy"] == strategy
    if strategy == "reassign":
        assert "assignments" in json.loads(traj.steps[4].output)
    else:  # the retry works on the planner's reworded task
        assert f"Evaluate {EXPRESSION} with the calculate tool." in " ".join(m.content for m in retry.input_messages)
    assert [t.name for t in retry.tool_calls] == ["calculate"] and json.loads(retry.output)["failed"] is False
    assert len(op(ours(exporter), sc.OP_CHAT)) == len(server.requests)


def test_exact_replay_of_a_workforce_run(model_server, tmp_path):
    """camel names the workers by a fresh ``uuid4`` in every built workforce, in the planner's and
    coordinator's prompts and in the coordinator's assignments (twice here: a failed attempt is
    reassigned); exact replay matches them up and hands the new workforce its own workers' ids."""
    from camel.tasks import Task

    from aegis_probe.apps import AppSpec
    from aegis_probe.counterfactual import replay
    from aegis_probe.storage.store import TraceStore

    class Endpoint:
        def __init__(self, base_url: str) -> None:
            self.base_url = base_url

    built: list[Any] = []

    def build(base_url: str, model: str, api_key: str) -> Any:
        built.append(build_workforce(Endpoint(base_url)))
        return built[-1]

    def run(wf: Any, task: str) -> str:
        return wf.process_task(Task(content=task, id="0")).result

    store = TraceStore(tmp_path / "store")
    server = model_server(failing_worker_policy("reassign"))
    wf = build(server.base_url, MODEL, API_KEY)
    probe = aegis_probe.instrument(wf, store=store)
    answer = run(wf, demo.TASK)
    probe.flush()
    probe.uninstrument()
    result = replay(probe.last_trace_id, AppSpec(build, run), store=store)
    assert result.exact, result.divergence or result.error
    assert result.live_calls == 0 and result.replayed_calls == len(server.requests)
    assert EXPECTED in result.answer and result.answer == answer
    (recorded_worker,), (replayed_worker,) = ([child.node_id for child in wf._children] for wf in built)
    assert recorded_worker != replayed_worker
    assignments = [s.output for s in result.trajectory.steps if s.agent == "Coordinator"]
    assert len(assignments) == 2 and all(replayed_worker in a and recorded_worker not in a for a in assignments)


# -- robustness ------------------------------------------------------------------------------
def test_uninstrument_restores_every_patch(model_server, provider, exporter, tmp_path):
    adapter = get_adapter("camel")
    adapter.install()
    patched = adapter._patcher.patched()
    names = {f"{owner.__qualname__}.{name}" for owner, name, *_ in patched}
    assert {"ChatAgent.step", "ChatAgent.astep", "ModelManager.run", "ModelManager.arun", "RolePlaying.init_chat",
            "Workforce.process_task", "ChatAgent._execute_tool_from_stream_data"} <= names
    aegis_probe.uninstrument()
    for owner, name, saved in patched:
        if saved is _MISSING:
            assert name not in vars(owner)
        else:
            assert vars(owner)[name] is saved, f"{owner.__qualname__}.{name}"
    server = model_server(tool_policy)
    calc = agent(server, "Calculator", "You compute.", tools=[calculate])
    probe = aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    probe.uninstrument()
    calc.step("untraced")
    assert ours(exporter) == []


@pytest.mark.parametrize("target", ["start_step", "start_tool", "start_run"])
def test_hook_errors_never_reach_app(target, model_server, provider, monkeypatch, caplog, tmp_path):
    import aegis_probe.adapters.camel as camel_adapter

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("hook failure")

    monkeypatch.setattr(camel_adapter, target, boom)
    monkeypatch.setattr(camel_adapter.CamelCodec, "response", boom)
    _, _, answer = run_demo(model_server, provider, tmp_path)
    assert EXPECTED in answer
    assert "error in camel" in caplog.text or "error in llm" in caplog.text


def test_prompt_conversion_converts_only_what_extends_the_conversation():
    """camel rebuilds every prompt's message dicts: the codec converts only the new ones, shares the
    plain ones across calls, and gives what a fresh conversion gives, also after an edit."""
    from camel.prompts import TextPrompt

    from adapters import camel as adapter_module
    from aegis_probe.capture.messages import SharedMessage

    codec = adapter_module.CamelCodec()
    call = {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "3+4"}'}}
    history = [{"role": "system", "content": TextPrompt("You compute.")}, {"role": "user", "content": "3 + 4?"},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "content": "7", "tool_call_id": "c1"}, {"role": "assistant", "content": "7", "name": "Calc"}]

    def convert(prompt: list[dict[str, Any]], fresh: bool = False) -> list[dict[str, Any]]:
        if fresh:
            adapter_module._PROMPTS.clear()
        return codec.request(([dict(m) for m in prompt],), {})  # new dicts for every call, as camel makes them

    expected = [convert(history[:n], fresh=True) for n in range(1, len(history) + 1)]
    assert expected[-1][2] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "name": "calculate", "arguments": '{"expression": "3+4"}'}]}
    assert type(expected[-1][0]["content"]) is str and expected[-1][4]["name"] == "Calc"
    adapter_module._PROMPTS.clear()
    seen = [convert(history[:n]) for n in range(1, len(history) + 1)]
    assert seen == expected
    assert all(m is seen[0][0] for m in (s[0] for s in seen)) and type(seen[0][0]) is SharedMessage
    assert seen[-1][3] is seen[-2][3] and seen[-1][2] is not seen[-2][2]  # tool calls are made anew each call
    edited = [*history[:1], {"role": "user", "content": "3 + 5?"}, *history[2:]]
    assert convert(edited) == convert(edited, fresh=True) != seen[-1]


def test_app_exceptions_propagate(model_server, provider, exporter):
    from pydantic import ValidationError

    server = model_server(tool_policy)
    calc = agent(server, "Calculator", "You compute.")
    aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    with pytest.raises(ValidationError):
        calc.step(None)  # camel itself rejects the message
    spans = ours(exporter)
    assert spans and all(s.status.status_code.name == "ERROR" for s in spans)
    assert {s.attributes[sc.ERROR_TYPE] for s in spans} == {"ValidationError"}


def test_open_conversation_ends_on_uninstrument(model_server, provider, exporter):
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    app.step(app.init_chat())
    assert not [s for s in ours(exporter) if s.parent is None], "the conversation is still open"
    probe.uninstrument()
    (root,) = [s for s in ours(exporter) if s.parent is None]
    assert len(steps_of(ours(exporter))) == 2 and probe.last_run is not None


def test_uninstrument_during_a_step_ends_the_conversation_after_it(model_server, provider, exporter, tmp_path):
    """``uninstrument()`` from another thread while the Calculator's tool runs: the conversation's run
    ends when that step does (not before it), so the stored run holds the step; the app goes on untraced."""
    from camel.toolkits import FunctionTool

    in_tool, go_on = threading.Event(), threading.Event()

    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        in_tool.set()
        go_on.wait(20)
        return demo.calculate(expression)

    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    app.assistant_agent.remove_tool("calculate")
    app.assistant_agent.add_tool(FunctionTool(calculate))
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    answers: list[str | None] = []
    player = threading.Thread(target=lambda: answers.append(demo.run_app(app, demo.TASK)))
    player.start()
    assert in_tool.wait(20)
    probe.uninstrument()
    go_on.set()
    player.join()
    assert answers and EXPECTED in answers[0]
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert [s.attributes[sc.AGENT_NAME] for s in steps_of(spans)] == ["Customer", "Calculator"]
    assert max(s.end_time for s in spans) == root.end_time
    (stored,) = aegis_probe.load_trajectories(tmp_path / "store")
    assert [s.agent for s in stored.steps] == ["Customer", "Calculator"]
    assert stored.steps[1].tool_calls[0].result == EXPECTED


# -- streaming (stream=True in the model config) ----------------------------------------------
def streaming_calculator(base_url: str, model: str = MODEL, api_key: str = API_KEY, *, stream: bool = True) -> Any:
    """A lone calculator ChatAgent with the tool, on a (streaming) OpenAI-compatible backend."""
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.types import ModelPlatformType

    model_backend = ModelFactory.create(
        model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=model, url=base_url, api_key=api_key,
        token_counter=StubTokenCounter(), model_config_dict={"stream": stream},
    )
    return ChatAgent(BaseMessage.make_assistant_message("Calculator", "You compute."), model=model_backend,
                     tools=[calculate], stream_accumulate=False)


STREAM_TASK = "What do 3 pens at 17 and 3 notebooks at 25 cost?"


def consume(response: Any) -> str:
    """What an app streaming a step's response reads: the pieces, in order (camel's delta mode)."""
    return "".join(m.content for partial in response for m in partial.msgs)


async def aconsume(response: Any) -> str:
    return "".join([m.content async for partial in response for m in partial.msgs])


def run_streaming(calc: Any, task: str = STREAM_TASK) -> str:
    """``run_app`` of the streaming calculator: one step, its stream consumed."""
    return consume(calc.step(task))


def _chat_view(span: Any) -> tuple:
    attrs = span.attributes
    return (json.loads(attrs[sc.OUTPUT_MESSAGES]), attrs[sc.USAGE_INPUT_TOKENS], attrs[sc.USAGE_OUTPUT_TOKENS],
            attrs[sc.RESPONSE_FINISH_REASONS])


@pytest.mark.parametrize("entry", ["step", "astep"])
def test_streaming_agent_gets_the_same_chat_spans(entry, model_server, provider, exporter):
    """The same agent and model, without and with ``stream=True``: equal chat spans and step output."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    plain_exporter = InMemorySpanExporter()
    plain_provider = type(provider)()
    plain_provider.add_span_processor(SimpleSpanProcessor(plain_exporter))
    plain = streaming_calculator(model_server(tool_policy).base_url, stream=False)
    probe = aegis_probe.instrument(plain, tracer_provider=plain_provider, store=False)
    expected = plain.step(STREAM_TASK).msgs[0].content
    probe.uninstrument()

    uninstrumented = consume(streaming_calculator(model_server(tool_policy).base_url).step(STREAM_TASK))
    calc = streaming_calculator(model_server(tool_policy).base_url)
    aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    if entry == "step":
        response = calc.step(STREAM_TASK)
        assert not ours(exporter), "the step stays open until its stream is consumed"
        text = consume(response)
    else:
        text = _astep_text(calc)
    assert text == uninstrumented and EXPECTED in text  # the app's stream is unchanged
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    (step,) = steps_of(spans)
    assert parent_of(step, spans) is root and json.loads(step.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] == expected
    chats = op(spans, sc.OP_CHAT)
    assert len(chats) == 2 and all(parent_of(c, spans) is step for c in chats)
    assert [_chat_view(c) for c in chats] == [_chat_view(c) for c in op(plain_exporter.get_finished_spans(), sc.OP_CHAT)]
    assert chats[0].attributes[sc.RESPONSE_FINISH_REASONS] == ("tool_calls",)
    (tool,) = op(spans, sc.OP_TOOL)  # run in a pool thread (step) or a task (astep) while streaming
    (plain_tool,) = op(plain_exporter.get_finished_spans(), sc.OP_TOOL)
    assert parent_of(tool, spans) is step and tool.attributes[sc.TOOL_CALL_RESULT] == EXPECTED
    assert json.loads(tool.attributes[sc.TOOL_CALL_ARGUMENTS]) == json.loads(plain_tool.attributes[sc.TOOL_CALL_ARGUMENTS])
    assert tool.attributes[sc.TOOL_CALL_ID] == json.loads(chats[0].attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["id"]


def _astep_text(calc: Any) -> str:
    async def go() -> str:
        return await aconsume(await calc.astep(STREAM_TASK))

    return asyncio.run(go())


def test_streaming_injection_reaches_the_app_as_chunks(model_server, provider, exporter):
    from aegis_probe.capture.interception import ModelCall, LLMResponse

    class Corrupt:
        """Replaces the final answer (tool calls pass)."""

        def before(self, call: ModelCall) -> None:
            return None

        def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
            if response.tool_calls:
                return response
            return LLMResponse(content="The total is 999 coins.", input_tokens=response.input_tokens,
                               output_tokens=response.output_tokens, finish_reason="stop")

    server = model_server(tool_policy)
    calc = streaming_calculator(server.base_url)
    probe = aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    with probe.intercept(Corrupt()):
        assert run_streaming(calc) == "The total is 999 coins."
    assert "999" in calc.memory.get_context()[0][-1]["content"]  # the agent's own memory agrees
    last_chat = op(ours(exporter), sc.OP_CHAT)[-1]
    assert json.loads(last_chat.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "The total is 999 coins."


def test_exact_replay_of_a_streaming_run(model_server, tmp_path):
    from aegis_probe.apps import AppSpec
    from aegis_probe.counterfactual import replay
    from aegis_probe.storage.store import TraceStore

    store = TraceStore(tmp_path / "store")
    calc = streaming_calculator(model_server(tool_policy).base_url)
    probe = aegis_probe.instrument(calc, store=store)
    answer = run_streaming(calc)
    probe.flush()
    probe.uninstrument()
    result = replay(probe.last_trace_id, AppSpec(streaming_calculator, run_streaming), store=store)
    assert result.exact, result.divergence or result.error
    assert result.live_calls == 0 and result.replayed_calls == 2
    assert result.trajectory.steps[0].output == result.original.steps[0].output == answer


def test_failing_tool_while_streaming_marks_its_span(model_server, provider, exporter):
    from camel.toolkits import FunctionTool

    def calculate(expression: str) -> str:  # noqa: ARG001 - same schema as the real tool
        """Evaluate an arithmetic expression."""
        raise ZeroDivisionError("no")

    calc = streaming_calculator(model_server(tool_policy).base_url)
    calc.remove_tool("calculate")
    calc.add_tool(FunctionTool(calculate))
    aegis_probe.instrument(calc, tracer_provider=provider, store=False)
    run_streaming(calc)
    (tool,) = op(ours(exporter), sc.OP_TOOL)
    assert tool.status.status_code.name == "ERROR"
    assert "Error executing tool 'calculate'" in tool.attributes[sc.TOOL_CALL_RESULT]
