"""AutoGen apps as other teams write them (real autogen-agentchat, the real openai client on the
loopback model server): conditions the adapter's other tests do not cover."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

pytest.importorskip("autogen_agentchat")

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore


def _client_info() -> Any:
    from autogen_core.models import ModelFamily, ModelInfo

    return ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)


def _client(server: Any) -> Any:
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    return OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="sk-test", model_info=_client_info())


def _by_system_prompt(body: dict[str, Any]) -> Reply:
    """Each agent answers with its system prompt; the society's summary says so."""
    first = body["messages"][0]
    return Reply(content=f"{first['content']} spoke." if first.get("role") == "system" else "Summary.")


def test_inner_agent_named_like_its_society_has_its_own_step(model_server, tmp_path):
    """A ``SocietyOfMindAgent`` whose inner team has an agent of the same name (apps reuse names such
    as "assistant"): the inner agent's turn is a step of its own, not part of the society's step."""
    from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    client = _client(model_server(_by_system_prompt))
    inner = RoundRobinGroupChat([AssistantAgent("writer", model_client=client, system_message="inner writer"),
                                 AssistantAgent("critic", model_client=client, system_message="critic")],
                                name="inner", termination_condition=MaxMessageTermination(3))
    society = SocietyOfMindAgent("writer", team=inner, model_client=client)
    outer = RoundRobinGroupChat([society, AssistantAgent("editor", model_client=client, system_message="editor")],
                                name="outer", termination_condition=MaxMessageTermination(3))
    probe = aegis_probe.instrument(outer, store=tmp_path / "store")
    asyncio.run(outer.run(task="Write one line."))
    steps = probe.trajectory().steps
    assert [(s.agent, s.path, s.output) for s in steps] == [
        ("writer", ["outer"], "Summary."),
        ("writer", ["outer", "inner"], "inner writer spoke."),
        ("critic", ["outer", "inner"], "critic spoke."),
        ("editor", ["outer"], "editor spoke."),
    ]
    assert [len(s.llm_calls) for s in steps] == [1, 1, 1, 1]
    assert [s.index for s in steps] == [0, 1, 2, 3]


def test_wrapper_agent_of_the_same_name_is_one_step(model_server, tmp_path):
    """``MessageFilterAgent`` wraps an agent of its own name (as autogen's GraphFlow docs do): the
    wrapper's turn is one step holding the inner agent's model call."""
    from autogen_agentchat.agents import AssistantAgent, MessageFilterAgent, MessageFilterConfig, PerSourceFilter
    from autogen_agentchat.teams import DiGraphBuilder, GraphFlow

    client = _client(model_server(_by_system_prompt))
    drafter = AssistantAgent("drafter", model_client=client, system_message="drafter")
    inner = AssistantAgent("checker", model_client=client, system_message="checker")
    checker = MessageFilterAgent(name="checker", wrapped_agent=inner, filter=MessageFilterConfig(
        per_source=[PerSourceFilter(source="drafter", position="last", count=1)]))
    flow = GraphFlow([drafter, checker], graph=DiGraphBuilder().add_node(drafter).add_node(checker).add_edge(drafter, checker).build())
    probe = aegis_probe.instrument(flow, store=tmp_path / "store")
    asyncio.run(flow.run(task="Write one line."))
    steps = probe.trajectory().steps
    assert [(s.index, s.agent, s.output, len(s.llm_calls)) for s in steps] == [
        (0, "drafter", "drafter spoke.", 1), (1, "checker", "checker spoke.", 1)]


@pytest.mark.parametrize("inner_name", ["checker", "checker_inner"])
def test_filtered_agent_step_records_the_messages_its_agent_saw(model_server, tmp_path, inner_name):
    """A ``MessageFilterAgent``'s turn is one step (its inner agent named like it or not, as autogen's
    docs name it ``agent_a_inner``), whose input is what the inner agent got (the filtered messages),
    not what the team sent the wrapper: the trajectory shows what the agent acted on."""
    from autogen_agentchat.agents import AssistantAgent, MessageFilterAgent, MessageFilterConfig, PerSourceFilter
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    server = model_server(_by_system_prompt)
    client = _client(server)
    drafter = AssistantAgent("drafter", model_client=client, system_message="drafter")
    checker = MessageFilterAgent(name="checker", wrapped_agent=AssistantAgent(inner_name, model_client=client, system_message="checker"),
                                 filter=MessageFilterConfig(per_source=[PerSourceFilter(source="drafter", position="last", count=1)]))
    team = RoundRobinGroupChat([drafter, checker], termination_condition=MaxMessageTermination(4))
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    asyncio.run(team.run(task="Write one line."))
    traj = probe.trajectory()
    steps = traj.steps
    inputs = [[(m.name, m.content) for m in s.input_messages] for s in steps]
    assert [(s.agent, len(s.llm_calls)) for s in steps] == [("drafter", 1), ("checker", 1), ("drafter", 1)]
    chats = [r for r in TraceStore(tmp_path / "store").trace(traj.trace_id) if r.attributes.get(sc.OPERATION) == "chat"]
    assert [r.attributes[sc.AGENT_NAME] for r in sorted(chats, key=lambda r: r.start_ns)] == ["drafter", "checker", "drafter"]
    assert inputs == [[("user", "Write one line.")], [("drafter", "drafter spoke.")], [(inner_name, "checker spoke.")]]
    checker_prompt = server.requests[1]["messages"]
    assert [m["content"] for m in checker_prompt[1:]] == ["drafter spoke."]  # what the model was asked, too


def test_swarm_handoff_to_the_user_and_resume(model_server, tmp_path):
    """A ``Swarm`` stops at a handoff to the user (``HandoffTermination``) and resumes with the user's
    ``HandoffMessage``: two runs, each its agents' turns with the handoff tool calls in them."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import HandoffTermination, TextMentionTermination
    from autogen_agentchat.messages import HandoffMessage
    from autogen_agentchat.teams import Swarm

    def policy(body: dict[str, Any]) -> Reply:
        system, last = body["messages"][0]["content"], body["messages"][-1]
        if system == "travel":
            told = any("Paris" in str(m.get("content")) for m in body["messages"])
            return Reply(tool_calls=[("transfer_to_flights" if told else "transfer_to_user", {})])
        if last.get("role") == "tool":
            return Reply(content="Booked. TERMINATE")
        return Reply(tool_calls=[("book", {"city": "Paris"})])

    def book(city: str) -> str:
        return f"seat to {city}"

    client = _client(model_server(policy))
    travel = AssistantAgent("travel", model_client=client, system_message="travel", handoffs=["flights", "user"])
    flights = AssistantAgent("flights", model_client=client, system_message="flights", tools=[book], handoffs=["travel"])
    team = Swarm([travel, flights], termination_condition=HandoffTermination(target="user") | TextMentionTermination("TERMINATE"))
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    trajs = []

    async def go() -> None:  # one event loop: the team is bound to it
        for task in ("Book me a trip.", HandoffMessage(source="user", target="travel", content="To Paris, please.")):
            await team.run(task=task)
            trajs.append(probe.trajectory())

    asyncio.run(go())
    asked, resumed = trajs
    assert asked.trace_id != resumed.trace_id and resumed.task == "To Paris, please."
    assert [(s.agent, [c.name for c in s.tool_calls]) for s in asked.steps] == [("travel", ["transfer_to_user"])]
    assert [(s.index, s.agent, [c.name for c in s.tool_calls]) for s in resumed.steps] == [
        (0, "travel", ["transfer_to_flights"]), (1, "flights", ["book"]), (2, "flights", [])]
    assert resumed.steps[1].tool_calls[0].result == "seat to Paris" and resumed.steps[2].output == "Booked. TERMINATE"


def test_graph_flow_loop_and_parallel_fan_out(model_server, tmp_path):
    """A ``GraphFlow`` loops writer -> critic on a conditional edge until approval, then fans out to
    two agents running at once and joins: every turn a step, each model call under its own agent's."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import DiGraphBuilder, GraphFlow

    reviews = []

    def policy(body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        if system == "critic":
            reviews.append(system)
            return Reply(content="APPROVE" if len(reviews) == 2 else "REVISE")
        return Reply(content=f"{system} done.")

    server = model_server(policy)
    server.latency = 0.05  # the fan-out's two calls overlap
    client = _client(server)
    writer, critic, left, right, join = (AssistantAgent(name, model_client=client, system_message=name)
                                        for name in ("writer", "critic", "left", "right", "join"))
    graph = DiGraphBuilder()
    for agent in (writer, critic, left, right, join):
        graph.add_node(agent)
    graph.add_edge(writer, critic)
    graph.add_edge(critic, writer, condition=lambda m: "REVISE" in m.to_text())
    graph.add_edge(critic, left, condition=lambda m: "APPROVE" in m.to_text())
    graph.add_edge(critic, right, condition=lambda m: "APPROVE" in m.to_text())
    graph.add_edge(left, join).add_edge(right, join)
    graph.set_entry_point(writer)
    flow = GraphFlow(graph.get_participants(), graph=graph.build(), max_turns=20)
    probe = aegis_probe.instrument(flow, store=tmp_path / "store")
    asyncio.run(flow.run(task="Write one line."))
    probe.flush()
    traj = probe.trajectory()
    agents = [s.agent for s in traj.steps]
    assert agents[:4] == ["writer", "critic", "writer", "critic"] and sorted(agents[4:6]) == ["left", "right"]
    assert agents[6:] == ["join"] and [s.index for s in traj.steps] == list(range(7))
    fan_out = traj.steps[4:6]
    assert max(s.start_ns for s in fan_out) < min(s.end_ns for s in fan_out)  # the two steps overlapped
    assert [s.output for s in traj.steps if s.agent == "critic"] == ["REVISE", "APPROVE"]
    assert all(len(s.llm_calls) == 1 and s.output == f"{s.agent} done." for s in traj.steps if s.agent != "critic")
    spans = TraceStore(tmp_path / "store").trace(traj.trace_id)
    by_id = {s.span_id: s for s in spans}
    chats = [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert len(chats) == 7
    assert all(by_id[c.parent_span_id].attributes[sc.AGENT_NAME] == c.attributes[sc.AGENT_NAME] for c in chats)


def test_tool_calls_autogen_rejects_before_any_tool_runs_are_recorded(tmp_path):
    """A model calling a tool no workbench has, or with arguments that are not JSON: autogen answers
    with an error result and runs no tool; each call still gets its ``execute_tool`` span, ERROR."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, RequestUsage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    def add(a: int, b: int) -> int:
        return a + b

    def agent() -> AssistantAgent:
        calls = [FunctionCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'),
                 FunctionCall(id="c2", name="multiply", arguments='{"a": 2, "b": 3}'),
                 FunctionCall(id="c3", name="add", arguments='{"a": 1, "b":')]
        usage = RequestUsage(prompt_tokens=1, completion_tokens=1)
        client = ReplayChatCompletionClient([CreateResult(finish_reason="function_calls", content=calls, usage=usage, cached=False),
                                             CreateResult(finish_reason="stop", content="Done.", usage=usage, cached=False)],
                                            model_info=_client_info())
        return AssistantAgent("calculator", model_client=client, tools=[add], reflect_on_tool_use=True)

    plain = asyncio.run(agent().run(task="Add and multiply."))
    traced = agent()
    probe = aegis_probe.instrument(traced, store=tmp_path / "store")
    result = asyncio.run(traced.run(task="Add and multiply."))
    assert [m.to_text() for m in result.messages] == [m.to_text() for m in plain.messages]
    (step,) = probe.trajectory().steps
    calls = [(c.name, c.call_id, c.result, c.error is not None) for c in step.tool_calls]
    assert calls == [("add", "c1", "3", False),
                     ("multiply", "c2", "Error: tool 'multiply' not found in any workbench", True),
                     ("add", "c3", "Error: Expecting value: line 1 column 14 (char 13)", True)]
    assert step.tool_calls[2].arguments == '{"a": 1, "b":'


def test_teams_on_a_runtime_the_app_started(model_server, tmp_path):
    """Two teams on one ``SingleThreadedAgentRuntime`` the app started itself (``runtime=``), run at
    once: its message handlers run outside the runs, yet each run holds its own agents' steps and
    speaker selection; uninstrument() removes the container patch this needs."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat
    from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer
    from autogen_core import SingleThreadedAgentRuntime

    def policy(body: dict[str, Any]) -> Reply:
        if "select the next role" in str(body["messages"]):
            return Reply(content="critic" if "writer spoke." in str(body["messages"]) else "writer")
        return _by_system_prompt(body)

    server = model_server(policy)
    server.latency = 0.02  # the two runs interleave

    async def go() -> list[Any]:
        runtime = SingleThreadedAgentRuntime()
        runtime.start()
        client = _client(server)
        solo = RoundRobinGroupChat([AssistantAgent(n, model_client=client, system_message=n) for n in ("planner", "doer")],
                                   termination_condition=MaxMessageTermination(3), runtime=runtime)
        picked = SelectorGroupChat([AssistantAgent(n, model_client=client, system_message=n) for n in ("writer", "critic")],
                                   model_client=client, termination_condition=MaxMessageTermination(3), runtime=runtime)
        probes = [aegis_probe.instrument(team, store=tmp_path / "store") for team in (solo, picked)]
        await asyncio.gather(solo.run(task="Plan."), picked.run(task="Write."))
        trajs = [probe.trajectory() for probe in probes]
        with probes[0].run("Two rounds."):  # the app's own run around two team runs
            await solo.run(task="Plan.")
            await solo.run(task="Plan again.")
        await runtime.stop_when_idle()
        return [*trajs, probes[0].trajectory()]

    solo, picked, rounds = asyncio.run(go())
    assert [s.agent for s in rounds.steps] == ["planner", "doer"] * 2 and [s.index for s in rounds.steps] == [0, 1, 2, 3]
    assert [(s.index, s.agent, s.output) for s in solo.steps] == [(0, "planner", "planner spoke."), (1, "doer", "doer spoke.")]
    assert [(s.index, s.agent, s.output) for s in picked.steps] == [(0, "writer", "writer spoke."), (1, "critic", "critic spoke.")]
    spans = TraceStore(tmp_path / "store").trace(picked.trace_id)
    root = next(s for s in spans if s.parent_span_id is None)
    selection = [s for s in spans if s.attributes.get(sc.LLM_PURPOSE) == sc.PURPOSE_SPEAKER_SELECTION]
    assert len(selection) == 1 and selection[0].parent_span_id == root.span_id  # (the second has one candidate)
    assert {s.trace_id for s in TraceStore(tmp_path / "store").trace(solo.trace_id)} == {solo.trace_id}
    aegis_probe.uninstrument()
    assert "on_message_impl" not in vars(ChatAgentContainer)  # inherited again, as before


def test_team_on_a_runtime_started_inside_an_earlier_run(model_server, tmp_path):
    """The app starts its runtime inside one run (its own ``probe.run()`` block): the runtime's task
    keeps that run's context, yet the team's later run holds its own steps."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core import SingleThreadedAgentRuntime

    client = _client(model_server(_by_system_prompt))

    async def go() -> list[Any]:
        runtime = SingleThreadedAgentRuntime()
        team = RoundRobinGroupChat([AssistantAgent(n, model_client=client, system_message=n) for n in ("planner", "doer")],
                                   termination_condition=MaxMessageTermination(3), runtime=runtime)
        probe = aegis_probe.instrument(team, store=tmp_path / "store")
        with probe.run("Session."):
            runtime.start()
            await team.run(task="Plan.")
        await team.run(task="Plan later.")
        await runtime.stop_when_idle()
        return aegis_probe.load_trajectories(tmp_path / "store")

    trajs = sorted(asyncio.run(go()), key=lambda t: t.start_ns or 0)
    assert [(t.task, [s.agent for s in t.steps]) for t in trajs] == [
        ("Session.", ["planner", "doer"]), ("Plan later.", ["planner", "doer"])]


class _OpenSpans(SpanProcessor):
    """Names of the spans started and not ended yet."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: Any) -> None:
        self.open.pop(span.context.span_id, None)


def test_streams_dropped_or_closed_before_running_open_no_run(model_server, tmp_path):
    """``run_stream`` streams an app makes and drops (never iterated, closed before the first item)
    and a lone agent's ``run`` never awaited run nothing, so they open no run: none is left open
    (the message caches are let go), the store holds the runs that ran, a stream closed after its
    first item ends its run."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    from aegis_probe.capture import spans as core

    client = _client(model_server(_by_system_prompt))
    team = RoundRobinGroupChat([AssistantAgent("a", model_client=client, system_message="a"),
                                AssistantAgent("b", model_client=client, system_message="b")],
                               termination_condition=MaxMessageTermination(3))
    lone = AssistantAgent("lone", model_client=client, system_message="lone")
    spans, provider = _OpenSpans(), TracerProvider()
    provider.add_span_processor(spans)
    probe = aegis_probe.instrument(team, store=tmp_path / "store", tracer_provider=provider)
    aegis_probe.instrument(lone, store=tmp_path / "store", tracer_provider=provider)

    async def go() -> None:
        team.run_stream(task="dropped")
        await team.run_stream(task="closed").aclose()
        lone.run(task="never awaited").close()
        stream = team.run_stream(task="closed after one")
        assert (await stream.__anext__()).to_text() == "closed after one"
        await stream.aclose()
        await team.run(task="ran")

    asyncio.run(go())
    assert spans.open == {} and not core._OPEN_RUNS  # every run closed: its caches emptied
    probe.flush()
    runs = sorted((t.task, [s.agent for s in t.steps]) for t in map(probe.trajectory, TraceStore(tmp_path / "store").traces()))
    assert runs == [("closed after one", ["a", "b"]), ("ran", ["a", "b"])]


@pytest.mark.parametrize(("mode", "applied"), [("FM-3.1", True), ("FM-2.4", False)])
def test_corrupting_a_handoff_is_labelled_only_when_it_changed_it(model_server, tmp_path, mode, applied):
    """Response corruption of a ``Swarm`` agent whose answer is a handoff alone: a mode that rewrites it
    (FM-3.1, premature termination) replaces the handoff, so no transfer happens, and is labelled; one
    with nothing to change in an argument-less handoff without reasoning (FM-2.4 withholds the numbers
    said) leaves the handoff as it was and no label claims it (tests/test_injection_operators.py: each mode)."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import Swarm

    from aegis_probe.injection.plan import InjectionPlan

    def policy(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == "travel":
            return Reply(tool_calls=[("transfer_to_flights", {})])
        return Reply(content="Booked. TERMINATE")

    client = _client(model_server(policy))
    team = Swarm([AssistantAgent("travel", model_client=client, system_message="travel", handoffs=["flights"]),
                  AssistantAgent("flights", model_client=client, system_message="flights", handoffs=["travel"])],
                 termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(6))
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    with probe.inject(InjectionPlan.single("travel", mode)) as injector:
        result = asyncio.run(team.run(task="Book a seat."))
    traj = probe.trajectory()
    transferred = any(type(m).__name__ == "HandoffMessage" for m in result.messages)
    assert ([f.mode for f in injector.applied], transferred) == (([mode], False) if applied else ([], True))
    assert [(f.agent, f.step, f.mode) for f in traj.labels.faults] == ([("travel", 0, mode)] if applied else [])
    assert [c.name for c in traj.steps[0].tool_calls] == ([] if applied else ["transfer_to_flights"])


def test_exact_replay_of_a_graph_flow_whose_left_branch_answered_last(model_server, tmp_path):
    """A ``GraphFlow`` fanning out to two agents at once whose left branch's model answered last when
    recorded: an exact replay hands the replayed answers over in that order, so the join node's
    input lists the branches as recorded (it diverged at the join: replayed answers come back at once)."""
    import time

    from aegis_probe.apps import AppSpec
    from aegis_probe.counterfactual import replay

    def policy(body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        if system == "left":
            time.sleep(0.3)
        return Reply(content=f"{system} done.")

    def build(base_url: str, model: str, api_key: str, task: str | None = None) -> Any:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_agentchat.teams import DiGraphBuilder, GraphFlow
        from autogen_ext.models.openai import OpenAIChatCompletionClient

        client = OpenAIChatCompletionClient(model=model, base_url=base_url, api_key=api_key, model_info=_client_info())
        writer, left, right, join = (AssistantAgent(name, model_client=client, system_message=name)
                                     for name in ("writer", "left", "right", "join"))
        graph = DiGraphBuilder()
        for agent in (writer, left, right, join):
            graph.add_node(agent)
        graph.add_edge(writer, left).add_edge(writer, right).add_edge(left, join).add_edge(right, join)
        return GraphFlow(graph.get_participants(), graph=graph.build())

    def run(app: Any, task: str) -> str:
        return asyncio.run(app.run(task=task)).messages[-1].to_text()

    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    app = build(server.base_url, "m", "sk-test")
    probe = aegis_probe.instrument(app, store=store)
    run(app, "Write one line.")
    probe.flush()
    probe.uninstrument()
    recorded = probe.trajectory()
    join_input = [m.content for m in recorded.steps[-1].input_messages]
    assert recorded.steps[-1].agent == "join" and join_input[-2:] == ["right done.", "left done."]
    result = replay(recorded.trace_id or "", AppSpec(build, run), store=store)
    assert (result.divergence, result.error, result.live_calls) == (None, None, 0)
    assert [m.content for m in result.trajectory.steps[-1].input_messages] == join_input  # type: ignore[union-attr]
