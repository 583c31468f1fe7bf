"""``DCLAttributor``: encoder + head, embedding cache, prediction, and safetensors save/load."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm import tqdm

from ..files import replacing, write_text
from .examples import Example, example_from_row
from .model import DCLHead, DCLOutput, TextEncoder, default_encoder_path, joint_logits
from .reading import FEATURES, ROUND2, check_features

WEIGHTS_FILE = "model.safetensors"
SPEC_FILE = "dcl_config.json"
#: the packaged encoder's width: a features-only head is built with it (its text input stays zeros),
#: so no encoder is loaded to train or attribute
FEATURES_ONLY_DIM = 384
#: the state-dict prefixes of the trained heads (an ensemble's first head, then the others)
HEAD_KEYS = ("head.", "extra_heads.")


def unlabelled(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without its labels: what a prediction reads (a label, even a malformed one, is ignored)."""
    return {**row, "label_agents": [], "label_modes": [], "label_pairs": [], "label_step": None, "positive": None}


def _encoder_dim(directory: str | Path) -> int | None:
    """The encoder width the saved head was trained on (what a features-only model needs instead
    of loading the encoder), or ``None`` when the weights do not say (:meth:`DCLAttributor.load_weights` does)."""
    try:
        with safe_open(str(Path(directory) / WEIGHTS_FILE), "pt") as weights:
            return int(weights.get_slice("head.name_proj.weight").get_shape()[1])
    except Exception:  # safetensors raises its own error types; load_weights names the problem
        return None


class DCLAttributor(nn.Module):
    """A DCL attributor. ``encoder=None`` means the packaged all-MiniLM-L6-v2.

    Whole traces are read: every turn (``max_turns`` 0), each turn in windows of about
    ``max_length`` tokens (at most ``max_chunks`` of them, mean-pooled), turns pooled into agents
    and the run by attention. ``anonymise_agents``: agent names are never shown to the encoder.
    ``modes_trained``: whether training saw mode labels (else no modes or pairs are predicted).
    ``reading_features``: each turn's reading features (:mod:`.reading`) feed the step and agent
    scores (``features``: which of them, default :data:`.reading.FEATURES`); ``text_embeddings``
    false: the head sees no encoder output at all (reading features only: nothing is encoded, so
    nothing domain-specific in the wording can be learnt). ``members`` > 1: a seed ensemble of that
    many heads over the same inputs (:func:`.ensemble.combine`); a prediction averages their joint
    (agent, step) log-scores. Training (:meth:`forward`) uses the first head only.
    """

    def __init__(self, modes: Sequence[str], encoder: str | None = None, hidden_size: int = 256,
                 temperature: float = 0.1, max_length: int = 128, max_turns: int = 0,
                 train_encoder: bool = False, threshold: float = 0.5, max_chunks: int = 8,
                 anonymise_agents: bool = True, modes_trained: bool = True, reading_features: bool = True,
                 text_embeddings: bool = False, encoder_dim: int | None = None,
                 features: Sequence[str] | None = None, members: int = 1) -> None:
        super().__init__()
        features = check_features(FEATURES if features is None else features)
        if not isinstance(members, int) or isinstance(members, bool) or members < 1:
            raise ValueError(f"members must be a whole number >= 1, not {members!r}")
        self.spec: dict[str, Any] = {"modes": list(modes), "encoder": encoder, "hidden_size": hidden_size,
                     "temperature": temperature, "max_length": max_length, "max_turns": max_turns,
                     "train_encoder": train_encoder, "threshold": threshold, "max_chunks": max_chunks,
                     "anonymise_agents": anonymise_agents, "modes_trained": modes_trained,
                     "reading_features": reading_features, "text_embeddings": text_embeddings,
                     "features": features, "members": members}
        self.modes = list(modes)
        if text_embeddings or train_encoder:
            encoder_dim = self.encoder.dim  # loads it: a features-only model never does
        elif encoder_dim is None:
            encoder_dim = FEATURES_ONLY_DIM
        n_features = len(features) if reading_features else 0
        self.head = DCLHead(encoder_dim, hidden_size, len(self.modes), temperature, n_features)
        self.extra_heads = nn.ModuleList(DCLHead(encoder_dim, hidden_size, len(self.modes), temperature, n_features)
                                         for _ in range(members - 1))
        self.cache: dict[str, torch.Tensor] = {}
        self._stored: dict[str, torch.Tensor] = {}  # embeddings read by load_cache, by key

    @property
    def heads(self) -> list[DCLHead]:
        """The ensemble's heads, the first one :attr:`head` (a single model: just that one)."""
        return [self.head, *self.extra_heads]  # type: ignore[list-item]

    @property
    def train_encoder(self) -> bool:
        return bool(self.spec["train_encoder"])

    @property
    def encoder(self) -> TextEncoder:
        """The text encoder (the submodule ``encoder``), loaded on first use: a model without
        ``text_embeddings`` reads no text, so :meth:`load` leaves it unloaded (~1 s saved)."""
        loaded = self._modules.get("encoder")
        if not isinstance(loaded, TextEncoder):
            loaded = TextEncoder(self.spec["encoder"] or default_encoder_path(), int(self.spec["max_length"]))
            loaded.requires_grad_(self.train_encoder)
            loaded.train(self.training and self.train_encoder)
            self._modules["encoder"] = loaded  # not add_module: its hasattr check would call this property
        return loaded

    def train(self, mode: bool = True) -> "DCLAttributor":
        super().train(mode)
        loaded = self._modules.get("encoder")
        if loaded is not None and not self.train_encoder:
            loaded.eval()  # a frozen encoder never runs dropout, so its embeddings can be cached
        return self

    def example(self, row: dict[str, Any], modes_known: bool = True) -> Example:
        return example_from_row(row, self.modes, int(self.spec["max_turns"]), bool(self.spec["anonymise_agents"]),
                                modes_known, bool(self.spec["reading_features"]), self.spec["features"])

    def chunks(self, text: str) -> list[str]:
        """The windows of ``text`` the encoder reads (about ``max_length`` tokens each, at most
        ``max_chunks``; a turn longer than that is read up to there)."""
        words = text.split()
        size = max(1, int(self.spec["max_length"]) * 3 // 4)
        parts = [" ".join(words[i:i + size]) for i in range(0, len(words), size)][: int(self.spec["max_chunks"])]
        return parts or [text]

    def precompute(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> None:
        """Fill the embedding cache for the windows of ``texts`` (frozen encoder only), with a
        progress bar on stderr when ``progress``."""
        if self.train_encoder or not self.spec["text_embeddings"]:
            return
        stored = self._stored
        missing = []
        for c in dict.fromkeys(c for t in texts for c in self.chunks(t) if c not in self.cache):
            key = self._cache_key(c) if stored else None
            if key in stored:
                self.cache[c] = stored[key]
            else:
                missing.append(c)
        starts = range(0, len(missing), batch_size)
        if progress:
            starts = tqdm(starts, desc="encoding turns", unit="batch", file=sys.stderr)
        for i in starts:
            batch = missing[i:i + batch_size]
            for text, emb in zip(batch, self.encoder.encode(batch, batch_size)):
                self.cache[text] = emb

    def _cache_key(self, text: str) -> str:
        return hashlib.sha1(f"{self.encoder.path}|{self.spec['max_length']}|{text}".encode()).hexdigest()

    def load_cache(self, path: str | Path) -> int:
        """Add the embeddings saved by :meth:`save_cache` at ``path`` (if it exists) to the cache;
        returns how many windows it holds. Keys bind the encoder and ``max_length``. A file that
        does not read is an error even for a model that reads no text (it would not use it)."""
        if not Path(path).is_file():
            return 0
        try:
            stored = load_file(str(path))
        except Exception as exc:  # safetensors raises its own error type for a file it cannot read
            raise ValueError(f"{path}: not an embedding cache ({exc}); remove it to start a new one") from None
        if self.train_encoder or not self.spec["text_embeddings"]:
            return 0
        self._stored.update(stored)
        return len(self._stored)

    def save_cache(self, path: str | Path) -> None:
        """Write the cached window embeddings (and those loaded before) to ``path`` (safetensors)."""
        if self.train_encoder or not self.spec["text_embeddings"]:
            return
        tensors = {**self._stored, **{self._cache_key(t): v.contiguous() for t, v in self.cache.items()}}
        with replacing(path) as tmp:  # whole or not at all: Ctrl-C keeps the old cache
            save_file(tensors, tmp)

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """One vector per text: the mean of its windows' embeddings (zeros without ``text_embeddings``)."""
        if not self.spec["text_embeddings"]:
            return torch.zeros(len(texts), self.head.name_proj.in_features)
        pieces = [self.chunks(t) for t in texts]
        flat = [c for p in pieces for c in p]
        if self.train_encoder:
            vectors = self.encoder(flat)
        else:
            self.precompute(texts)
            vectors = torch.stack([self.cache[c] for c in flat])
        owner = torch.tensor([i for i, p in enumerate(pieces) for _ in p])
        sums = torch.zeros(len(texts), vectors.shape[1], dtype=vectors.dtype).index_add(0, owner, vectors)
        return sums / torch.tensor([len(p) for p in pieces], dtype=vectors.dtype).unsqueeze(1)

    def forward(self, ex: Example) -> DCLOutput:
        features = ex.features if self.spec["reading_features"] else None
        return self.head(self.embed(ex.turn_texts), ex.turn_agent, self.embed(ex.agent_texts), features)

    def outputs(self, ex: Example) -> list[DCLOutput]:
        """Every head's output for ``ex`` (its turns embedded once)."""
        features = ex.features if self.spec["reading_features"] else None
        turns, names = self.embed(ex.turn_texts), self.embed(ex.agent_texts)
        return [head(turns, ex.turn_agent, names, features) for head in self.heads]

    @torch.no_grad()
    def predict(self, row: dict[str, Any]) -> dict[str, Any]:
        """(agent, step, modes) with scores for one DCL row (labels, if any, are ignored).

        Agent and step are decoded jointly: the step maximises p(step) * p(agent of that step),
        and the agent is the one acting at it. ``top_pair`` is that agent with its best mode
        (mode ``None`` and no ``modes``/``pairs`` when the model never saw mode labels). An
        ensemble averages its heads' joint log-scores (and their probabilities for the rest).
        """
        self.eval()
        ex = self.example(unlabelled(row))
        outs = self.outputs(ex)

        def mean(part: Callable[[DCLOutput], torch.Tensor]) -> torch.Tensor:
            return torch.stack([part(o) for o in outs]).mean(0)

        agent_p, mode_p = mean(lambda o: o.agent_logits.sigmoid()), mean(lambda o: o.mode_logits.sigmoid())
        pair_p = mean(lambda o: o.pair_logits.sigmoid())
        joint = mean(lambda o: joint_logits(o, ex.turn_agent)).softmax(0)
        t = int(joint.argmax())
        a = int(ex.turn_agent[t])
        best = int(pair_p[a].argmax())  # the predicted agent's most likely mode
        threshold = float(self.spec["threshold"])
        with_modes = bool(self.spec.get("modes_trained", True))
        modes = sorted(((self.modes[m], float(p)) for m, p in enumerate(mode_p) if p >= threshold), key=lambda x: -x[1])
        pairs = [(ex.agents[i], self.modes[m], float(pair_p[i, m])) for i, m in (pair_p >= threshold).nonzero().tolist()]
        return {
            "id": row.get("id"),
            "agent": ex.agents[a],
            "agent_score": float(agent_p[a]),
            "step": t,
            "step_agent": ex.agents[a],
            "step_score": float(joint[t]),
            "modes": [{"mode": m, "score": round(p, 4)} for m, p in modes] if with_modes else [],
            "top_pair": {"agent": ex.agents[a], "mode": self.modes[best] if with_modes else None,
                         "score": round(float(pair_p[a, best]), 4) if with_modes else None},
            "pairs": [{"agent": x, "mode": m, "score": round(p, 4)} for x, m, p in sorted(pairs, key=lambda x: -x[2])]
            if with_modes else [],
            "agents": {name: round(float(p), 4) for name, p in zip(ex.agents, agent_p)},
            "fault_score": float(mean(lambda o: o.fault_logit.sigmoid())),
            "turns_read": len(ex.turn_texts),
        }

    def predict_many(self, rows: Sequence[dict[str, Any]], progress: bool = False) -> list[dict[str, Any]]:
        """:meth:`predict` for many rows: their turns encoded in batches first (frozen encoder), then
        the head on one thread (its ops are tiny); progress bars on stderr when ``progress``."""
        if not self.train_encoder:
            examples = [self.example(unlabelled(r)) for r in rows]
            self.precompute([t for ex in examples for t in (*ex.turn_texts, *ex.agent_texts)], progress=progress)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return [self.predict(r) for r in tqdm(rows, desc="attributing", unit="traj", file=sys.stderr, disable=not progress)]
        finally:
            torch.set_num_threads(threads)

    def weights(self) -> dict[str, torch.Tensor]:
        """The trained tensors: the head, plus the encoder when it was fine-tuned."""
        return {k: v.detach().contiguous() for k, v in self.state_dict().items()
                if k.startswith(HEAD_KEYS) or self.train_encoder}

    def save(self, directory: str | Path) -> Path:
        """Write the weights, then the config that makes ``directory`` loadable, each file whole or
        not at all (an interrupted save leaves no half-written file that loads)."""
        out = Path(directory)
        with replacing(out / WEIGHTS_FILE) as tmp:
            save_file(self.weights(), tmp, metadata={"format": "pt"})
        write_text(out / SPEC_FILE, json.dumps(self.spec, indent=2))
        return out

    def load_weights(self, directory: str | Path) -> None:
        weights = Path(directory) / WEIGHTS_FILE
        try:
            tensors = load_file(weights)
        except Exception as exc:  # safetensors raises its own error type for a file it cannot read
            raise ValueError(f"{weights}: not a safetensors file ({exc})") from None
        try:
            missing, unexpected = self.load_state_dict(tensors, strict=False)
        except RuntimeError as exc:  # tensors of other shapes: another hidden_size, encoder or modes
            shapes = str(exc).split("size mismatch for ", 2)
            first = f": {shapes[1].strip().rstrip('.')}" if len(shapes) > 1 else ""
            raise ValueError(f"{weights}: the weights do not fit this configuration{first}") from None
        missing = [k for k in missing if k.startswith(HEAD_KEYS) or self.train_encoder]
        if missing or unexpected:
            raise ValueError(f"checkpoint {directory} does not fit: missing {missing}, unexpected {unexpected}")

    @classmethod
    def load(cls, directory: str | Path) -> "DCLAttributor":
        """An attributor saved by :meth:`save` (safetensors only; nothing is unpickled)."""
        spec_file = Path(directory) / SPEC_FILE
        if not Path(directory).is_dir():
            raise ValueError(f"{directory}: no such model directory")
        incomplete = ValueError(f"{directory}: not a trained DCL model (no {SPEC_FILE} and {WEIGHTS_FILE}; a training "
                                "run that did not finish leaves none: resume it with dcl --resume)")
        if not spec_file.is_file():
            raise incomplete
        try:
            spec = json.loads(spec_file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{spec_file}: not a DCL model config ({exc})") from None
        if not isinstance(spec, dict):
            raise ValueError(f"{spec_file}: not a DCL model config (a JSON {type(spec).__name__}, not an object)")
        if not (Path(directory) / WEIGHTS_FILE).is_file():
            raise incomplete
        spec.setdefault("anonymise_agents", False)  # saved before names were anonymised
        spec.setdefault("reading_features", False)  # saved before reading features
        spec.setdefault("text_embeddings", True)
        spec.setdefault("features", list(ROUND2))  # saved before the features were named
        try:
            model = cls(**spec, encoder_dim=_encoder_dim(directory))
        except (TypeError, ValueError, AttributeError) as exc:  # a field unknown or of the wrong type
            raise ValueError(f"{spec_file}: not a DCL model config ({exc})") from None
        model.load_weights(directory)
        return model.eval()
