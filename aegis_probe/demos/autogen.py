"""AutoGen demo: a RoundRobinGroupChat of planner, calculator (with a tool) and reviewer."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, team_policy

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "autogen"
AGENTS = ("planner", "calculator", "reviewer")
TOOL = "calculate"
#: The agent that does the work (``demo --inject`` faults it by default).
WORKER = "calculator"
TERMINATION = "TERMINATE"

#: The model client of each team built here, closed after its run (a team runs once).
_clients: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()

SYSTEM = {
    "planner": "You are the planner. Break the task into one arithmetic expression for the calculator.",
    "calculator": "You are the calculator. Evaluate expressions with the calculate tool.",
    "reviewer": f"You are the reviewer. Check the result, state the final answer and end with {TERMINATION}.",
}


#: Scripted model: the planner plans the task's arithmetic, the calculator evaluates the latest
#: expression with its tool (without a plan, the task's own), the reviewer reports the latest number.
policy = team_policy(SYSTEM, TOOL, "The calculator's result checks out. The answer is {result}. " + TERMINATION,
                     solve_unplanned=True)


def build_app(base_url: str, model: str, api_key: str) -> Any:
    """The team, every agent on the OpenAI-compatible endpoint at ``base_url``."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core.tools import FunctionTool

    client = model_client(base_url, model, api_key)
    tool = FunctionTool(calculate, name=TOOL, description="Evaluate an arithmetic expression.")
    agents: list[Any] = [
        AssistantAgent(name, model_client=client, system_message=SYSTEM[name],
                       tools=[tool] if name == "calculator" else None)
        for name in AGENTS
    ]
    termination = TextMentionTermination(TERMINATION) | MaxMessageTermination(10)
    return closes_after_run(RoundRobinGroupChat(agents, termination_condition=termination), client)


def closes_after_run(team: Any, client: Any) -> Any:
    """Have :func:`run_app` close ``client`` when ``team``'s run ends; returns ``team``."""
    _clients[team] = client
    return team


def run_app(app: Any, task: str) -> str | None:
    """Run the team once (closing its model client after); return the last message's text."""

    async def run() -> Any:
        try:
            return await app.run(task=task)
        finally:
            client = _clients.pop(app, None)
            if client is not None:
                await client.close()

    result = asyncio.run(run())
    return result.messages[-1].to_text() if result.messages else None


def model_client(base_url: str, model: str, api_key: str) -> Any:
    """An ``OpenAIChatCompletionClient`` for the OpenAI-compatible endpoint at ``base_url`` (tool calling on)."""
    from autogen_core.models import ModelFamily, ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    return OpenAIChatCompletionClient(
        model=model,
        base_url=base_url,
        api_key=api_key,
        model_info=ModelInfo(vision=False, function_calling=True, json_output=False,
                             family=ModelFamily.UNKNOWN, structured_output=False),
    )


def assistants(client: Any, names: tuple[str, ...] = AGENTS) -> list[Any]:
    """This demo's agents ``names`` (the calculator with its tool), answered by :func:`policy`."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.tools import FunctionTool

    tool = FunctionTool(calculate, name=TOOL, description="Evaluate an arithmetic expression.")
    return [AssistantAgent(name, model_client=client, system_message=SYSTEM[name], description=SYSTEM[name],
                           tools=[tool] if name == "calculator" else None) for name in names]
