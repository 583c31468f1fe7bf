"""AutoGen nested-teams demo: an outer team whose participants are a team and a ``SocietyOfMindAgent``.

``company`` (a RoundRobinGroupChat) runs ``workers`` (a RoundRobinGroupChat of the autogen demo's
planner and calculator) as a participant, then ``review_board``, a ``SocietyOfMindAgent`` whose
inner team ``reviewers`` holds the reviewer and whose own model call sums the inner transcript up.
The inner agents' steps are steps of the outer run, each with its path of teams
(``aegis.agent.path``: ``[company, workers]`` for the planner and calculator, ``[company, reviewers]``
for the reviewer, ``[company]`` for the society's own step).
"""

from __future__ import annotations

from typing import Any

from aegis_probe.demos import autogen
from aegis_probe.demos.autogen import TERMINATION, TOOL, WORKER, closes_after_run, run_app
from aegis_probe.demos.task import EXPECTED, TASK, final_number
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "FRAMEWORK", "SOCIETY", "TASK", "TOOL", "WORKER", "build_app", "policy", "run_app"]

FRAMEWORK = "autogen"
SOCIETY = "review_board"
AGENTS = (*autogen.AGENTS, SOCIETY)
#: The society's summary prompt (``SocietyOfMindAgent.DEFAULT_RESPONSE_PROMPT``, autogen-agentchat 0.7.5).
SUMMARY_PROMPT = "Output a standalone response to the original request"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: the society's summary (the transcript's last number), else the autogen demo's agents."""
    messages = body.get("messages", [])
    if messages and SUMMARY_PROMPT in _text(messages[-1]):
        result = next((final_number(t) for t in map(_text, reversed(messages[:-1])) if final_number(t)), None)
        return Reply(content=f"The total is {result} coins. {TERMINATION}")
    return autogen.policy(body)


def build_app(base_url: str, model: str, api_key: str) -> Any:
    """The nested teams, every agent and the society on the endpoint at ``base_url``."""
    from autogen_agentchat.agents import SocietyOfMindAgent
    from autogen_agentchat.conditions import MaxMessageTermination, SourceMatchTermination, TextMentionTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    client = autogen.model_client(base_url, model, api_key)
    planner, calculator, reviewer = autogen.assistants(client)
    # An inner team gets the outer conversation as its task: it ends when its last agent has spoken.
    workers = RoundRobinGroupChat([planner, calculator], name="workers",
                                  termination_condition=SourceMatchTermination([calculator.name]))
    reviewers = RoundRobinGroupChat([reviewer], name="reviewers", termination_condition=SourceMatchTermination([reviewer.name]))
    society = SocietyOfMindAgent(SOCIETY, team=reviewers, model_client=client)
    done = TextMentionTermination(TERMINATION, sources=[SOCIETY]) | MaxMessageTermination(10)
    return closes_after_run(RoundRobinGroupChat([workers, society], name="company", termination_condition=done), client)
