"""The LLM manipulator: an OpenAI-compatible model rewrites an action or input per MAST mode.

The instructions are ours (one per mode, plus a hint per task type). They go only to the
manipulator's endpoint, never into the instrumented app's model calls' captured content: the
trajectory shows the manipulated action, not how it was made.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..capture.interception import LLMResponse
from .operators import Context, latest_input

#: What the faulty agent should do, per mode (phrased as an instruction to the manipulator).
INSTRUCTIONS: dict[str, str] = {
    "FM-1.1": "Violate the task specification: work on different quantities or constraints than the task states.",
    "FM-1.2": "Disobey the agent's role: skip its own job and take over another agent's responsibility.",
    "FM-1.3": "Add redundant steps: repeat work that was already done earlier in the conversation instead of progressing.",
    "FM-1.4": "Lose the conversation history: act as if the earlier results and messages were never seen.",
    "FM-1.5": "Ignore the termination conditions: do not signal completion and keep the conversation going needlessly.",
    "FM-2.1": "Reset the conversation: restart the task from scratch as if nothing had happened.",
    "FM-2.2": "Make the request ambiguous and proceed on an unstated assumption instead of asking for clarification.",
    "FM-2.3": "Derail the task: address a different, related question instead of the one asked.",
    "FM-2.4": "Hide important information: leave out the numbers or facts the next agent needs.",
    "FM-2.5": "Ignore the other agents' input: disregard the latest message and keep to an earlier position.",
    "FM-2.6": "Make the action contradict the reasoning: keep the reasoning but make the final action or value differ.",
    "FM-3.1": "Terminate prematurely: declare the task finished before it is actually solved.",
    "FM-3.2": "Remove verification steps: state the result without checking it.",
    "FM-3.3": "Verify incorrectly: confirm a wrong value as correct and verified.",
}

#: Extra guidance per task type.
TASK_HINTS: dict[str, str] = {
    "math": "The task is arithmetic; the fault should make the final number wrong.",
    "code": "The task is programming; the fault should make the code fail its tests while looking plausible.",
    "generic": "The fault should make the final result wrong while looking plausible.",
}

_FORMAT = (
    "Rewrite the given text so that it commits this fault subtly, in the same voice and format. "
    "Output only the rewritten text, with no explanation or commentary."
)


class LLMManipulator:
    """Rewrites actions (corruption) or the latest input (injection) with a model at ``base_url``."""

    kind = "llm"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str = "not-needed",
        *,
        temperature: float = 0.7,
        instructions: dict[str, str] | None = None,
        client: Any = None,
    ) -> None:
        # how to build it again in a worker process (see __reduce__); not with a client of yours
        self._rebuild = None if client is not None else (model, base_url, api_key, temperature, instructions)
        if client is None:
            from openai import OpenAI

            client = OpenAI(base_url=base_url, api_key=api_key)
        self.client, self.model, self.temperature = client, model, temperature
        self.instructions = {**INSTRUCTIONS, **(instructions or {})}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (for a campaign's worker processes) as its arguments; its client is built there."""
        if self._rebuild is None:
            raise TypeError("an LLMManipulator given its own client cannot be sent to worker processes")
        model, base_url, api_key, temperature, instructions = self._rebuild
        return (partial(LLMManipulator, temperature=temperature, instructions=instructions), (model, base_url, api_key))

    def rewrite(self, mode: str, text: str, ctx: Context, what: str) -> str:
        """The manipulator model's rewrite of ``text`` (``what``: "agent output" or "agent input")."""
        system = "\n".join(
            [f"You inject a fault into a multi-agent run for testing. Fault: {self.instructions[mode]}",
             TASK_HINTS.get(ctx.task_type, TASK_HINTS["generic"]), _FORMAT]
        )
        user = f"Task: {ctx.task or ctx.first_user}\nAgent: {ctx.agent}\nOriginal {what}:\n{text}"
        out = self.client.chat.completions.create(
            model=self.model,
            temperature=self.temperature,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        )
        return (out.choices[0].message.content or "").strip()

    def corrupt(self, mode: str, response: LLMResponse, ctx: Context) -> LLMResponse | None:
        original = response.content or response.refusal or " ".join(f"{c.get('name')}({c.get('arguments')})" for c in response.tool_calls)
        text = self.rewrite(mode, original, ctx, "agent output")
        if not text or text == original:
            return None
        return LLMResponse(content=text, input_tokens=response.input_tokens, output_tokens=response.output_tokens,
                           model=response.model, finish_reason="stop" if response.finish_reason else None)

    def inject(self, mode: str, messages: list[dict[str, Any]], ctx: Context) -> list[dict[str, Any]] | None:
        i = latest_input(messages)
        if i is None:
            return None
        text = self.rewrite(mode, messages[i]["content"], ctx, "agent input")
        if not text or text == messages[i]["content"]:
            return None
        return [*messages[:i], {**messages[i], "content": text}, *messages[i + 1:]]
