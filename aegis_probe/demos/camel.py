"""CAMEL demo: a ``RolePlaying`` society where a Customer instructs a Calculator that has a tool.

The Customer asks for the arithmetic of the task; the Calculator calls ``calculate`` and
answers; the Customer then says ``CAMEL_TASK_DONE`` and the loop ends. The model is reached through CAMEL's
OpenAI-compatible backend (the real openai client); ``StubTokenCounter`` avoids tiktoken downloads.
"""

from __future__ import annotations

from typing import Any

from ..modelserver import Reply
from .task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, final_number, solve

FRAMEWORK = "camel"
ASSISTANT, USER = "Calculator", "Customer"
AGENTS: tuple[str, ...] = (ASSISTANT, USER)
TOOL = "calculate"
WORKER = ASSISTANT
MAX_ROUNDS = 4
DONE = "CAMEL_TASK_DONE"

__all__ = ["FRAMEWORK", "TASK", "EXPECTED", "EXPRESSION", "AGENTS", "TOOL", "WORKER", "policy", "build_app", "run_app"]


def _speaker(body: dict[str, Any]) -> str:
    """Which role-playing agent sent the request (CAMEL's system prompts say who they are)."""
    system = next((str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system"), "")
    return USER if f"you are a {USER}" in system else ASSISTANT


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: instruct the task's arithmetic, compute it with the tool, answer, then end."""
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    texts = [str(m.get("content") or "") for m in messages]
    if _speaker(body) == USER:
        expression = next((e for e in map(solve, texts) if e), None)  # the task is in the system prompt
        if expression is None:
            return Reply(content=f"I cannot turn this task into arithmetic. {DONE}")
        result = calculate(expression)
        if any(m.get("role") == "user" and final_number(str(m.get("content"))) == result for m in messages):
            return Reply(content=DONE)
        return Reply(content=f"Instruction: Use the calculate tool to compute {expression}.\nInput: None")
    if last.get("role") == "tool":
        return Reply(content=f"Solution: the result is {last.get('content')}. Next request.")
    if DONE in str(last.get("content")):
        answer = next((final_number(t) for t in reversed(texts[:-1]) if final_number(t)), None)
        return Reply(content=f"The task is done: the answer is {answer}.")
    expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
    if expression is None:
        return Reply(content="There is no expression for me to compute. Next request.")
    return Reply(tool_calls=[(TOOL, {"expression": expression})])


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """A ``RolePlaying`` society for ``task`` on an OpenAI-compatible endpoint; the Calculator has the tool."""
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.societies import RolePlaying
    from camel.toolkits import FunctionTool
    from camel.types import ModelPlatformType

    backend = ModelFactory.create(
        model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL,
        model_type=model,
        url=base_url,
        api_key=api_key,
        token_counter=StubTokenCounter(),
    )
    return RolePlaying(
        assistant_role_name=ASSISTANT,
        user_role_name=USER,
        task_prompt=task,
        with_task_specify=False,
        model=backend,
        assistant_agent_kwargs={"tools": [FunctionTool(calculate)]},
    )


def run_app(app: Any, task: str) -> str | None:
    """Play rounds until the Customer says CAMEL_TASK_DONE (or an agent terminates); return the answer."""
    if task != app.task_prompt:
        raise ValueError("a RolePlaying society's task is fixed when it is built (see build_app)")
    message = app.init_chat()
    answer = None
    for _ in range(MAX_ROUNDS):
        assistant, user = app.step(message)
        if assistant.msgs:
            message = assistant.msgs[-1]
            answer = message.content if final_number(message.content) else answer
        if assistant.terminated or user.terminated or any(DONE in m.content for m in user.msgs):
            break
    return answer
