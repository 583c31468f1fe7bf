"""GRPO reward functions in TRL's shape: ``reward(completions, **columns) -> list[float]``.

``completions`` are strings or chat message lists; the dataset columns arrive as keyword lists
(one value per completion): ``gold_pairs`` for the Aegis reward, ``gold_agent`` and ``gold_step``
for the AgenTracer reward (see :func:`~aegis_probe.train.builders.build_grpo`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .answers import completion_text, has_reasoning, normalize_agent, parse_agent_step, parse_pairs
from .modes import normalize_mode

AGENTRACER_LAMBDA = 0.5
AGENTRACER_SIGMA = 1.0


def hierarchical_score(pred: list[tuple[str, str | None]] | None, gold: Sequence[Sequence[Any]]) -> float:
    """The Aegis hierarchical reward of one parsed prediction against gold ``[[agent, mode], ...]``.

    ``None`` (unparseable) scores -1. Otherwise start at 0.1; empty gold gives 1.1 for an empty
    prediction, else 0.1. Duplicates: -0.3 per extra prediction of an already predicted agent,
    -0.15 per extra of an already predicted mode. Each predicted pair: +1.0 if it is a gold pair
    (each gold pair is credited once), else +0.3 if its agent is a gold agent not yet credited,
    else +0.1 if its agent is not gold but its mode is a gold mode not yet credited, else -0.2.
    -0.1 per prediction beyond twice the gold count. The sum is divided by (gold pairs + 0.1).
    Agents compare lower-cased without spaces; a gold pair credits its agent and mode too.
    """
    if pred is None:
        return -1.0
    gold_pairs = {(normalize_agent(a), normalize_mode(m)) for a, m in gold}
    if not gold_pairs:
        return 1.1 if not pred else 0.1
    gold_agents = {a for a, _ in gold_pairs}
    gold_modes = {m for _, m in gold_pairs if m}
    score = 0.1
    seen_agents: set[str] = set()
    seen_modes: set[str] = set()
    credited_pairs: set[tuple[str, str | None]] = set()
    credited_agents: set[str] = set()
    credited_modes: set[str] = set()
    for agent, mode in pred:
        agent = normalize_agent(agent)
        if agent in seen_agents:
            score -= 0.3
        if mode and mode in seen_modes:
            score -= 0.15
        seen_agents.add(agent)
        if mode:
            seen_modes.add(mode)
        pair = (agent, mode)
        if pair in gold_pairs and pair not in credited_pairs:
            score += 1.0
            credited_pairs.add(pair)
            credited_agents.add(agent)
            if mode:
                credited_modes.add(mode)
        elif agent in gold_agents and agent not in credited_agents:
            score += 0.3
            credited_agents.add(agent)
        elif agent not in gold_agents and mode in gold_modes and mode not in credited_modes:
            score += 0.1
            credited_modes.add(mode)  # type: ignore[arg-type]
        else:
            score -= 0.2
    score -= 0.1 * max(0, len(pred) - 2 * len(gold_pairs))
    return score / (len(gold_pairs) + 0.1)


def aegis_hierarchical_reward(completions: list[Any], gold_pairs: list[Sequence[Sequence[Any]]], **kwargs: Any) -> list[float]:
    """Aegis hierarchical reward per completion (see :func:`hierarchical_score`)."""
    return [hierarchical_score(parse_pairs(completion_text(c)), g or []) for c, g in zip(completions, gold_pairs)]


def multigranular_score(text: str, gold_agent: str | None, gold_step: int | None,
                        lam: float = AGENTRACER_LAMBDA, sigma: float = AGENTRACER_SIGMA) -> float:
    """R = format_ok * (lam * exp(-(t_hat - t*)^2 / 2 sigma^2) + (1 - lam) * [agent == gold agent]).

    ``format_ok`` needs a non-empty ``<think>`` block and a parseable ``agent|step`` answer. A
    missing gold agent or step makes its term 0.
    """
    parsed = parse_agent_step(text)
    if parsed is None or not has_reasoning(text):
        return 0.0
    agent, step = parsed
    step_term = math.exp(-((step - gold_step) ** 2) / (2 * sigma**2)) if gold_step is not None else 0.0
    agent_term = 1.0 if gold_agent is not None and normalize_agent(agent) == normalize_agent(gold_agent) else 0.0
    return lam * step_term + (1 - lam) * agent_term


def agentracer_multigranular_reward(completions: list[Any], gold_agent: list[str | None],
                                    gold_step: list[int | None], **kwargs: Any) -> list[float]:
    """AgenTracer multi-granular reward per completion (sigma 1, lambda 0.5)."""
    return [multigranular_score(completion_text(c), a, s) for c, a, s in zip(completions, gold_agent, gold_step)]
