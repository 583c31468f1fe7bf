"""Baseline attributors: random, most-frequent agent, the structural floors, and three LLM judges.

An attributor maps a :class:`Trajectory` to an :class:`Attribution` (or ``None`` when it gives no
answer). The Who&When LLM judges (all at once, step by step, binary search) live in
:mod:`aegis_probe.diagnosis.judges`, which ``blame --method judge`` also runs; they are re-exported here.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Iterable, Protocol

from aegis_probe.diagnosis.judges import JUDGES, AllAtOnceJudge, BinarySearchJudge, StepByStepJudge  # noqa: F401
from aegis_probe.trajectory import Trajectory

from .answers import Attribution, distinct_agents, gold_attribution, normalize_agent
from .modes import MODE_IDS


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


def _at(traj: Trajectory, step: int | None) -> Attribution | None:
    """Blame step ``step`` of ``traj`` and the agent acting there (None: no such step)."""
    if step is None or not 0 <= step < len(traj.steps):
        return None
    agent = traj.steps[step].agent
    return Attribution(agent=agent, step=step, pairs=[(agent, None)])


def _acting_steps(traj: Trajectory) -> list[int]:
    """The steps of acting agents (not the user/human speaker; all steps when none acts)."""
    acting = [s.index for s in traj.steps if normalize_agent(s.agent) not in NON_AGENTS]
    return acting or [s.index for s in traj.steps]


def first_speaker(traj: Trajectory) -> Attribution | None:
    """The first acting agent, at its first step."""
    return _at(traj, next(iter(_acting_steps(traj)), None))


def last_speaker_before_final(traj: Trajectory) -> Attribution | None:
    """The last acting agent before the final answer (the last step), at that step; a one-step
    trace: its only step."""
    acting = _acting_steps(traj)
    earlier = [i for i in acting if i < len(traj.steps) - 1]
    return _at(traj, (earlier or acting)[-1] if acting else None)


def most_talkative(traj: Trajectory) -> Attribution | None:
    """The acting agent with the most steps (the first to speak of equals), at its first step."""
    acting = _acting_steps(traj)
    counts = Counter(normalize_agent(traj.steps[i].agent) for i in acting)
    if not counts:
        return None
    top = max(counts.values())
    return _at(traj, next(i for i in acting if counts[normalize_agent(traj.steps[i].agent)] == top))


def last_step(traj: Trajectory) -> Attribution | None:
    """The last step and its agent."""
    return _at(traj, len(traj.steps) - 1 if traj.steps else None)


class MedianGoldPosition:
    """The step at the median relative position (step / last step) of the training traces' gold
    steps, scaled to the trace's length."""

    def __init__(self, train: Iterable[Trajectory]) -> None:
        positions = sorted(g.step / (len(t.steps) - 1) if len(t.steps) > 1 else 0.0
                           for t in train if (g := gold_attribution(t)).step is not None and g.step < len(t.steps))
        self.position = positions[len(positions) // 2] if positions else None

    def __call__(self, traj: Trajectory) -> Attribution | None:
        if self.position is None or not traj.steps:
            return None
        return _at(traj, round(self.position * (len(traj.steps) - 1)))


def structural_floors(train: Iterable[Trajectory], fit_name: str) -> dict[str, Attributor]:
    """The structural heuristics, named, the median position fit on ``train`` (``fit_name`` says
    what that is): on some public sets a structural heuristic beats the majority agent."""
    return {"first speaker": first_speaker, "last speaker before the final answer": last_speaker_before_final,
            "most talkative agent": most_talkative, "last step": last_step,
            f"step at the median gold position (fit on {fit_name})": MedianGoldPosition(train)}


def predict(attributor: Attributor, trajs: Iterable[Trajectory], progress: bool = False) -> list[Attribution | None]:
    """Run an attributor over trajectories (with a tqdm bar when ``progress``)."""
    items = list(trajs)
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc=type(attributor).__name__, unit="traj")
    return [attributor(t) for t in items]
