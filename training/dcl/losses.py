"""The DCL losses: multi-label classification, contrastive clean-vs-faulty ranking within a group,
and hierarchical consistency (a pair's probability never above its agent's or its mode's)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .examples import Example
from .model import DCLOutput, joint_logits


@dataclass
class LossParts:
    classification: Tensor
    contrastive: Tensor
    hierarchy: Tensor


def classification_loss(out: DCLOutput, ex: Example) -> Tensor:
    """BCE over the run's agents, the mode bank, the pairs and faultiness, plus cross-entropy over
    turns of the joint (agent, step) score for the decisive step, each where its target is known."""
    terms = []
    if ex.agent_target is not None:
        terms.append(F.binary_cross_entropy_with_logits(out.agent_logits, ex.agent_target))
    if ex.mode_target is not None:
        terms.append(F.binary_cross_entropy_with_logits(out.mode_logits, ex.mode_target))
    if ex.pair_target is not None:
        terms.append(F.binary_cross_entropy_with_logits(out.pair_logits, ex.pair_target))
    if ex.step is not None:  # the (agent, step) pair as one answer, as it is decoded
        terms.append(F.cross_entropy(joint_logits(out, ex.turn_agent).unsqueeze(0), torch.tensor([ex.step])))
    if ex.positive is not None:
        terms.append(F.binary_cross_entropy_with_logits(out.fault_logit, torch.tensor(float(not ex.positive))))
    return torch.stack(terms).sum() if terms else out.fault_logit.sum() * 0.0


def contrastive_loss(outs: list[DCLOutput], exs: list[Example]) -> Tensor:
    """Within each group, every faulty run must score as more faulty than the group's clean runs:
    mean of ``softplus(fault(clean) - fault(faulty))`` over (clean, faulty) pairs."""
    groups: dict[str, tuple[list[Tensor], list[Tensor]]] = {}
    for out, ex in zip(outs, exs):
        if ex.positive is None:
            continue
        clean, faulty = groups.setdefault(ex.group, ([], []))
        (clean if ex.positive else faulty).append(out.fault_logit)
    terms = [F.softplus(c - f) for clean, faulty in groups.values() for c in clean for f in faulty]
    return torch.stack(terms).mean() if terms else outs[0].fault_logit.sum() * 0.0


def hierarchy_loss(out: DCLOutput) -> Tensor:
    """Mean violation of p(agent, mode) <= p(agent) and p(agent, mode) <= p(mode)."""
    pair = out.pair_logits.sigmoid()
    over_agent = F.relu(pair - out.agent_logits.sigmoid().unsqueeze(1))
    over_mode = F.relu(pair - out.mode_logits.sigmoid().unsqueeze(0))
    return (over_agent + over_mode).mean()


def dcl_losses(outs: list[DCLOutput], exs: list[Example]) -> LossParts:
    """The three losses of a batch, each averaged over its runs."""
    return LossParts(
        classification=torch.stack([classification_loss(o, e) for o, e in zip(outs, exs)]).mean(),
        contrastive=contrastive_loss(outs, exs),
        hierarchy=torch.stack([hierarchy_loss(o) for o in outs]).mean(),
    )
