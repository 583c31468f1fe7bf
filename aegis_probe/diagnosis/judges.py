"""The Who&When LLM judges: which agent, at which step, made a failed run's decisive error.

On any OpenAI-compatible endpoint: *all at once* (one call over the whole log), *step by step*
(ask per step whether it is the decisive error, stop at the first yes), *binary search* (ask
which half holds the error until one step is left). ``train eval`` scores them over data sets;
``blame --method judge`` runs them on one stored run. Judges see the rendered trajectory with
nothing protected, so labels cannot shape the text.

:meth:`_Judge.candidates` gives up to k ranked candidate steps (what ``blame --verify`` replays):
all at once asks for k ``agent|step`` lines; step by step walks on past its first yes; binary
search gives its step, then its neighbours nearest first.
"""

from __future__ import annotations

from typing import Any

from ..train.answers import Attribution, parse_agent_step
from ..train.render import render
from ..trajectory import Trajectory

JUDGE_SYSTEM = ("You are judging a failed run of an LLM multi-agent system. Identify the decisive error: "
                "the earliest step whose correction would have made the run succeed.")


class _Judge:
    """Shared plumbing for the LLM judges: an ``openai.OpenAI`` client and a render budget."""

    def __init__(self, *, base_url: str | None = None, model: str, api_key: str | None = None,
                 client: Any = None, max_tokens: int = 8192, temperature: float = 0.0) -> None:
        if client is None:
            import os

            import openai

            base_url = base_url or os.environ.get("OPENAI_BASE_URL")
            if not base_url:
                raise ValueError(f"{type(self).__name__} needs an OpenAI-compatible endpoint: give --base-url "
                                 "(or set OPENAI_BASE_URL)")
            client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed")
        self.client, self.model, self.max_tokens, self.temperature = client, model, max_tokens, temperature
        self.calls = 0

    def ask(self, prompt: str) -> str:
        import openai

        self.calls += 1
        try:
            resp = self.client.chat.completions.create(
                model=self.model, temperature=self.temperature,
                messages=[{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}],
            )
        except openai.APIError as exc:  # unreachable endpoint, bad key, unknown model: one line, no chain
            raise ConnectionError(f"judge endpoint {self.client.base_url}: {type(exc).__name__}: {exc}") from None
        return resp.choices[0].message.content or ""

    def log(self, traj: Trajectory, upto: int | None = None, start: int = 0) -> str:
        """The rendered steps ``start..upto`` (inclusive) with the task, no step protected."""
        steps = [s for s in traj.steps if s.index >= start and (upto is None or s.index <= upto)]
        view = traj.model_copy(update={"steps": steps})
        return render(view, max_tokens=self.max_tokens, protect=())

    def at(self, traj: Trajectory, step: int) -> Attribution:
        agent = traj.steps[step].agent
        return Attribution(agent=agent, step=step, pairs=[(agent, None)])

    def __call__(self, traj: Trajectory) -> Attribution | None:
        found = self.candidates(traj, 1)
        return found[0] if found else None

    def candidates(self, traj: Trajectory, k: int) -> list[Attribution]:
        """Up to ``k`` candidate decisive steps, most likely first."""
        raise NotImplementedError


class AllAtOnceJudge(_Judge):
    """One call over the whole log, answered as ``agent|step`` (k of them, most likely first)."""

    def candidates(self, traj: Trajectory, k: int) -> list[Attribution]:
        if k == 1:
            text = self.ask(f"{self.log(traj)}\n\nWhich agent made the decisive error, at which step? "
                            "Explain briefly, then end with a line `agent|step`.")
            parsed = parse_agent_step(text)
            return [Attribution(agent=parsed[0], step=parsed[1], pairs=[(parsed[0], None)])] if parsed else []
        text = self.ask(f"{self.log(traj)}\n\nWhich agent made the decisive error, at which step? Explain briefly, "
                        f"then end with up to {k} lines `agent|step`, the most likely first.")
        found: list[Attribution] = []
        for line in text.splitlines():
            parsed = parse_agent_step(line)
            if parsed and parsed[1] not in [a.step for a in found]:
                found.append(Attribution(agent=parsed[0], step=parsed[1], pairs=[(parsed[0], None)]))
        return found[:k]


class StepByStepJudge(_Judge):
    """Walks the log; at each step asks whether this step is the decisive error (yes/no)."""

    def candidates(self, traj: Trajectory, k: int) -> list[Attribution]:
        found: list[Attribution] = []
        for step in traj.steps:
            text = self.ask(f"{self.log(traj, upto=step.index)}\n\nIs step {step.index} (by {step.agent}) the "
                            "decisive error? Answer 'yes' or 'no' first, then explain.")
            if text.strip().lower().startswith("yes"):
                found.append(self.at(traj, step.index))
                if len(found) >= k:
                    break
        return found


class BinarySearchJudge(_Judge):
    """Halves the range of candidate steps, asking whether the error is in the upper (earlier) half."""

    def candidates(self, traj: Trajectory, k: int) -> list[Attribution]:
        if not traj.steps:
            return []
        lo, hi = 0, len(traj.steps) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            text = self.ask(f"{self.log(traj, upto=hi, start=lo)}\n\nIs the decisive error in steps {lo}-{mid} "
                            f"(answer 'upper') or in steps {mid + 1}-{hi} (answer 'lower')? Answer with one word first.")
            lo, hi = (lo, mid) if text.strip().lower().startswith("upper") else (mid + 1, hi)
        near = sorted(range(len(traj.steps)), key=lambda s: (abs(s - lo), s))
        return [self.at(traj, s) for s in near[:k]]


JUDGES = {"all-at-once": AllAtOnceJudge, "step-by-step": StepByStepJudge, "binary-search": BinarySearchJudge}
