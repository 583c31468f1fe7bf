"""Fixers propose a corrected action for one step of a failed run.

``AnalyzerFixer`` asks an analyzer LLM on any OpenAI-compatible endpoint for a minimal fix of
step t given the trajectory and the feedback. The expected answer is shown only when
``show_expected`` is set, and then the analyzer is told to fix the reasoning or action, not to
write the final answer in.
"""

from __future__ import annotations

from ..report.steptable import transcript
from ..trajectory import Trajectory

_INSTRUCTION = (
    "You are debugging a failed multi-agent run. Rewrite the output of step {t} (agent {agent}) so "
    "that it is correct and helpful, changing as little as possible. Keep the agent's role and "
    "format. Reply with the corrected step output only."
)


class AnalyzerFixer:
    """A fixer backed by an LLM (``openai`` client; any OpenAI-compatible endpoint)."""

    def __init__(self, base_url: str, model: str, api_key: str, *, show_expected: bool = False,
                 temperature: float = 0.0, max_tokens: int = 512) -> None:
        import openai

        self.client = openai.OpenAI(base_url=base_url, api_key=api_key)
        self.model, self.show_expected = model, show_expected
        self.temperature, self.max_tokens = temperature, max_tokens
        self.tokens = 0

    def __call__(self, traj: Trajectory, t: int) -> str | None:
        step = traj.steps[t]
        feedback = f"The run failed. Final answer: {traj.outcome.answer!r}."
        if self.show_expected and traj.outcome.expected:
            feedback += (f" The expected answer is {traj.outcome.expected!r}; do not state it in your fix"
                         " unless the step itself computes it.")
        prompt = f"Task: {traj.task}\n\n{transcript(traj)}\n\n{feedback}\n\n" + _INSTRUCTION.format(t=t, agent=step.agent)
        reply = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}],
            temperature=self.temperature, max_tokens=self.max_tokens,
        )
        if reply.usage:
            self.tokens += reply.usage.total_tokens
        text = (reply.choices[0].message.content or "").strip()
        return text or None
