"""Google ADK demo: a ``SequentialAgent`` of a planner and a calculator agent with a tool.

``planner`` turns the task into one arithmetic expression; ``calculator`` (run next by the
sequential agent, reading the planner's turn) evaluates it with its ``calculate`` tool and states
the result as the final answer. Both agents' model is :class:`OpenAICompatibleLlm`, a small ADK
``BaseLlm`` calling the real openai client for the given endpoint (ADK's ``LiteLlm`` reaches the
same servers, tests/test_google_adk.py runs it too); an ``InMemoryRunner`` runs the team.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator

from google.adk.models.base_llm import BaseLlm  # ImportError here, not in build_app, when the framework is missing
from pydantic import Field

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, final_number, message_text, solve
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "OpenAICompatibleLlm",
           "build_app", "policy", "run_app"]

FRAMEWORK = "google-adk"
AGENTS = ("planner", "calculator")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "FINAL ANSWER"
TEAM = "math_team"
APP_NAME = "aegis_demo"

SYSTEM = {
    "planner": "You are the planner. Turn the task into one arithmetic expression for the calculator.",
    "calculator": "You are the calculator. Evaluate the planner's expression with the calculate tool and state the result.",
}
#: ADK's finish reasons by OpenAI's.
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}


class OpenAICompatibleLlm(BaseLlm):
    """An ADK model on an OpenAI-compatible chat-completions endpoint, through the openai client."""

    base_url: str
    api_key: str = Field(repr=False)

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[Any, None]:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        params: dict[str, Any] = {"model": llm_request.model or self.model, "messages": _messages(llm_request)}
        tools = _tools(llm_request)
        if tools:
            params["tools"] = tools
        completion = await client.chat.completions.create(**params)
        yield _response(completion)


def _messages(request: Any) -> list[dict[str, Any]]:
    """OpenAI chat messages of an ADK ``LlmRequest``."""
    system = request.config.system_instruction
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if isinstance(system, str) and system else []
    for content in request.contents:
        parts = content.parts or []
        text = "\n".join(p.text for p in parts if p.text)
        calls = [p.function_call for p in parts if p.function_call is not None]
        if content.role == "model":
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [{"id": c.id, "type": "function",
                                          "function": {"name": c.name, "arguments": json.dumps(c.args or {})}} for c in calls]
            out.append(message)
            continue
        out.extend({"role": "tool", "tool_call_id": p.function_response.id, "content": json.dumps(p.function_response.response)}
                   for p in parts if p.function_response is not None)
        if text:
            out.append({"role": "user", "content": text})
    return out


def _tools(request: Any) -> list[dict[str, Any]]:
    declarations = [d for tool in request.config.tools or () for d in getattr(tool, "function_declarations", None) or ()]
    return [{"type": "function", "function": {
        "name": d.name, "description": d.description or "",
        "parameters": d.parameters_json_schema or (d.parameters.model_dump(mode="json", exclude_none=True) if d.parameters
                                                    else {"type": "object", "properties": {}})}} for d in declarations]


def _response(completion: Any) -> Any:
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    choice = completion.choices[0]
    parts = [types.Part(text=choice.message.content)] if choice.message.content else []
    parts += [types.Part(function_call=types.FunctionCall(id=c.id, name=c.function.name, args=json.loads(c.function.arguments or "{}")))
              for c in choice.message.tool_calls or ()]
    usage = completion.usage
    return LlmResponse(
        content=types.Content(role="model", parts=parts), model_version=completion.model,
        finish_reason=types.FinishReason[_FINISH.get(choice.finish_reason or "stop", "OTHER")],
        usage_metadata=None if usage is None else types.GenerateContentResponseUsageMetadata(
            prompt_token_count=usage.prompt_tokens, candidates_token_count=usage.completion_tokens),
    )


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: each agent is recognised by its instruction (the system message)."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [message_text(m) for m in messages if m.get("role") == "user"]
    if system.startswith(SYSTEM["planner"]):
        expression = next((e for e in map(solve, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="I cannot turn this task into arithmetic; I have no plan.")
        return Reply(content=f"Evaluate {expression}")
    if system.startswith(SYSTEM["calculator"]):
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return Reply(content=f"{TERMINATION}: {final_number(message_text(last))}")
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    return Reply(content="I can only answer as planner or calculator.")


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The sequential team: the planner, then the calculator with its tool; both on ``base_url``."""
    from google.adk.agents import LlmAgent, SequentialAgent

    llm = OpenAICompatibleLlm(model=model, base_url=base_url, api_key=api_key)
    planner = LlmAgent(name="planner", model=llm, instruction=SYSTEM["planner"],
                       description="Turns the task into an arithmetic expression.")
    calculator = LlmAgent(name="calculator", model=llm, instruction=SYSTEM["calculator"], tools=[calculate],
                          description="Evaluates the expression with its calculate tool.")
    return SequentialAgent(name=TEAM, sub_agents=[planner, calculator])


async def _run(app: Any, task: str) -> str | None:
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    runner = InMemoryRunner(agent=app, app_name=APP_NAME)
    session = await runner.session_service.create_session(app_name=APP_NAME, user_id="user")
    answer: str | None = None
    message = types.Content(role="user", parts=[types.Part(text=task)])
    async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
        if event.content is not None and event.content.role == "model" and not event.partial:
            answer = "\n".join(p.text for p in event.content.parts or () if p.text) or answer
    await runner.close()
    return answer


def run_app(app: Any, task: str) -> str | None:
    """Run the team on an in-memory runner; return the last text an agent wrote."""
    return asyncio.run(_run(app, task))
