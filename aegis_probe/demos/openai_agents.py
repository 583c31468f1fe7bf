"""OpenAI Agents SDK demo: three agents that hand the task on to each other.

``planner`` plans the arithmetic and hands off to ``calculator``, which evaluates it with the
``calculate`` function tool and hands off to ``reviewer``, whose answer is the run's final
output. Every agent uses the SDK's chat-completions model on an ``AsyncOpenAI`` client (the real
openai client) for the given endpoint; ``Runner.run_sync`` runs the team.
"""

from __future__ import annotations

from typing import Any

import agents  # noqa: F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, final_number, solve, message_text
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "openai-agents"
AGENTS = ("planner", "calculator", "reviewer")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"
MAX_TURNS = 10

SYSTEM = {
    "planner": "You are the planner. Break the task into one arithmetic expression and hand it to the calculator.",
    "calculator": "You are the calculator. Evaluate expressions with the calculate tool, then hand over to the reviewer.",
    "reviewer": f"You are the reviewer. Check the result and state it as '{TERMINATION}: <number>'.",
}


def handoff_tool(agent: str) -> str:
    """The tool name the SDK gives the handoff to ``agent``."""
    return f"transfer_to_{agent}"


def _last_tool_result(messages: list[dict[str, Any]]) -> str | None:
    """The calculate tool's latest result, if the latest tool message answers a calculate call."""
    calls = {c.get("id"): c.get("function", {}).get("name") for m in messages for c in m.get("tool_calls") or ()}
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" and calls.get(last.get("tool_call_id")) == TOOL:
        return message_text(last)
    return None


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: each agent is recognised by its instructions (the system message)."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages[1:]]
    if system.startswith(SYSTEM["planner"]):
        expression = next((e for e in map(solve, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="I cannot turn this task into arithmetic; I have no plan.")
        return Reply(content=f"Plan: the answer is {expression}.", tool_calls=[(handoff_tool("calculator"), {})])
    if system.startswith(SYSTEM["calculator"]):
        result = _last_tool_result(messages)
        if result is not None:
            return Reply(content=f"The result is {result}.", tool_calls=[(handoff_tool("reviewer"), {})])
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    if system.startswith(SYSTEM["reviewer"]):
        result = next((final_number(t) for t in reversed(texts) if final_number(t)), None)
        return Reply(content=f"The calculator's result checks out. {TERMINATION}: {result}")
    return Reply(content="I can only answer as planner, calculator or reviewer.")


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The starting agent (the planner), every agent on the endpoint at ``base_url``."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool
    from openai import AsyncOpenAI

    llm = OpenAIChatCompletionsModel(model=model, openai_client=AsyncOpenAI(base_url=base_url, api_key=api_key,
                                                                            max_retries=0))
    tool = function_tool(calculate, name_override=TOOL)
    reviewer = Agent(name="reviewer", instructions=SYSTEM["reviewer"], model=llm)
    calculator = Agent(name="calculator", instructions=SYSTEM["calculator"], model=llm, tools=[tool],
                       handoffs=[reviewer])
    return Agent(name="planner", instructions=SYSTEM["planner"], model=llm, handoffs=[calculator])


def run_app(app: Any, task: str) -> str | None:
    """Run the team from the planner; return the final output."""
    from agents import Runner

    result = Runner.run_sync(app, task, max_turns=MAX_TURNS)
    return None if result.final_output is None else str(result.final_output)
