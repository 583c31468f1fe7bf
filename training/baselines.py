"""Baseline attributors: random, most-frequent agent, and three LLM judges.

An attributor maps a :class:`Trajectory` to an :class:`Attribution` (or ``None`` when it gives no
answer). The judges follow the Who&When methods on any OpenAI-compatible endpoint: *all at once*
(one call over the whole log), *step by step* (ask per step whether it is the decisive error,
stop at the first yes), *binary search* (ask which half holds the error until one step is left).
Judges see the rendered trajectory with nothing protected, so labels cannot shape the text.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Iterable, Protocol

from aegis_probe.trajectory import Trajectory

from .answers import Attribution, distinct_agents, gold_attribution, normalize_agent, parse_agent_step
from .modes import MODE_IDS
from .render import render


class Attributor(Protocol):
    def __call__(self, traj: Trajectory) -> Attribution | None: ...


#: Speakers that stand for the person using the system, never blamed by the random baseline.
NON_AGENTS = frozenset({"user", "human"})


def acting_agents(traj: Trajectory) -> list[str]:
    """The agents that act in ``traj`` (order of first appearance), without the user/human speaker."""
    everyone = distinct_agents(traj.agents)  # "Coder" and "coder" are one agent
    return [a for a in everyone if normalize_agent(a) not in NON_AGENTS] or everyone


class RandomBaseline:
    """A uniformly random acting agent (not the user), step, and mode; seeded."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def __call__(self, traj: Trajectory) -> Attribution | None:
        if not traj.steps:
            return None
        agent = self.rng.choice(acting_agents(traj))
        step = self.rng.randrange(len(traj.steps))
        return Attribution(agent=agent, step=step, pairs=[(agent, self.rng.choice(MODE_IDS))])


def expected_random(traj: Trajectory, gold: Attribution) -> tuple[float, float]:
    """The expected (agent, step) hit rate of a uniformly random acting agent and step on one trace."""
    return (1 / len(acting_agents(traj)) if traj.steps and gold.agent is not None else 0.0,
            1 / len(traj.steps) if traj.steps and gold.step is not None else 0.0)


class MostFrequentAgent:
    """The most frequent gold agent (and mode) of the training trajectories.

    With ``present_only`` it predicts the most frequent gold agent that acts in the trajectory
    (falling back to the overall majority). The step is that agent's first step.
    """

    def __init__(self, train: Iterable[Trajectory], present_only: bool = False) -> None:
        golds = [gold_attribution(t) for t in train]
        named = distinct_agents(g.agent for g in golds if g.agent)  # each agent as first spelt
        spelling = {normalize_agent(a): a for a in named}
        counts = Counter(normalize_agent(g.agent) for g in golds if g.agent)
        self.ranking = [spelling[a] for a, _ in counts.most_common()]
        modes = Counter(m for g in golds for _, m in g.pairs if m).most_common(1)
        self.mode = modes[0][0] if modes else None
        self.present_only = present_only

    def __call__(self, traj: Trajectory) -> Attribution | None:
        if not self.ranking:
            return None
        agent = self.ranking[0]
        if self.present_only:
            acting = {normalize_agent(a) for a in traj.agents}
            agent = next((a for a in self.ranking if normalize_agent(a) in acting), agent)
        step = next((s.index for s in traj.steps if normalize_agent(s.agent) == normalize_agent(agent)), None)
        return Attribution(agent=agent, step=step, pairs=[(agent, self.mode)])


class MostFrequentStep:
    """The most frequent gold step index of the training trajectories (clipped to the trace's
    last step), blaming the agent acting there."""

    def __init__(self, train: Iterable[Trajectory]) -> None:
        golds = [gold_attribution(t) for t in train]
        steps = Counter(g.step for g in golds if g.step is not None).most_common(1)
        modes = Counter(m for g in golds for _, m in g.pairs if m).most_common(1)
        self.step = steps[0][0] if steps else None
        self.mode = modes[0][0] if modes else None

    def __call__(self, traj: Trajectory) -> Attribution | None:
        if self.step is None or not traj.steps:
            return None
        step = min(self.step, len(traj.steps) - 1)
        agent = traj.steps[step].agent
        return Attribution(agent=agent, step=step, pairs=[(agent, self.mode)])


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


class AllAtOnceJudge(_Judge):
    """One call over the whole log, answered as ``agent|step``."""

    def __call__(self, traj: Trajectory) -> Attribution | None:
        text = self.ask(f"{self.log(traj)}\n\nWhich agent made the decisive error, at which step? "
                        "Explain briefly, then end with a line `agent|step`.")
        parsed = parse_agent_step(text)
        if parsed is None:
            return None
        return Attribution(agent=parsed[0], step=parsed[1], pairs=[(parsed[0], None)])


class StepByStepJudge(_Judge):
    """Walks the log; at each step asks whether this step is the decisive error (yes/no)."""

    def __call__(self, traj: Trajectory) -> Attribution | None:
        for step in traj.steps:
            text = self.ask(f"{self.log(traj, upto=step.index)}\n\nIs step {step.index} (by {step.agent}) the "
                            "decisive error? Answer 'yes' or 'no' first, then explain.")
            if text.strip().lower().startswith("yes"):
                return self.at(traj, step.index)
        return None


class BinarySearchJudge(_Judge):
    """Halves the range of candidate steps, asking whether the error is in the upper (earlier) half."""

    def __call__(self, traj: Trajectory) -> Attribution | None:
        if not traj.steps:
            return None
        lo, hi = 0, len(traj.steps) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            text = self.ask(f"{self.log(traj, upto=hi, start=lo)}\n\nIs the decisive error in steps {lo}-{mid} "
                            f"(answer 'upper') or in steps {mid + 1}-{hi} (answer 'lower')? Answer with one word first.")
            lo, hi = (lo, mid) if text.strip().lower().startswith("upper") else (mid + 1, hi)
        return self.at(traj, lo)


JUDGES = {"all-at-once": AllAtOnceJudge, "step-by-step": StepByStepJudge, "binary-search": BinarySearchJudge}


def predict(attributor: Attributor, trajs: Iterable[Trajectory], progress: bool = False) -> list[Attribution | None]:
    """Run an attributor over trajectories (with a tqdm bar when ``progress``)."""
    items = list(trajs)
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc=type(attributor).__name__, unit="traj")
    return [attributor(t) for t in items]
