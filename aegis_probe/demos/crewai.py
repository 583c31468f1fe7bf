"""CrewAI demo: a sequential crew of three agents, one task each.

``planner`` turns the task into one arithmetic expression, ``calculator`` evaluates it with the
``calculate`` tool, ``reviewer`` checks the result and states the final answer. Every agent uses
CrewAI's native OpenAI provider (``LLM(model="openai/...")``, the real openai client) for the
given endpoint. CrewAI's telemetry, tracing prompt and version check are switched off here before
crewai is imported (unless the environment already sets them): the demo talks to nothing but
its endpoint.
"""

from __future__ import annotations

import os
from typing import Any

#: CrewAI 1.15's opt-outs: anonymous telemetry, its trace upload prompt, the PyPI version check.
TELEMETRY_OFF = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false",
                 "CREWAI_DISABLE_VERSION_CHECK": "true"}
for _name, _value in TELEMETRY_OFF.items():
    os.environ.setdefault(_name, _value)

import crewai  # noqa: E402,F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, team_policy  # noqa: E402

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "crewai"
AGENTS = ("planner", "calculator", "reviewer")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"

#: role -> backstory; CrewAI's system message is "You are {role}. {backstory}\n...".
BACKSTORY = {
    "planner": "You break word problems into one arithmetic expression.",
    "calculator": "You evaluate arithmetic expressions with the calculate tool.",
    "reviewer": f"You check results and state them as '{TERMINATION}: <number>'.",
}
GOAL = {"planner": "Plan the arithmetic", "calculator": "Evaluate the plan", "reviewer": "State the checked answer"}
TASKS = {
    "planner": ("Plan the arithmetic for this task: {task}", "One arithmetic expression"),
    "calculator": ("Evaluate the planned expression with the calculate tool.", "The result"),
    "reviewer": ("Check the result and state the final answer.", f"'{TERMINATION}: <number>'"),
}


def system_of(role: str) -> str:
    """The start of the system message CrewAI gives the agent ``role``."""
    return f"You are {role}. {BACKSTORY[role]}"


#: Scripted model: each agent is recognised by the system message CrewAI gives it.
policy = team_policy({role: system_of(role) for role in AGENTS}, TOOL,
                     "The calculator's result checks out. " + TERMINATION + ": {result}",
                     plan_reply="Plan: the answer is {expression}.", report_tool_result=True)


def llm(base_url: str, model: str, api_key: str) -> Any:
    """CrewAI's native OpenAI provider on the endpoint at ``base_url``."""
    from crewai import LLM

    return LLM(model=f"openai/{model}", base_url=base_url, api_key=api_key, max_retries=0)


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The crew: planner, calculator (with the calculate tool), reviewer, one task each, in order."""
    from crewai import Agent, Crew, Task
    from crewai.tools import tool

    model_llm = llm(base_url, model, api_key)
    calculate_tool = tool(TOOL)(calculate)
    agents = {role: Agent(role=role, goal=GOAL[role], backstory=BACKSTORY[role], llm=model_llm,
                          tools=[calculate_tool] if role == WORKER else [], allow_delegation=False, max_iter=4)
              for role in AGENTS}
    tasks = [Task(description=TASKS[role][0], expected_output=TASKS[role][1], agent=agents[role]) for role in AGENTS]
    return Crew(name="math-crew", agents=list(agents.values()), tasks=tasks)


def run_app(app: Any, task: str) -> str | None:
    """Kick the crew off on ``task``; return its final output."""
    return app.kickoff(inputs={"task": task}).raw
