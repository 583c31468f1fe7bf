"""AutoGen Magentic-One demo: a ``MagenticOneGroupChat`` of a calculator (with a tool) and a reviewer.

The orchestrator writes the task ledger, instructs the calculator, then the reviewer, and gives the
final answer; each of those messages is an ``invoke_agent MagenticOneOrchestrator`` step. The
scripted :func:`policy` answers the orchestrator's prompts (facts, plan, progress ledger as JSON,
final answer) and both agents, from what the conversation holds, as a model would.
"""

from __future__ import annotations

import json
from typing import Any

from aegis_probe.demos.autogen import closes_after_run, model_client, run_app
from aegis_probe.demos.task import EXPECTED, TASK, calculate, expression_in, final_number, solve, message_text
from aegis_probe.modelserver import Reply

__all__ = ["AGENTS", "EXPECTED", "FRAMEWORK", "ORCHESTRATOR", "PARTICIPANTS", "TASK", "TOOL", "WORKER", "build_app", "ledger",
           "policy", "run_app"]

FRAMEWORK = "autogen"
ORCHESTRATOR = "MagenticOneOrchestrator"
PARTICIPANTS = ("calculator", "reviewer")
#: Every agent that takes turns, the orchestrator included (``demo --inject`` and campaigns can target it).
AGENTS = (ORCHESTRATOR, *PARTICIPANTS)
TOOL = "calculate"
#: The agent that does the work (``demo --inject`` faults it by default).
WORKER = "calculator"

SYSTEM = {
    "calculator": "You are the calculator. Evaluate the expression you are given with the calculate tool.",
    "reviewer": "You are the reviewer. Check the calculator's result and state the total.",
}
DESCRIPTION = {
    "calculator": "Evaluates arithmetic expressions with a calculator tool.",
    "reviewer": "Checks results and states the total.",
}
# What the orchestrator's prompts (autogen-agentchat 0.7.5) contain, in the order checked.
LEDGER_PROMPT = "Please output an answer in pure JSON"
FACTS_PROMPT = "pre-survey"
PLAN_PROMPT = "we have assembled the following team"
FINAL_PROMPT = "provide the final answer"
REVIEWED = "checks out"


def ledger(*, done: bool, speaker: str, instruction: str, reason: str = "") -> str:
    """A progress-ledger answer in the JSON shape the orchestrator asks for."""
    entry = {
        "is_request_satisfied": {"reason": reason or ("The reviewer confirmed the total." if done else "Not yet."), "answer": done},
        "is_in_loop": {"reason": "No repetition.", "answer": False},
        "is_progress_being_made": {"reason": "Each turn adds a result.", "answer": True},
        "next_speaker": {"reason": f"{speaker} is next in the plan.", "answer": speaker},
        "instruction_or_question": {"reason": "The next step of the plan.", "answer": instruction},
    }
    return json.dumps(entry)


def _said_by(messages: list[dict[str, Any]], name: str) -> list[str]:
    return [message_text(m) for m in messages if m.get("role") == "user" and m.get("name") == name]


def _orchestrate(messages: list[dict[str, Any]], task: str) -> str:
    """The progress ledger: calculator first, then the reviewer, then done."""
    if any(REVIEWED in t for t in _said_by(messages, "reviewer")):
        return ledger(done=True, speaker="reviewer", instruction="")
    if _said_by(messages, "calculator"):
        return ledger(done=False, speaker="reviewer", instruction="Please check the calculator's result and state the total.")
    return ledger(done=False, speaker="calculator", instruction=f"Please evaluate {solve(task)} with the calculate tool.")


def policy(body: dict[str, Any]) -> Reply:
    """Scripted model for the orchestrator (recognised by its prompts) and both agents (by system prompt)."""
    messages = body.get("messages", [])
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    everything = "\n".join(message_text(m) for m in messages)
    last = message_text(messages[-1]) if messages else ""
    if system.startswith(SYSTEM["calculator"]):
        instruction = next((t for t in reversed(_said_by(messages, ORCHESTRATOR)) if expression_in(t)), "")
        return Reply(tool_calls=[(TOOL, {"expression": expression_in(instruction) or solve(everything) or "0"})])
    if system.startswith(SYSTEM["reviewer"]):
        result = next((final_number(t) for t in reversed(_said_by(messages, "calculator")) if final_number(t)), None)
        return Reply(content=f"The calculator's result {REVIEWED}. The total is {result} coins.")
    if LEDGER_PROMPT in last:
        return Reply(content=_orchestrate(messages, everything))
    if FACTS_PROMPT in last:
        return Reply(content="1. GIVEN OR VERIFIED FACTS\n- The prices and quantities in the request.\n"
                             "2. FACTS TO LOOK UP\n- None.\n3. FACTS TO DERIVE\n- The total cost.\n4. EDUCATED GUESSES\n- None.")
    if PLAN_PROMPT in last:
        return Reply(content="- calculator: evaluate the total.\n- reviewer: check it and state the total.")
    if FINAL_PROMPT in last:
        result = next((final_number(t) for t in reversed(_said_by(messages, "reviewer")) if final_number(t)), None)
        return Reply(content=f"The total is {result} coins.")
    return Reply(content="I can only answer as the orchestrator, calculator or reviewer.")


def build_app(base_url: str, model: str, api_key: str) -> Any:
    """The Magentic-One team, orchestrator and agents on the OpenAI-compatible endpoint at ``base_url``."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import MagenticOneGroupChat
    from autogen_core.tools import FunctionTool

    client = model_client(base_url, model, api_key)
    tool = FunctionTool(calculate, name=TOOL, description="Evaluate an arithmetic expression.")
    agents: list[Any] = [
        AssistantAgent(name, model_client=client, system_message=SYSTEM[name], description=DESCRIPTION[name],
                       tools=[tool] if name == "calculator" else None)
        for name in PARTICIPANTS
    ]
    return closes_after_run(MagenticOneGroupChat(agents, model_client=client, max_turns=10), client)
