"""AG2 demo (the classic ``autogen`` API): a round-robin ``GroupChat`` of planner, calculator
(which calls and executes the ``calculate`` tool) and reviewer, started by a ``user`` proxy.

The app is the ``GroupChatManager``; every assistant uses ag2's OpenAI client on the given
endpoint (``cache_seed=None``: no disk cache).
"""

from __future__ import annotations

from typing import Any

import autogen  # noqa: F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, final_number, solve
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "EXPRESSION", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "ag2"
AGENTS = ("user", "planner", "calculator", "reviewer")
TOOL = "calculate"
WORKER = "calculator"
TERMINATION = "TERMINATE"
MAX_ROUND = 8

SYSTEM = {
    "planner": "You are the planner. Break the task into one arithmetic expression for the calculator.",
    "calculator": "You are the calculator. Evaluate expressions with the calculate tool.",
    "reviewer": f"You are the reviewer. Check the result, state 'FINAL ANSWER: <number>' and end with {TERMINATION}.",
}


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: each agent is recognised by its system message and acts on what it sees."""
    messages = body.get("messages", [])
    system = _text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    texts = [_text(m) for m in messages[1:]]
    if system.startswith(SYSTEM["planner"]):
        expression = next((e for e in map(solve, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="I cannot turn this task into arithmetic; I have no plan.")
        return Reply(content=f"Plan: the answer is {expression}. Calculator, please evaluate it.")
    if system.startswith(SYSTEM["calculator"]):
        expression = next((e for e in map(expression_in, reversed(texts)) if e), None)
        if expression is None:
            return Reply(content="There is no expression for me to evaluate.")
        return Reply(tool_calls=[(TOOL, {"expression": expression})])
    if system.startswith(SYSTEM["reviewer"]):
        result = next((final_number(t) for t in reversed(texts) if final_number(t)), None)
        return Reply(content=f"The calculator's result checks out. FINAL ANSWER: {result} {TERMINATION}")
    return Reply(content="I can only answer as planner, calculator or reviewer.")


def _is_done(message: dict[str, Any]) -> bool:
    return TERMINATION in _text(message)


def build_app(base_url: str, model: str, api_key: str, task: str = TASK) -> Any:
    """The ``GroupChatManager`` of the team, every assistant on the endpoint at ``base_url``."""
    from autogen import AssistantAgent, GroupChat, GroupChatManager, UserProxyAgent, register_function

    entry = {"model": model, "base_url": base_url, "api_key": api_key, "max_retries": 0, "price": [0, 0]}
    llm_config = {"config_list": [entry], "cache_seed": None, "temperature": 0}
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False, default_auto_reply="")
    assistants = {name: AssistantAgent(name, system_message=SYSTEM[name], llm_config=llm_config)
                  for name in ("planner", "calculator", "reviewer")}
    register_function(calculate, caller=assistants["calculator"], executor=assistants["calculator"], name=TOOL,
                      description="Evaluate an arithmetic expression.")
    chat = GroupChat(agents=[user, *assistants.values()], messages=[], max_round=MAX_ROUND,
                     speaker_selection_method="round_robin")
    return GroupChatManager(chat, name="arithmetic", llm_config=False, is_termination_msg=_is_done, silent=True)


def run_app(app: Any, task: str) -> str | None:
    """The ``user`` proxy starts the group chat with ``task``; return the last message's text."""
    user = next(a for a in app.groupchat.agents if a.name == "user")
    result = user.initiate_chat(app, message=task, silent=True, summary_method="last_msg")
    return result.summary or None
