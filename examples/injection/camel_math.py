"""CAMEL example app for injection campaigns: a RolePlaying society (Customer instructs, Calculator
computes with its tool) built per task, with a scripted model that solves every task of
math_tasks.jsonl. The demo's ``run_app`` drives it.

``python -m aegis_probe inject --app examples/injection/camel_math.py:build_app
--tasks examples/injection/math_tasks.jsonl --plans-per-run 4 --out inject-out``
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos.camel import AGENTS, ASSISTANT, DONE, USER, run_app
from aegis_probe.demos.task import calculate
from aegis_probe.modelserver import Reply
from scripted import expression_in, final_number, plan_expression, message_text

__all__ = ["AGENTS", "TERMINATION", "build_app", "policy", "run_app"]

TERMINATION = DONE


def build_app(base_url: str, model: str, api_key: str, task: str) -> Any:
    """A ``RolePlaying`` society for ``task`` (its task is fixed at construction)."""
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.societies import RolePlaying
    from camel.toolkits import FunctionTool
    from camel.types import ModelPlatformType

    backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type=model,
                                  url=base_url, api_key=api_key, token_counter=StubTokenCounter())
    return RolePlaying(assistant_role_name=ASSISTANT, user_role_name=USER, task_prompt=task, with_task_specify=False,
                       model=backend, assistant_agent_kwargs={"tools": [FunctionTool(calculate)]})


def policy(body: dict[str, Any]) -> Reply:
    """Customer: instruct from the task, end once a solution came back; Calculator: compute, report."""
    messages = body.get("messages", [])
    system = next((message_text(m) for m in messages if m.get("role") == "system"), "")
    last = messages[-1] if messages else {}
    if f"you are a {USER}" in system:
        if any(m.get("role") == "user" and "Solution:" in message_text(m) for m in messages):
            return Reply(content=DONE)
        expression = plan_expression(system)
        if expression is None:
            return Reply(content="Instruction: Work out the answer to the task.\nInput: None")
        return Reply(content=f"Instruction: Use the calculate tool to compute {expression}.\nInput: None")
    if last.get("role") == "tool":
        return Reply(content=f"Solution: the result is {message_text(last)}. Next request.")
    if DONE in message_text(last):
        result = next((final_number(message_text(m)) for m in reversed(messages)
                       if m.get("role") == "assistant" and "Solution:" in message_text(m)), None)
        return Reply(content=f"The task is done: the result is {result}.")
    expression = expression_in(message_text(last))
    if expression is None:
        return Reply(content="Solution: I cannot find anything to compute. Next request.")
    return Reply(tool_calls=[("calculate", {"expression": expression})])
