"""Microsoft Agent Framework demo: a sequential workflow of three agents.

``planner`` turns the task into one arithmetic expression, ``calculator`` evaluates it with its
``calculate`` tool, and ``reviewer`` states the answer as ``FINAL ANSWER``: a ``SequentialBuilder``
workflow (agent-framework-orchestrations), each agent seeing the conversation so far. Every agent
uses Agent Framework's ``OpenAIChatCompletionClient`` (the real openai client) on the given endpoint.
"""

from __future__ import annotations

import asyncio
from typing import Any

import agent_framework  # noqa: F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, team_policy

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "agent-framework"
AGENTS = ("planner", "calculator", "reviewer")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"

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


def client(base_url: str, model: str, api_key: str) -> Any:
    """Agent Framework's OpenAI chat-completions client on the endpoint at ``base_url`` (no retries)."""
    from agent_framework.openai import OpenAIChatCompletionClient
    from openai import AsyncOpenAI

    return OpenAIChatCompletionClient(model=model, async_client=AsyncOpenAI(base_url=base_url, api_key=api_key,
                                                                              max_retries=0))


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The sequential workflow planner -> calculator -> reviewer, on the endpoint at ``base_url``."""
    from agent_framework import Agent, FunctionTool
    from agent_framework.orchestrations import SequentialBuilder

    llm = client(base_url, model, api_key)
    agents = [Agent(llm, SYSTEM[name], name=name,
                    tools=[FunctionTool(func=_calculate, name=TOOL)] if name == "calculator" else None)
              for name in AGENTS]
    return SequentialBuilder(name="math-team", participants=agents).build()


def run_app(app: Any, task: str) -> str | None:
    """Run the workflow; return the text of its output (the reviewer's response)."""
    outputs = asyncio.run(app.run(task)).get_outputs()
    return outputs[-1].text if outputs else None
