"""AG2 adapter (ag2 0.14, the classic ``autogen`` API), in the environment of its own (.venv-ag2:
ag2 needs openai<3, the main environment has openai 3).

In the main environment only :func:`test_in_own_environment` runs: it runs this file and the
shared conformance and replay suites (their ``ag2`` cases) in .venv-ag2 and asserts they pass,
skipping with the reason when that environment is absent. Against the loopback model server.
"""

from __future__ import annotations

import pytest
from own_env import INSIDE, importable, run_in_own_env

HERE = importable("autogen.agentchat")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-ag2", "tests/test_ag2.py", "ag2")


#: The tests below need ag2: they run in .venv-ag2 (through test_in_own_environment).
needs_ag2 = pytest.mark.skipif(not HERE, reason="ag2 is not installed here (it runs in .venv-ag2)")
if HERE:
    import aegis_probe
    from aegis_probe.capture import semconv as sc
    from aegis_probe.demos import ag2 as demo
    from aegis_probe.modelserver import Reply
    from framework_checks import (blame_finds_planted_step, campaign_keeps_labelled_failures,
                                  the_one_run_ended_cancelled, uninstrument_restores_originals)


def _instrumented(model_server, provider, tmp_path, policy=None, app=None):
    server = model_server(policy or demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(exporter):
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.STEP_INDEX) is not None]
    return sorted(spans, key=lambda s: s.attributes[sc.STEP_INDEX])


@needs_ag2
def test_each_message_is_a_step(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    # The calculator's tool call and its own execution of it are two messages: two steps.
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == ["planner", "calculator", "calculator", "reviewer"]
    traj = probe.trajectory()
    assert traj.task == demo.TASK and [t.result for t in traj.steps[2].tool_calls] == ["126"]
    assert not traj.steps[2].llm_calls, "executing a tool call makes no model call"


@needs_ag2
@pytest.mark.filterwarnings("ignore:Function 'calculate' is being overridden")
def test_async_tool_in_a_sync_chat_is_traced(model_server, provider, exporter, tmp_path):
    """A sync chat runs an async tool's ``a_execute_function`` on a new loop in a new thread: still the step's tool."""
    from autogen import register_function

    app, probe = _instrumented(model_server, provider, tmp_path)
    calculator = next(a for a in app.groupchat.agents if a.name == "calculator")

    async def calculate(expression: str) -> str:
        return demo.calculate(expression)

    register_function(calculate, caller=calculator, executor=calculator, name=demo.TOOL, description="Evaluate.")
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == ["planner", "calculator", "calculator", "reviewer"]
    assert [t.result for t in traj.steps[2].tool_calls] == ["126"]


@needs_ag2
def test_async_chat_model_calls_are_in_their_steps(model_server, provider, exporter, tmp_path):
    """a_generate_oai_reply runs the client in an executor thread: the step is handed over there."""
    import asyncio

    app, probe = _instrumented(model_server, provider, tmp_path)
    user = next(a for a in app.groupchat.agents if a.name == "user")
    asyncio.run(user.a_initiate_chat(app, message=demo.TASK, silent=True))
    probe.flush()
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == ["planner", "calculator", "calculator", "reviewer"]
    assert [len(s.llm_calls) for s in traj.steps] == [1, 1, 0, 1]
    assert "126" in traj.steps[-1].output


@needs_ag2
def test_concurrent_async_chats_with_one_shared_agent_keep_their_model_calls(model_server, provider, exporter, tmp_path):
    """One assistant serving several users at once: each chat's model calls stay in its own run's steps."""
    import asyncio

    from autogen import AssistantAgent, UserProxyAgent

    server = model_server(lambda body: Reply(content="noted: " + str(body["messages"][-1].get("content"))))
    entry = {"model": "aegis-scripted", "base_url": server.base_url, "api_key": "sk-test", "max_retries": 0,
             "price": [0, 0]}
    assistant = AssistantAgent("assistant", llm_config={"config_list": [entry], "cache_seed": None})
    users = [UserProxyAgent(f"user{i}", human_input_mode="NEVER", code_execution_config=False,
                            default_auto_reply=f"more {i}") for i in range(4)]
    aegis_probe.instrument(assistant, tracer_provider=provider, store=False)

    async def chats():
        await asyncio.gather(*(u.a_initiate_chat(assistant, message=f"hello {i}", silent=True, max_turns=3)
                               for i, u in enumerate(users)))

    asyncio.run(chats())
    by_trace: dict = {}
    for span in exporter.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, []).append(span)
    assert len(by_trace) == len(users)
    for trace in by_trace.values():
        task = next(s for s in trace if s.parent is None).attributes[sc.TASK]
        calls = [s for s in trace if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
        turns = [s for s in trace if s.attributes.get(sc.AGENT_NAME) == "assistant" and sc.STEP_INDEX in s.attributes]
        assert len(calls) == len(turns) == 3, task
        assert all(f"more {task[-1]}" in s.attributes[sc.INPUT_MESSAGES] for s in calls[1:]), task


@needs_ag2
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_auto_speaker_selection_is_the_managers_not_a_step(mode, model_server, provider, exporter, tmp_path):
    """Also in ``a_initiate_chat``: the selector's ``a_generate_oai_reply`` calls the model in an executor thread."""
    import asyncio

    names = iter(["calculator", "reviewer", "reviewer"])

    def policy(body):
        system = str(body["messages"][0].get("content") or "")
        if not any(system.startswith(prompt) for prompt in demo.SYSTEM.values()):
            return Reply(content=next(names, "reviewer"))  # the speaker selector's question
        return demo.policy(body)

    from autogen import GroupChatManager

    server = model_server(policy)
    chat = demo.build_app(server.base_url, "aegis-scripted", "sk-test").groupchat
    chat.speaker_selection_method = "auto"
    app = GroupChatManager(chat, name="arithmetic", llm_config=chat.agents[1].llm_config, silent=True,
                           is_termination_msg=lambda m: demo.TERMINATION in str(m.get("content")))
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    if mode == "sync":
        demo.run_app(app, demo.TASK)
    else:
        user = next(a for a in chat.agents if a.name == "user")
        asyncio.run(user.a_initiate_chat(app, message=demo.TASK, silent=True))
    probe.flush()
    agents = [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)]
    assert set(agents) <= set(demo.AGENTS) and "calculator" in agents
    selections = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.LLM_PURPOSE) == sc.PURPOSE_SPEAKER_SELECTION]
    assert selections and all(s.attributes[sc.AGENT_NAME] == app.name for s in selections)


@needs_ag2
def test_pattern_group_chat_of_an_instrumented_agent_is_a_run(model_server, provider, exporter, tmp_path):
    """``initiate_group_chat(pattern=...)`` builds its own manager and starts the chat from the user agent:
    instrumenting a participant traces the chat."""
    from autogen import ConversableAgent
    from autogen.agentchat import initiate_group_chat
    from autogen.agentchat.group.patterns import RoundRobinPattern

    server = model_server(demo.policy)
    base = demo.build_app(server.base_url, "aegis-scripted", "sk-test").groupchat
    agents = {a.name: a for a in base.agents}
    planner, calculator, reviewer = (agents[n] for n in ("planner", "calculator", "reviewer"))
    user = ConversableAgent("user", human_input_mode="NEVER", llm_config=False)
    pattern = RoundRobinPattern(initial_agent=planner, agents=[planner, calculator, reviewer], user_agent=user)
    probe = aegis_probe.instrument(planner, tracer_provider=provider, store=tmp_path / "store")
    initiate_group_chat(pattern=pattern, messages=demo.TASK, max_rounds=5)
    probe.flush()
    traj = probe.trajectory()
    assert traj.task == demo.TASK
    # The pattern's own tool executor agent runs the calculator's tool call.
    assert [s.agent for s in traj.steps][:3] == ["planner", "calculator", "_Group_Tool_Executor"]
    assert [t.result for t in traj.steps[2].tool_calls] == ["126"]


@needs_ag2
def test_nested_chat_messages_are_steps_inside_the_outer_step(model_server, provider, exporter, tmp_path):
    from autogen import AssistantAgent

    app, probe = _instrumented(model_server, provider, tmp_path)
    reviewer = next(a for a in app.groupchat.agents if a.name == "reviewer")
    checker = AssistantAgent("checker", system_message=demo.SYSTEM["calculator"], llm_config=reviewer.llm_config)
    reviewer.register_nested_chats([{"recipient": checker, "max_turns": 1, "summary_method": "last_msg"}],
                                   trigger=lambda sender: sender is not None and sender.name == app.name)
    demo.run_app(app, demo.TASK)
    probe.flush()
    steps = _steps(exporter)
    by_id = {s.context.span_id: s for s in steps}
    checker_steps = [s for s in steps if s.attributes[sc.AGENT_NAME] == "checker"]
    assert checker_steps, "the nested chat's messages are steps of the outer run"
    parent = by_id.get(checker_steps[0].parent.span_id)
    assert parent is not None and parent.attributes[sc.AGENT_NAME] == "reviewer"
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(len(steps)))


def _tool_team(server):
    """A coder whose model asks for ``add`` until it sees a result, and a user proxy executing it."""
    from autogen import AssistantAgent, UserProxyAgent, register_function

    config = {"config_list": [{"model": "aegis-scripted", "base_url": server.base_url, "api_key": "sk-test",
                               "price": [0, 0]}], "cache_seed": None}
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="go on",
                          is_termination_msg=lambda m: "DONE" in str(m.get("content")))
    coder = AssistantAgent("coder", llm_config=config)
    reviewer = AssistantAgent("reviewer", llm_config=config)

    def add(a: int, b: int) -> int:
        return a + b

    register_function(add, caller=coder, executor=user, description="Add two numbers.")
    return user, coder, reviewer


def _tool_policy(body):
    if body["messages"][-1].get("role") == "tool":
        return Reply(content="the sum is " + str(body["messages"][-1]["content"]) + " DONE")
    return Reply(tool_calls=[("add", {"a": 2, "b": 3})])


@needs_ag2
def test_step_input_of_a_tool_executor_is_the_call_it_runs(model_server, provider, tmp_path):
    """ag2 stores a tool call as ``assistant`` whoever sent it: the executor's input is the call,
    not nothing, and its own tool result is not its next input."""
    user, coder, _ = _tool_team(model_server(_tool_policy))
    probe = aegis_probe.instrument(coder, tracer_provider=provider, store=tmp_path / "store")
    user.initiate_chat(coder, message="add 2 and 3", silent=True)
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["coder", "user", "coder"]
    assert [m.content for m in steps[1].input_messages] == ['[tool_call add("{\\"a\\": 2, \\"b\\": 3}")]']
    assert [m.content for m in steps[2].input_messages] == ["5"]


@needs_ag2
def test_step_input_in_a_group_chat_includes_others_tool_calls(model_server, provider, tmp_path):
    """A group chat with a speaker selection function: the reviewer's first input is the whole chat,
    the coder's tool call included (it was cut after that call, taken for the reviewer's own)."""
    from autogen import GroupChat, GroupChatManager

    user, coder, reviewer = _tool_team(model_server(_tool_policy))
    order = [coder, user, reviewer]
    chat = GroupChat([user, coder, reviewer], messages=[], max_round=4,
                     speaker_selection_method=lambda last, group: order[len(group.messages) - 1])
    manager = GroupChatManager(chat, llm_config=False)
    probe = aegis_probe.instrument(manager, tracer_provider=provider, store=tmp_path / "store")
    user.initiate_chat(manager, message="add 2 and 3", silent=True)
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["coder", "user", "reviewer"]
    assert ["[tool_call add(" in m.content for m in steps[1].input_messages] == [True]
    assert [m.role for m in steps[2].input_messages] == ["user", "assistant", "tool"]
    assert "[tool_call add(" in steps[2].input_messages[1].content


@needs_ag2
def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from autogen import ConversableAgent, GroupChat
    from autogen.oai.client import OpenAIClient, OpenAIWrapper

    names = [(ConversableAgent, n) for n in ("initiate_chat", "a_initiate_chat", "generate_reply", "a_generate_reply",
                                             "execute_function", "a_execute_function", "_run_async_in_thread")]
    names += [(GroupChat, "select_speaker"), (GroupChat, "a_select_speaker"), (OpenAIWrapper, "create"),
              (OpenAIClient, "create")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


@needs_ag2
def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


@needs_ag2
def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("ag2_math.py", demo, tmp_path)


@needs_ag2
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_receiving_the_termination_message_is_no_step(mode, model_server, provider, tmp_path):
    """A two-agent chat ends when its receiver's termination check meets the termination message (or
    its auto-reply limit): that agent sends nothing, so it takes no step (it was an empty last step)."""
    import asyncio

    user, coder, _ = _tool_team(model_server(_tool_policy))
    probe = aegis_probe.instrument(coder, tracer_provider=provider, store=tmp_path / "store")
    if mode == "sync":
        user.initiate_chat(coder, message="add 2 and 3", silent=True)
    else:
        asyncio.run(user.a_initiate_chat(coder, message="add 2 and 3", silent=True))
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == ["coder", "user", "coder"]
    assert traj.steps[-1].output == "the sum is 5 DONE"


@needs_ag2
def test_auto_reply_limit_ends_the_chat_without_a_step(model_server, provider, tmp_path):
    from autogen import AssistantAgent, UserProxyAgent

    server = model_server(lambda body: Reply(content="more?"))
    config = {"config_list": [{"model": "aegis-scripted", "base_url": server.base_url, "api_key": "sk-test",
                               "price": [0, 0]}], "cache_seed": None}
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="go on",
                          max_consecutive_auto_reply=1)
    assistant = AssistantAgent("assistant", llm_config=config)
    probe = aegis_probe.instrument(assistant, tracer_provider=provider, store=tmp_path / "store")
    user.initiate_chat(assistant, message="hi", silent=True)
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["assistant", "user", "assistant"]
    assert all(s.output for s in steps)


@needs_ag2
def test_legacy_function_call_result_is_its_executors_own_message(provider, tmp_path):
    """A legacy ``function_call``'s result is a ``function`` message named after the function: the
    executor's own, so not its next step's input."""
    from autogen import ConversableAgent

    def answer(agent, messages, sender, config):
        last = messages[-1]
        if last.get("role") == "function":
            return True, "the sum is " + str(last["content"])
        return True, {"content": None, "function_call": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}

    caller = ConversableAgent("caller", llm_config=False, human_input_mode="NEVER")
    caller.register_reply([ConversableAgent, None], answer)
    executor = ConversableAgent("executor", llm_config=False, human_input_mode="NEVER", default_auto_reply="thanks",
                                function_map={"add": lambda a, b: a + b})
    probe = aegis_probe.instrument(executor, tracer_provider=provider, store=tmp_path / "store")
    executor.initiate_chat(caller, message="add 2 and 3", silent=True, max_turns=3)
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["caller", "executor", "caller", "executor", "caller"]
    assert steps[0].output == steps[4].output == '[tool_call add("{\\"a\\": 2, \\"b\\": 3}")]'
    assert [m.content for m in steps[1].input_messages] == [steps[0].output]
    assert [t.result for t in steps[1].tool_calls] == ["5"]
    assert [m.content for m in steps[2].input_messages] == ["5"]
    assert [m.content for m in steps[3].input_messages] == ["the sum is 5"]


@needs_ag2
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_chat_that_raises_is_the_probes_last_run(mode, model_server, provider, tmp_path):
    """The app's exception ends the chat: it passes unchanged, and the failed chat is the probe's last
    run with its error, judged (``probe.trajectory()`` found no run, or the chat before)."""
    import asyncio

    from autogen import Agent

    class Broken(Exception):
        pass

    error = Broken("the coder's own reply function failed")
    user, coder, reviewer = _tool_team(model_server(_tool_policy))
    judged = []
    probe = aegis_probe.instrument(coder, tracer_provider=provider, store=tmp_path / "store",
                                   judge=lambda task, answer: judged.append(task) or False)
    user.initiate_chat(coder, message="add 2 and 3", silent=True)

    def broken(agent, messages=None, sender=None, config=None):
        raise error

    coder.register_reply([Agent, None], broken)
    with pytest.raises(Broken) as raised:
        if mode == "sync":
            user.initiate_chat(coder, message="add 4 and 5", silent=True)
        else:
            asyncio.run(user.a_initiate_chat(coder, message="add 4 and 5", silent=True))
    assert raised.value is error
    traj = probe.trajectory()
    assert traj.task == "add 4 and 5" and traj.error.startswith("Broken")
    assert judged == ["add 2 and 3", "add 4 and 5"]


@needs_ag2
def test_async_run_abandoned_before_its_end_ends_cancelled(model_server, tmp_path):
    """``a_run``'s events left after the first (the loop's end cancels the chat's task, held in its
    second model call): the run ends cancelled (ERROR, ``error.type`` ``CancelledError``), stored and
    the probe's last run, as autogen's; the app sees what it sees uninstrumented."""
    import asyncio
    import threading

    from autogen import ConversableAgent


    release = threading.Event()

    def policy(body):
        if len(body["messages"]) > 2:  # the second model call waits until the app has left
            release.wait(60)
        return Reply(content=f"reply {len(body['messages'])}")

    server = model_server(policy)
    config = {"config_list": [{"model": "m", "base_url": server.base_url, "api_key": "sk-test", "max_retries": 0,
                               "price": [0, 0]}], "cache_seed": None}

    def first_event(instrument: bool) -> tuple[str, object]:
        a = ConversableAgent("a", system_message="a", llm_config=config, human_input_mode="NEVER")
        b = ConversableAgent("b", system_message="b", llm_config=config, human_input_mode="NEVER")
        probe = aegis_probe.instrument(a, store=tmp_path / "store") if instrument else None

        async def go() -> str:
            response = await a.a_run(b, message="go", max_turns=3)
            async for event in response.events:
                return type(event).__name__
            return "none"

        release.clear()
        try:
            return asyncio.run(go()), probe
        finally:
            release.set()
            if probe is not None:
                probe.flush()

    assert first_event(False)[0] == "TextEvent"
    seen, probe = first_event(True)
    assert seen == "TextEvent"
    the_one_run_ended_cancelled(probe, tmp_path / "store")



@needs_ag2
def test_each_message_is_converted_once_per_run(provider, exporter, tmp_path, monkeypatch):
    """Issue 32: in a group chat the model calls' prompts and the steps' inputs share one conversion of
    each ag2 message dict (a step converts its new messages, not the conversation so far), and each
    prompt recorded is still the whole conversation so far."""
    import json

    from aegis_probe.adapters import ag2_models
    from test_perf_calls import _benchmark_apps

    converted = []
    real = ag2_models.to_neutral
    monkeypatch.setattr(ag2_models, "to_neutral", lambda m, role="user": converted.append(m) or real(m, role))
    app, steps = _benchmark_apps().APPS["ag2"](), 20
    manager = app.build(steps)
    probe = aegis_probe.instrument(manager, tracer_provider=provider, store=tmp_path / "store")
    try:
        app.play(manager, probe, steps)
    finally:
        probe.uninstrument()
    # per step at most: the new message in each agent's history and the reply; the system messages once
    assert len(converted) <= 3 * steps + 2, len(converted)
    prompts = [json.loads(s.attributes[sc.INPUT_MESSAGES]) for s in exporter.get_finished_spans()
               if s.name.startswith("chat")]
    assert [len(p) for p in prompts] == [n + 2 for n in range(steps)]  # the system message and the chat so far
    assert prompts[-1][-1]["parts"][0]["content"] == "reply number 19, all good"


@needs_ag2
def test_a_prompt_extending_the_last_reconverts_a_message_changed_in_place(provider):
    """A run's prompt that extends its last one reuses its converted messages, but not one changed
    in place since (ag2 keeps the same dicts): that one is converted again, as it is now."""
    from aegis_probe.adapters.ag2_models import neutral_messages
    from aegis_probe.capture.messages import SharedMessage
    from aegis_probe.capture.spans import start_run
    from toyrun import make_probe

    run = start_run(make_probe(provider), "chat", framework="ag2", task=None)
    token = run.attach()
    try:
        system, first = {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi", "name": "bob"}
        before = neutral_messages([system, first])
        grown = neutral_messages([system, first, {"role": "user", "content": "more", "name": "alice"}])
        assert grown[0] is before[0] and grown[1] is before[1] and type(grown[2]) is SharedMessage
        first["content"] = "hi there"  # the same dict, changed in place
        again = neutral_messages([system, first, {"role": "assistant", "content": "ok"}])
        assert again[0] is before[0] and again[1] is not before[1]
        assert [m["content"] for m in again] == ["be brief", "hi there", "ok"]
        again.append({"role": "user", "content": "not theirs"})  # a caller's list is its own
        assert len(neutral_messages([system, first])) == 2
    finally:
        run.detach(token)
        run.finish()


#: Python calls per agent step into the span path and the adapter (both modules), on the app's
#: thread, in the default configuration (``instrument(app)``: lean spans, the store).
_STEP_CALLS = 95


@needs_ag2
def test_aegis_calls_per_agent_step(tmp_path):
    """``benchmarks/apps.py``'s AG2 group chat, 10 agent steps: the trace holds every step, and the
    span path and the adapter are entered at most ``_STEP_CALLS`` times per step (content encoding,
    redaction and the shared model-call layer aside)."""
    import sys
    from collections import Counter
    from pathlib import Path

    from test_perf_calls import _SPAN_PATH, _benchmark_apps

    app, steps = _benchmark_apps().APPS["ag2"](), 10

    def run():
        manager = app.build(steps)
        probe = aegis_probe.instrument(manager, store=tmp_path / "store")
        try:
            app.play(manager, probe, steps)
            assert probe.store.flush()
        finally:
            probe.uninstrument()
        return probe

    run()  # first use: imports, caches
    modules = set(_SPAN_PATH) | {"ag2.py", "ag2_models.py"}
    entered: Counter[str] = Counter()

    def profile(frame, event, arg):
        if event == "call" and Path(frame.f_code.co_filename).name in modules:
            entered[f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        probe = run()
    finally:
        sys.setprofile(None)
    assert len(probe.trajectory().steps) == steps
    assert sum(entered.values()) / steps <= _STEP_CALLS, entered
