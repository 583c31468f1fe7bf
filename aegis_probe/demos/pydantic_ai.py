"""Pydantic AI demo: a planner that delegates the arithmetic to a calculator agent through a tool.

``planner`` turns the task into one arithmetic expression and calls its ``ask_calculator`` tool,
which runs the ``calculator`` agent (agent delegation: the calculator's turns are steps nested under
the tool call); ``calculator`` evaluates the expression with its ``calculate`` tool, and the planner
states the result as its answer. Both agents use Pydantic AI's ``OpenAIChatModel`` on the real
openai client for the given endpoint; ``Agent.run_sync`` runs the planner.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext  # ImportError here, not in build_app, when the framework is missing

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, final_number, message_text, solve
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "pydantic-ai"
AGENTS = ("planner", "calculator")
TOOL = "calculate"
DELEGATE = "ask_calculator"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"

SYSTEM = {
    "planner": "You are the planner. Turn the task into one arithmetic expression and ask the calculator for it.",
    "calculator": "You are the calculator. Evaluate the expression with the calculate tool and state the result.",
}


def _last_tool_result(messages: list[dict[str, Any]], tool: str) -> str | None:
    """The latest message's text when it is the result of a call of ``tool``."""
    calls = {c.get("id"): c.get("function", {}).get("name") for m in messages for c in m.get("tool_calls") or ()}
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" and calls.get(last.get("tool_call_id")) == tool:
        return message_text(last)
    return None


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: each agent is recognised by its instructions (the system message)."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages[1:] if m.get("role") != "system"]
    if system.startswith(SYSTEM["planner"]):
        result = _last_tool_result(messages, DELEGATE)
        if result is not None:
            return Reply(content=f"{TERMINATION}: {final_number(result)}")
        expression = next((e for e in map(solve, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="I cannot turn this task into arithmetic; I have no plan.")
        return Reply(tool_calls=[(DELEGATE, {"expression": expression})])
    if system.startswith(SYSTEM["calculator"]):
        result = _last_tool_result(messages, TOOL)
        if result is not None:
            return Reply(content=f"The result is {result}.")
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    return Reply(content="I can only answer as planner or calculator.")


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The planner agent, delegating to the calculator; both on the endpoint at ``base_url``."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    llm = OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client))
    calculator = Agent(llm, name="calculator", instructions=SYSTEM["calculator"])
    calculator.tool_plain(name=TOOL)(calculate)
    planner = Agent(llm, name="planner", instructions=SYSTEM["planner"])

    @planner.tool(name=DELEGATE)
    async def ask_calculator(ctx: RunContext[object], expression: str) -> str:
        """Ask the calculator agent to evaluate an arithmetic expression."""
        result = await calculator.run(f"Evaluate {expression}", usage=ctx.usage)
        return str(result.output)

    return planner


def run_app(app: Any, task: str) -> str | None:
    """Run the planner; return its output."""
    result = app.run_sync(task)
    return None if result.output is None else str(result.output)
