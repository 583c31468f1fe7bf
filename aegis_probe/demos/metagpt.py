"""MetaGPT demo: a Planner, a Calculator and a Reviewer ``Team`` solve the shop arithmetic task.

The Planner writes a plan (``WritePlan``), the Calculator asks the model for the expression and
evaluates it with the shared ``calculate`` helper (``Calculate``, the demo's tool), and the
Reviewer checks the result and gives the final answer (``Review``). Each role watches the action
before it, so the team needs three rounds; idle roles run every round and act in none.

metagpt 0.8.2 reads its config when ``metagpt`` is first imported and fails without an ``llm:``
section. Importing this module first points ``METAGPT_PROJECT_ROOT`` at a temporary directory
holding a placeholder config (an unreachable loopback endpoint), so no user config is needed and
metagpt's ``logs/`` and ``workspace/`` land there instead of the working directory;
:func:`build_app` then gives the team a ``Context`` whose config talks to the real endpoint.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..modelserver import Reply
from .task import EXPECTED, EXPRESSION, TASK, calculate, expression_in, solve

FRAMEWORK = "metagpt"
AGENTS = ("Planner", "Calculator", "Reviewer")
TOOL = "Calculate"
WORKER = "Calculator"
#: Rounds of ``Team.run``: one per role in the chain (the team stops early once all are idle).
N_ROUNDS = 3

_PLACEHOLDER_CONFIG = """\
llm:
  api_type: openai
  base_url: http://127.0.0.1:9/v1
  api_key: sk-placeholder-set-by-build-app
  model: placeholder
  stream: false
  calc_usage: false
"""


def _bootstrap_config() -> None:
    """Make ``import metagpt`` work without ~/.metagpt: a throwaway project root with a config.

    Does nothing when metagpt is already imported or ``METAGPT_PROJECT_ROOT`` is set. The
    variable is set only while metagpt reads it (at import) and removed again afterwards.
    """
    if "metagpt.const" in sys.modules or os.environ.get("METAGPT_PROJECT_ROOT"):
        return
    root = Path(tempfile.mkdtemp(prefix="aegis-metagpt-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    (root / "config").mkdir()
    (root / "config" / "config2.yaml").write_text(_PLACEHOLDER_CONFIG)
    os.environ["METAGPT_PROJECT_ROOT"] = str(root)
    try:
        import metagpt.const  # noqa: F401  (fixes METAGPT_ROOT)
        import metagpt.roles  # noqa: F401  (reads the config; must precede metagpt.team)
    finally:
        del os.environ["METAGPT_PROJECT_ROOT"]


_bootstrap_config()

from metagpt.actions import Action, UserRequirement  # noqa: E402
from metagpt.config2 import Config  # noqa: E402
from metagpt.context import Context  # noqa: E402
from metagpt.roles import Role  # noqa: E402
from metagpt.schema import Message  # noqa: E402
from metagpt.team import Team  # noqa: E402


def _history(messages: list[Message]) -> str:
    return "\n".join(f"{m.role}: {m.content}" for m in messages)


class WritePlan(Action):
    """Ask the model for a short plan that names the arithmetic to do."""

    name: str = "WritePlan"

    async def run(self, history: list[Message]) -> str:
        return await self._aask(f"Task:\n{_history(history)}\n\nWrite a short plan. Name the arithmetic expression to evaluate.")


class Calculate(Action):
    """Ask the model for the expression, then evaluate it with the calculator."""

    name: str = "Calculate"

    async def run(self, history: list[Message]) -> str:
        expression = await self._aask(
            f"Conversation:\n{_history(history)}\n\nReply with only the arithmetic expression to evaluate."
        )
        expression = expression.strip().strip("`").strip()
        return f"{expression} = {calculate(expression)}"


class Review(Action):
    """Ask the model to check the calculation and state the final answer."""

    name: str = "Review"

    async def run(self, history: list[Message]) -> str:
        return await self._aask(
            f"Conversation:\n{_history(history)}\n\nCheck the calculation and reply with 'FINAL ANSWER: <number>'."
        )


class DemoRole(Role):
    """A role with one action that reacts to the messages of one upstream action."""

    def __init__(self, action: type[Action], watch: type[Action], **data: Any) -> None:
        super().__init__(**data)
        self.set_actions([action])
        self._watch([watch])


def llm_context(base_url: str, model: str, api_key: str) -> Context:
    """A metagpt ``Context`` whose LLMs call ``model`` at ``base_url`` (pass it to every Role and Team).

    Roles and actions create their LLM from the context they are built with, so a role built
    without it would talk to the placeholder endpoint.
    """
    config = Config.from_llm_config(
        {"api_type": "openai", "base_url": base_url, "model": model, "api_key": api_key,
         "stream": False, "calc_usage": False}
    )
    return Context(config=config)


def build_app(base_url: str, model: str, api_key: str) -> Team:
    """A three-role ``Team`` whose every model call goes to ``base_url`` through the openai client."""
    ctx = llm_context(base_url, model, api_key)
    specs = (
        ("Planner", "plan how to solve the task", WritePlan, UserRequirement),
        ("Calculator", "compute the numbers exactly with the calculator", Calculate, WritePlan),
        ("Reviewer", "check the result and give the final answer", Review, Calculate),
    )
    roles = [
        DemoRole(action, watch, name=name, profile=name, goal=goal, context=ctx)
        for name, goal, action, watch in specs
    ]
    team = Team(context=ctx)
    team.hire(roles)
    return team


async def _run_and_close(app: Team, task: str) -> None:
    """Run the team, then close its roles' and actions' HTTP clients inside the same event loop."""
    try:
        await app.run(n_round=N_ROUNDS, idea=task)
    finally:
        llms = [r.llm for r in app.env.roles.values()] + [a.llm for r in app.env.roles.values() for a in r.actions]
        for client in {id(c): c for c in (getattr(llm, "aclient", None) for llm in llms) if c is not None}.values():
            await client.close()


def run_app(app: Team, task: str) -> str | None:
    """Run the team on ``task`` and return the Reviewer's last message (None if it never spoke)."""
    asyncio.run(_run_and_close(app, task))
    reviewer = app.env.get_role("Reviewer")
    reviews = reviewer.rc.memory.get_by_action(Review) if reviewer else []
    return reviews[-1].content if reviews else None


def _agent(body: dict[str, Any]) -> str | None:
    system = next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "system"), "")
    found = re.search(r"named (\w+)", system)
    return found.group(1) if found else None


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model: plan the task's arithmetic, give the expression, then read back the calculator result."""
    prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") != "system")
    agent = _agent(body)
    if agent == "Planner":
        expression = solve(prompt)
        if expression is None:
            return Reply("I cannot turn this task into arithmetic; I have no plan.")
        return Reply(f"Plan: the Calculator should evaluate {expression}.")
    if agent == "Calculator":
        plan = prompt.rpartition("\n\nReply with only")[0]  # the conversation, without the instruction
        return Reply(expression_in(plan) or "0")
    if agent == "Reviewer":
        result = re.search(r"= (-?\d+(?:\.\d+)?)\s*$", prompt, re.MULTILINE)
        return Reply(f"The calculation is correct. FINAL ANSWER: {result.group(1)}" if result else "FINAL ANSWER: unknown")
    return Reply("I have nothing to add.")


__all__ = ["FRAMEWORK", "TASK", "EXPECTED", "EXPRESSION", "AGENTS", "TOOL", "WORKER", "policy", "build_app", "run_app"]
