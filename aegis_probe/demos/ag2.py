"""AG2 demo (the classic ``autogen`` API): a round-robin ``GroupChat`` of planner, calculator
(which calls and executes the ``calculate`` tool) and reviewer, started by a ``user`` proxy.

The app is the ``GroupChatManager``; every assistant uses ag2's OpenAI client on the given
endpoint (``cache_seed=None``: no disk cache).
"""

from __future__ import annotations

from typing import Any

import autogen  # noqa: F401  (ImportError here, not in build_app, when the framework is missing)

from aegis_probe.demos.task import EXPECTED, EXPRESSION, TASK, calculate, message_text, team_policy

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


#: Scripted model: each agent is recognised by its system message and acts on what it sees.
policy = team_policy(SYSTEM, TOOL, "The calculator's result checks out. FINAL ANSWER: {result} " + TERMINATION)


def _is_done(message: dict[str, Any]) -> bool:
    return TERMINATION in message_text(message)


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
