"""LangGraph adapter beyond the shared conformance and replay suites (which run its demo too):
steps are the outer graph's nodes, the checkpointer thread is the conversation, async runs,
tool errors, planted-failure blame and an injection campaign; against the loopback model server."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.demos import langgraph as demo  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from framework_checks import (  # noqa: E402
    agents_traced_without_instrument, blame_finds_planted_step, campaign_keeps_labelled_failures, raising_tool_policy,
    uninstrument_restores_originals)


@pytest.fixture(autouse=True)
def _no_langsmith(monkeypatch):
    """LangChain sends traces to LangSmith only when asked to: make sure no environment asks."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _instrumented(model_server, provider, tmp_path, policy=demo.policy):
    server = model_server(policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(exporter):
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.STEP_INDEX) is not None]
    return sorted(spans, key=lambda s: s.attributes[sc.STEP_INDEX])


def test_steps_are_outer_nodes_and_thread_is_the_conversation(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    probe.flush()
    # The calculator is a create_react_agent graph: its agent/tools nodes are inside its one step.
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == ["planner", "calculator", "reviewer"]
    spans = exporter.get_finished_spans()
    assert {s.attributes.get(sc.CONVERSATION_ID) for s in spans} == {demo.THREAD_ID}
    calculator = probe.trajectory().steps[1]
    assert len(calculator.llm_calls) == 2 and [t.name for t in calculator.tool_calls] == [demo.TOOL]


def test_async_run_is_one_trace(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    config = {"configurable": {"thread_id": "async-thread"}}
    state = asyncio.run(app.ainvoke({"messages": [("user", demo.TASK)]}, config))
    assert demo.EXPECTED in state["messages"][-1].content
    probe.flush()
    spans = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]
    assert len({s.context.trace_id for s in spans}) == 1
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == ["planner", "calculator", "reviewer"]
    assert all(s.attributes[sc.CONVERSATION_ID] == "async-thread" for s in spans)
    assert sum(s.attributes.get(sc.OPERATION) == sc.OP_TOOL for s in spans) == 1


def test_graph_with_config_is_the_instrumented_graph(model_server, provider, exporter, tmp_path):
    """``with_config`` (``recursion_limit``, tags, ...) returns a copy of the graph: it is traced like the graph."""
    app, probe = _instrumented(model_server, provider, tmp_path)
    configured = app.with_config(recursion_limit=50, tags=["web"])
    assert configured is not app
    assert demo.EXPECTED in demo.run_app(configured, demo.TASK)
    probe.flush()
    assert [s.attributes[sc.AGENT_NAME] for s in _steps(exporter)] == ["planner", "calculator", "reviewer"]
    assert probe.trajectory().task == demo.TASK


def test_follow_up_run_task_is_its_new_user_message(model_server, provider, exporter, tmp_path):
    """A graph without a checkpointer given the conversation so far: the run's task is the last user message."""
    app, probe = _instrumented(model_server, provider, tmp_path)
    history = [("user", "What do 2 pens cost?"), ("ai", "34 coins.")]
    app.invoke({"messages": [*history, ("user", demo.TASK)]}, {"configurable": {"thread_id": "follow-up"}})
    probe.flush()
    assert probe.trajectory().task == demo.TASK


def test_step_input_after_messages_are_removed(model_server, provider, exporter, tmp_path):
    """A summarizer node replaces old messages (``RemoveMessage``): the next speaker's input is the summary."""
    from langchain_core.messages import AIMessage, RemoveMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    server = model_server(lambda body: Reply(content=f"answer to {body['messages'][-1]['content']}"))
    llm = ChatOpenAI(model="aegis-scripted", base_url=server.base_url, api_key="sk-test", max_retries=0)

    def summarize(state):
        old = state["messages"]
        return {"messages": [*(RemoveMessage(id=m.id) for m in old), AIMessage("summary of the talk", name="summarizer")]}

    graph = StateGraph(MessagesState)
    graph.add_node("speaker", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_node("summarizer", summarize)
    graph.add_edge(START, "speaker")
    graph.add_conditional_edges("speaker", lambda state: END if len(state["messages"]) == 2 else "summarizer")
    graph.add_edge("summarizer", "speaker")
    app = graph.compile(name="memory")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    app.invoke({"messages": [("user", "first"), ("ai", "hello"), ("user", "second")]})
    probe.flush()
    steps = probe.trajectory().steps
    assert [s.agent for s in steps] == ["speaker", "summarizer", "speaker"]
    assert [m.content for m in steps[2].input_messages] == ["summary of the talk"]


def _bank_app(model_server):
    """A graph whose ``transfer`` tool asks a human (``interrupt()``) before it runs, with a checkpointer."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    @tool
    def transfer(amount: int) -> str:
        """Transfer money once a human approves."""
        return f"transferred {amount}" if interrupt({"approve": amount}) == "yes" else "refused"

    def policy(body):
        asked = body.get("tools") and body["messages"][-1]["role"] != "tool"
        return Reply(tool_calls=[("transfer", {"amount": 100})]) if asked else Reply(content="done")

    llm = ChatOpenAI(model="aegis-scripted", base_url=model_server(policy).base_url, api_key="sk-test", max_retries=0)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [llm.bind_tools([transfer]).invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([transfer]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(name="bank", checkpointer=InMemorySaver())


def test_tool_that_interrupts_is_paused_not_failed(model_server, provider, exporter, tmp_path):
    """A tool asking a human (``interrupt()``) ends its span without error; on resume it runs again."""
    from langgraph.types import Command

    app = _bank_app(model_server)
    aegis_probe.instrument(app, tracer_provider=provider, store=False)
    config = {"configurable": {"thread_id": "approval"}}
    app.invoke({"messages": [("user", "send 100")]}, config)
    app.invoke(Command(resume="yes"), config)
    tools = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert [s.status.status_code.name for s in tools] == ["UNSET", "UNSET"]
    assert tools[1].attributes[sc.TOOL_CALL_RESULT] == "transferred 100"


def test_resumed_run_task_is_not_the_command(model_server, provider, exporter, tmp_path):
    """A run resumed with ``Command(resume=...)`` has no task (the human's answer is not one); a
    ``Command`` whose ``update`` adds a user message has that message as its task."""
    from langgraph.types import Command

    app = _bank_app(model_server)
    aegis_probe.instrument(app, tracer_provider=provider, store=False)
    config = {"configurable": {"thread_id": "approval"}}
    app.invoke({"messages": [("user", "send 100")]}, config)
    app.invoke(Command(resume="yes"), config)
    app.invoke(Command(update={"messages": [("user", "and send 5 more")]}), config)
    app.invoke(Command(resume="yes"), config)
    runs = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_WORKFLOW]
    assert [s.attributes.get(sc.TASK) for s in runs] == ["send 100", None, "and send 5 more", None]


def test_app_error_passes_through_and_fails_tool_step_and_run(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    with pytest.raises(SyntaxError):  # ToolNode re-raises tool errors by default: unchanged through us
        demo.run_app(app, demo.TASK)
    probe.flush()
    spans = exporter.get_finished_spans()
    failed = {s.name for s in spans if s.status.status_code.name == "ERROR"}
    assert {"execute_tool calculate", "invoke_agent calculator", "invoke_workflow arithmetic"} <= failed


def test_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.tools import BaseTool
    from langgraph.pregel import Pregel, _runner

    names = [(Pregel, "stream"), (Pregel, "astream"), (Pregel, "copy"), (_runner, "run_with_retry"), (_runner, "arun_with_retry"),
             (BaseChatModel, "_generate_with_cache"), (BaseChatModel, "_agenerate_with_cache"),
             (BaseTool, "run"), (BaseTool, "arun")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


def test_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


def test_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("langgraph_math.py", demo, tmp_path)


def test_trace_every_app_mode_traces_a_graph_imported_after_it(tmp_path):
    """AegisInstrumentor before the app imports langgraph (a namespace package: the import hook is
    on langgraph.pregel): the graph's run is traced though the app never calls instrument()."""
    assert agents_traced_without_instrument("langgraph", tmp_path) == "['planner', 'calculator', 'reviewer']"


def _chat_app(model_server):
    """speaker (a model) then critic, on an in-memory checkpointer."""
    from langchain_core.messages import AIMessage
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    server = model_server(lambda body: Reply(content=f"answer to {body['messages'][-1]['content']}"))
    llm = ChatOpenAI(model="aegis-scripted", base_url=server.base_url, api_key="sk-test", max_retries=0)
    graph = StateGraph(MessagesState)
    graph.add_node("speaker", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_node("critic", lambda state: {"messages": [AIMessage(f"critique {len(state['messages'])}", name="critic")]})
    graph.add_edge(START, "speaker")
    graph.add_edge("speaker", "critic")
    graph.add_edge("critic", END)
    return graph.compile(name="chat", checkpointer=InMemorySaver())


def test_follow_up_run_on_a_thread_shows_each_node_only_what_it_has_not_seen(model_server, provider, tmp_path):
    """A checkpointer thread's next run continues its state: a node's first step there has as input the
    messages added since its last step on that thread (another thread's, or a node new to the thread: all)."""
    app = _chat_app(model_server)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    inputs = []
    for text, thread in (("first", "user-42"), ("second", "user-42"), ("other", "user-7")):
        app.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": thread}})
        inputs.append([[m.content for m in s.input_messages] for s in probe.trajectory().steps])
    assert inputs[0] == [["first"], ["first", "answer to first"]]
    assert inputs[1] == [["critique 2", "second"], ["second", "answer to second"]]
    assert inputs[2] == [["other"], ["other", "answer to other"]]


def test_nodes_memory_of_the_least_recently_run_thread_is_forgotten(model_server, provider, tmp_path, monkeypatch):
    """The nodes' memory is kept for the most recently run threads only (a server's many users): an
    older thread's next run shows its nodes the whole thread again, as if they were new to it."""
    from aegis_probe.capture.adapter import get_adapter

    monkeypatch.setattr(get_adapter("langgraph"), "THREADS_KEPT", 2)
    app = _chat_app(model_server)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    firsts = []
    for thread in ("a", "b", "a", "c", "b", "a"):
        app.invoke({"messages": [("user", f"to {thread}")]}, {"configurable": {"thread_id": thread}})
        firsts.append(len(probe.trajectory().steps[0].input_messages))
    # a, b new; a remembered (b now the older); c new, b forgotten; b: whole thread, a forgotten: whole thread
    assert firsts == [1, 1, 2, 1, 4, 7]
