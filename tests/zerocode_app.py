"""An AutoGen app that knows nothing of aegis-probe: ``python zerocode_app.py BASE_URL``.

tests/test_otel_native.py runs it under ``opentelemetry-instrument`` (zero-code) and, imported,
under ``aegis_probe.instrument(team)``; the prompts are those the demo's scripted model answers.
"""

from __future__ import annotations

import asyncio
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

TASK = "A shop sells pens at 17 coins and notebooks at 25 coins. What do 3 pens and 3 notebooks cost in total?"
SYSTEM = {
    "planner": "You are the planner. Break the task into one arithmetic expression for the calculator.",
    "calculator": "You are the calculator. Evaluate expressions with the calculate tool.",
    "reviewer": "You are the reviewer. Check the result, state the final answer and end with TERMINATE.",
}


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression of digits, + - * / and parentheses."""
    if set(expression) - set("0123456789+-*/(). "):
        return "error: not arithmetic"
    return str(eval(expression))  # noqa: S307 (checked above: arithmetic only)


def build_team(base_url: str) -> tuple[RoundRobinGroupChat, OpenAIChatCompletionClient]:
    client = OpenAIChatCompletionClient(
        model="aegis-scripted", base_url=base_url, api_key="sk-test-not-a-secret-000000000", temperature=0.2, seed=7,
        model_info=ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                             structured_output=False),
    )
    tool = FunctionTool(calculate, name="calculate", description="Evaluate an arithmetic expression.")
    agents = [AssistantAgent(name, model_client=client, system_message=prompt,
                             tools=[tool] if name == "calculator" else None) for name, prompt in SYSTEM.items()]
    termination = TextMentionTermination("TERMINATE") | MaxMessageTermination(10)
    return RoundRobinGroupChat(agents, termination_condition=termination), client


async def run(base_url: str) -> str:
    team, client = build_team(base_url)
    try:
        result = await team.run(task=TASK)
    finally:
        await client.close()
    return result.messages[-1].to_text()


if __name__ == "__main__":
    print("ANSWER:", asyncio.run(run(sys.argv[1])))
