"""The scripted conversation the stream tests share (tests/test_<framework>_streams.py): asked
:data:`TASK`, the model says :data:`THOUGHT` while calling the calculator, then :data:`ANSWER`;
the loopback model server streams each word by word. :class:`AnswerCall` injects an answer;
:class:`AutogenStreamed` runs an AutoGen agent keeping the chunks its app saw; :func:`adder_graph`
is the LangGraph agent of the same conversation around any chat model."""

from __future__ import annotations

import asyncio
from typing import Any

from aegis_probe.capture.interception import LLMResponse
from aegis_probe.modelserver import Reply

TASK = "What is 17 + 25?"
THOUGHT = "Adding the two numbers with the calculator now."
ANSWER = "The total is 42 coins, as the calculator says."
INJECTED = "An injected answer streamed word by word"
ARGS = {"expression": "17 + 25"}


def policy(body: dict[str, Any]) -> Reply:
    """:data:`THOUGHT` and a ``calculate`` call, then :data:`ANSWER` once the tool's result is in."""
    if body["messages"][-1].get("role") == "tool":
        return Reply(content=ANSWER)
    return Reply(content=THOUGHT, tool_calls=[("calculate", ARGS)])


class AnswerCall:
    """An interceptor answering model call number ``n`` (from 1) with ``content``."""

    def __init__(self, n: int, content: str = INJECTED) -> None:
        self.n, self.content, self.seen = n, content, 0

    def before(self, call: Any) -> None:
        return None

    def after(self, call: Any, response: LLMResponse) -> LLMResponse:
        self.seen += 1
        if self.seen != self.n:
            return response
        return LLMResponse(content=self.content, input_tokens=3, output_tokens=6, finish_reason="stop")


class AutogenStreamed:
    """``run_app`` of an AutoGen agent: ``run_stream``, keeping the streamed text chunks the app saw,
    one list per run; the answer is the last message's text."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def __call__(self, agent: Any, task: str) -> str:
        from autogen_agentchat.messages import ModelClientStreamingChunkEvent

        async def go() -> str:
            chunks: list[str] = []
            self.runs.append(chunks)
            result = None
            async for item in agent.run_stream(task=task):
                if isinstance(item, ModelClientStreamingChunkEvent):
                    chunks.append(item.content)
                result = item
            return result.messages[-1].to_text()  # type: ignore[union-attr]

        return asyncio.run(go())


def adder_graph(llm: Any) -> Any:
    """A LangGraph agent around ``llm`` (a LangChain chat model) with the ``calculate`` tool: the
    model, the tool while the model calls it, the model again."""
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import StructuredTool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from aegis_probe.demos.task import calculate

    tool = StructuredTool.from_function(calculate, name="calculate")
    bound = llm.bind_tools([tool])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke([SystemMessage("You add numbers."), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    graph.add_edge("agent", END)
    return graph.compile(name="adder")
