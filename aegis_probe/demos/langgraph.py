"""LangGraph demo: a ``StateGraph`` whose nodes are agents, with a checkpointer.

``planner`` (a model node) plans the arithmetic, ``calculator`` (a ``create_react_agent`` graph
with the ``calculate`` tool, added as a node) evaluates it, ``reviewer`` (a model node) states the
answer and ends the run with ``FINAL ANSWER``, or hands back to the calculator (at most twice). Every agent uses
``langchain_openai.ChatOpenAI`` (the real openai client) on the given endpoint.
"""

from __future__ import annotations

import warnings
from typing import Any

import langgraph  # noqa: F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, team_policy

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "langgraph"
AGENTS = ("planner", "calculator", "reviewer")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"
MAX_REVIEWS = 3  #: the reviewer hands back to the calculator at most twice
THREAD_ID = "aegis-demo"  #: the checkpointer thread the demo runs on (the run's conversation id)

SYSTEM = {
    "planner": "You are the planner. Break the task into one arithmetic expression for the calculator.",
    "calculator": "You are the calculator. Evaluate expressions with the calculate tool.",
    "reviewer": f"You are the reviewer. Check the result and state it as '{TERMINATION}: <number>'.",
}


#: Scripted model: each agent is recognised by its system prompt and acts on what it sees.
policy = team_policy(SYSTEM, TOOL, "The calculator's result checks out. " + TERMINATION + ": {result}",
                     report_tool_result=True)


def _calculate(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * /, parentheses) and return the result."""
    return calculate(expression)


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The compiled graph, every agent on the OpenAI-compatible endpoint at ``base_url``."""
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import create_react_agent
    from pydantic import SecretStr

    llm = ChatOpenAI(model=model, base_url=base_url, api_key=SecretStr(api_key), temperature=0, max_retries=0)
    tool = StructuredTool.from_function(_calculate, name=TOOL)

    def speaker(name: str) -> Any:
        def node(state: Any) -> dict[str, Any]:
            reply = llm.invoke([SystemMessage(SYSTEM[name]), *state["messages"]])
            reply.name = name
            return {"messages": [reply]}

        return node

    def after_review(state: Any) -> str:
        reviews = sum(getattr(m, "name", None) == "reviewer" for m in state["messages"])
        done = TERMINATION in str(state["messages"][-1].content) or reviews >= MAX_REVIEWS
        return END if done else "calculator"

    with warnings.catch_warnings():  # create_react_agent is deprecated in favour of langchain's create_agent
        warnings.simplefilter("ignore")
        calculator = create_react_agent(llm, [tool], prompt=SYSTEM["calculator"], name="calculator")
    graph = StateGraph(MessagesState)
    graph.add_node("planner", speaker("planner"))
    graph.add_node("calculator", calculator)
    graph.add_node("reviewer", speaker("reviewer"))
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "calculator")
    graph.add_edge("calculator", "reviewer")
    graph.add_conditional_edges("reviewer", after_review, ["calculator", END])
    return graph.compile(checkpointer=InMemorySaver(), name="arithmetic")


def run_app(app: Any, task: str) -> str | None:
    """Run the graph once on :data:`THREAD_ID`; return the last message's text."""
    config = {"configurable": {"thread_id": THREAD_ID}, "recursion_limit": 25}
    state = app.invoke({"messages": [("user", task)]}, config)
    return str(state["messages"][-1].content) if state.get("messages") else None
