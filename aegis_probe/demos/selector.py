"""AutoGen SelectorGroupChat demo: the autogen demo's planner, calculator and reviewer, each turn's
speaker chosen by the model.

Speaker selection adds no turn to the conversation: its model calls are ``chat`` spans naming the
``SelectorGroupChatManager`` (``aegis.llm.purpose = speaker_selection``), outside the steps. The
scripted :func:`policy` picks planner, calculator, reviewer in turn from the conversation it is
shown and answers the agents as the autogen demo's model does.
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos import autogen
from aegis_probe.demos.autogen import AGENTS, TERMINATION, TOOL, WORKER, closes_after_run, run_app
from aegis_probe.demos.task import EXPECTED, TASK
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "FRAMEWORK", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "autogen"
#: The manager's speaker-selection prompt (autogen-agentchat 0.7.5) asks this; the conversation
#: follows its first occurrence and ends where the prompt asks again ("Read the above conversation").
SELECT = "select the next role"
HISTORY_END = "Read the above conversation"


def _prompt(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if isinstance(m.get("content"), str))


def next_speaker(history: str) -> str:
    """The next role after ``history`` (lines ``source: text``): planner, calculator, reviewer."""
    spoke = {line.split(":", 1)[0] for line in history.splitlines() if ":" in line}
    return next((name for name in AGENTS if name not in spoke), AGENTS[-1])


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: the manager's speaker selection, else the autogen demo's agents."""
    prompt = _prompt(body)
    if SELECT in prompt:
        history = prompt.split(SELECT, 1)[1].split(HISTORY_END, 1)[0]
        return Reply(content=next_speaker(history))
    return autogen.policy(body)


def build_app(base_url: str, model: str, api_key: str) -> Any:
    """The SelectorGroupChat, agents and speaker selection on the endpoint at ``base_url``."""
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import SelectorGroupChat

    client = autogen.model_client(base_url, model, api_key)
    termination = TextMentionTermination(TERMINATION) | MaxMessageTermination(10)
    return closes_after_run(SelectorGroupChat(autogen.assistants(client), model_client=client,
                                              termination_condition=termination), client)
