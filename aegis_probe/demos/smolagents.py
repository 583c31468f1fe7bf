"""smolagents demo: a planner that hands the arithmetic to a managed calculator agent.

``planner`` (a ``ToolCallingAgent``) turns the task into one arithmetic expression and calls its
team member ``calculator`` (a managed ``ToolCallingAgent``: its steps are steps of the run, nested
under the planner's call); ``calculator`` evaluates the expression with its ``calculate`` tool and
gives the result as its final answer, and the planner gives the total as its own. Both agents use
smolagents' ``OpenAIServerModel`` on the real openai client for the given endpoint.

smolagents sends a step's tool calls and observations to the model as text (an assistant message
"Calling tools: ..." and a user message "Observation: ..."), so the scripted model reads them so.
"""

from __future__ import annotations

from typing import Any

import smolagents  # noqa: F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, final_number, message_text, solve
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "smolagents"
AGENTS = ("planner", "calculator")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"
#: A bound on each agent's steps (a planted fault makes the planner retry until then).
MAX_STEPS = 4

SYSTEM = {
    "planner": "You are the planner. Turn the task into one arithmetic expression and ask the calculator for it.",
    "calculator": "You are the calculator. Evaluate the expression with the calculate tool and state the result.",
}


def observation(messages: list[dict[str, Any]]) -> str | None:
    """The latest message's text after "Observation:" when it is an observation (a tool's result)."""
    text = message_text(messages[-1]) if messages else ""
    return text.split("Observation:", 1)[1].strip() if text.startswith("Observation:") else None


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: each agent is recognised by its instructions (in its system prompt)."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages[1:] if m.get("role") == "user"]
    seen = observation(messages)
    if SYSTEM["planner"] in system:
        if seen is not None:
            return Reply(tool_calls=[("final_answer", {"answer": f"{TERMINATION}: {final_number(seen)}"})])
        expression = next((e for e in map(solve, reversed(texts)) if e), None)
        if expression is None:
            return Reply(tool_calls=[("final_answer", {"answer": "I cannot turn this task into arithmetic."})])
        return Reply(tool_calls=[(WORKER, {"task": f"Evaluate {expression}"})])
    if SYSTEM["calculator"] in system:
        if seen is not None:
            return Reply(tool_calls=[("final_answer", {"answer": f"The result is {seen}."})])
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(tool_calls=[("final_answer", {"answer": "There is no expression for me to evaluate."})])
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    return Reply(content="I can only answer as planner or calculator.")


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The planner agent managing the calculator agent; both on the endpoint at ``base_url``."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool
    from smolagents.monitoring import LogLevel

    llm = OpenAIServerModel(model_id=model, api_base=base_url, api_key=api_key, client_kwargs={"max_retries": 0})

    @tool
    def calculate_tool(expression: str) -> str:
        """Evaluate an arithmetic expression (numbers, + - * /, parentheses) and return the result.

        Args:
            expression: the arithmetic expression to evaluate.
        """
        return calculate(expression)

    calculate_tool.name = TOOL
    calculator = ToolCallingAgent(tools=[calculate_tool], model=llm, name="calculator", instructions=SYSTEM["calculator"],
                                  description="Evaluates an arithmetic expression given as its task.",
                                  max_steps=MAX_STEPS, verbosity_level=LogLevel.OFF)
    return ToolCallingAgent(tools=[], model=llm, name="planner", managed_agents=[calculator], instructions=SYSTEM["planner"],
                            max_steps=MAX_STEPS, verbosity_level=LogLevel.OFF)


def run_app(app: Any, task: str) -> str | None:
    """Run the planner; return its final answer."""
    output = app.run(task)
    return None if output is None else str(output)
