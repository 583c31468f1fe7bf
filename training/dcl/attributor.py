"""``DCLAttributor``: encoder + head, embedding cache, prediction, and safetensors save/load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .examples import Example, example_from_row, name_text
from .model import DCLHead, DCLOutput, TextEncoder, default_encoder_path

WEIGHTS_FILE = "model.safetensors"
SPEC_FILE = "dcl_config.json"


class DCLAttributor(nn.Module):
    """A DCL attributor. ``encoder=None`` means the packaged all-MiniLM-L6-v2."""

    def __init__(self, modes: Sequence[str], encoder: str | None = None, hidden_size: int = 256,
                 temperature: float = 0.1, max_length: int = 128, max_turns: int = 64,
                 train_encoder: bool = False, threshold: float = 0.5) -> None:
        super().__init__()
        self.spec = {"modes": list(modes), "encoder": encoder, "hidden_size": hidden_size,
                     "temperature": temperature, "max_length": max_length, "max_turns": max_turns,
                     "train_encoder": train_encoder, "threshold": threshold}
        self.modes = list(modes)
        self.encoder = TextEncoder(encoder or default_encoder_path(), max_length)
        self.encoder.requires_grad_(train_encoder)
        self.head = DCLHead(self.encoder.dim, hidden_size, len(self.modes), temperature)
        self.cache: dict[str, torch.Tensor] = {}

    @property
    def train_encoder(self) -> bool:
        return bool(self.spec["train_encoder"])

    def train(self, mode: bool = True) -> "DCLAttributor":
        super().train(mode)
        if not self.train_encoder:
            self.encoder.eval()  # a frozen encoder never runs dropout, so its embeddings can be cached
        return self

    def example(self, row: dict[str, Any]) -> Example:
        return example_from_row(row, self.modes, int(self.spec["max_turns"]))

    def precompute(self, texts: Sequence[str], batch_size: int = 64) -> None:
        """Fill the embedding cache for ``texts`` (frozen encoder only)."""
        if self.train_encoder:
            return
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        for text, emb in zip(missing, self.encoder.encode(missing, batch_size)):
            self.cache[text] = emb

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        if self.train_encoder:
            return self.encoder(texts)
        self.precompute(texts)
        return torch.stack([self.cache[t] for t in texts])

    def forward(self, ex: Example) -> DCLOutput:
        turns = self.embed(ex.turn_texts)
        names = self.embed([name_text(a) for a in ex.agents])
        return self.head(turns, ex.turn_agent, names)

    @torch.no_grad()
    def predict(self, row: dict[str, Any]) -> dict[str, Any]:
        """(agent, step, modes) with scores for one DCL row (labels, if any, are ignored);
        ``top_pair`` is the predicted agent with its best mode, whatever the threshold."""
        self.eval()
        ex = self.example({**row, "label_agents": [], "label_modes": [], "label_step": None, "positive": None})
        out = self(ex)
        agent_p, mode_p = out.agent_logits.sigmoid(), out.mode_logits.sigmoid()
        pair_p, step_p = out.pair_logits.sigmoid(), out.step_logits.softmax(0)
        a, t = int(agent_p.argmax()), int(step_p.argmax())
        best = int(pair_p[a].argmax())  # the predicted agent's most likely mode
        threshold = float(self.spec["threshold"])
        modes = sorted(((self.modes[m], float(p)) for m, p in enumerate(mode_p) if p >= threshold), key=lambda x: -x[1])
        pairs = [(ex.agents[i], self.modes[m], float(pair_p[i, m])) for i, m in (pair_p >= threshold).nonzero().tolist()]
        return {
            "id": row.get("id"),
            "agent": ex.agents[a],
            "agent_score": float(agent_p[a]),
            "step": t,
            "step_agent": ex.agents[int(ex.turn_agent[t])],
            "step_score": float(step_p[t]),
            "modes": [{"mode": m, "score": round(p, 4)} for m, p in modes],
            "top_pair": {"agent": ex.agents[a], "mode": self.modes[best], "score": round(float(pair_p[a, best]), 4)},
            "pairs": [{"agent": x, "mode": m, "score": round(p, 4)} for x, m, p in sorted(pairs, key=lambda x: -x[2])],
            "agents": {name: round(float(p), 4) for name, p in zip(ex.agents, agent_p)},
            "fault_score": float(out.fault_logit.sigmoid()),
        }

    def weights(self) -> dict[str, torch.Tensor]:
        """The trained tensors: the head, plus the encoder when it was fine-tuned."""
        return {k: v.detach().contiguous() for k, v in self.state_dict().items()
                if k.startswith("head.") or self.train_encoder}

    def save(self, directory: str | Path) -> Path:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        save_file(self.weights(), out / WEIGHTS_FILE, metadata={"format": "pt"})
        (out / SPEC_FILE).write_text(json.dumps(self.spec, indent=2), encoding="utf-8")
        return out

    def load_weights(self, directory: str | Path) -> None:
        missing, unexpected = self.load_state_dict(load_file(Path(directory) / WEIGHTS_FILE), strict=False)
        missing = [k for k in missing if k.startswith("head.") or self.train_encoder]
        if missing or unexpected:
            raise ValueError(f"checkpoint {directory} does not fit: missing {missing}, unexpected {unexpected}")

    @classmethod
    def load(cls, directory: str | Path) -> "DCLAttributor":
        """An attributor saved by :meth:`save` (safetensors only; nothing is unpickled)."""
        spec = json.loads((Path(directory) / SPEC_FILE).read_text(encoding="utf-8"))
        model = cls(**spec)
        model.load_weights(directory)
        return model.eval()
