"""Loading base models: Hugging Face directories and GGUF files."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from ..files import PARTIAL, partial_dir, replacing_dir
from .logs import LOG_FILE

logger = logging.getLogger("aegis_probe.train")


def gguf_to_hf(gguf_file: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Dequantize a GGUF checkpoint once into a plain Hugging Face directory (safetensors).

    Reuses ``out_dir`` when it already holds a converted model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, src = Path(out_dir), Path(gguf_file)
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        return out  # complete: the conversion is renamed into place only when done
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quantized = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(quantized)(config)  # a plain, serialisable copy of the dequantized weights
    model.load_state_dict(quantized.state_dict())
    with replacing_dir(out) as partial:  # an interrupted conversion leaves no cache that looks complete
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
    logger.info("converted %s to %s", src, out)
    return out


ENV_CACHE_DIR = "AEGIS_CACHE_DIR"


def gguf_cache_dir(gguf_file: str | os.PathLike[str]) -> Path:
    """Where a GGUF file's converted copy lives: ``$AEGIS_CACHE_DIR`` (default
    ``$XDG_CACHE_HOME/aegis-probe``, i.e. ``~/.cache/aegis-probe``) ``/models/<name>-<key>``, the key
    naming the file's absolute path, size and mtime; never beside the file (e.g. in site-packages)."""
    src = Path(gguf_file).resolve()
    stat = src.stat()
    key = hashlib.sha256(f"{src}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    root = os.environ.get(ENV_CACHE_DIR) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aegis-probe"
    return Path(root) / "models" / f"{src.stem}-{key}"


#: The folder of an ``sft``/``grpo`` output directory (``--out``) that holds its final model.
FINAL_MODEL = "model"


def _model_dir(path: Path) -> Path:
    """The model directory ``path`` stands for: itself, or the final model of a training run's
    ``--out`` (``<out>/model``). A partly saved model (a save that failed or was killed) is a
    ``ValueError`` naming it, as is a run's ``--out`` that has no final model yet."""
    if path.name.endswith("." + PARTIAL):
        raise ValueError(f"{path}: a partly saved model (a save that failed or was stopped left it), never loaded")
    if not path.is_dir():
        return path
    final, partial = path / FINAL_MODEL, partial_dir(path / FINAL_MODEL)
    if final.is_dir():
        if partial.exists():
            logger.warning("%s: loading the final model saved earlier; %s is a later save that did not finish",
                           final, partial.name)
        return final
    if partial.exists():
        raise ValueError(f"{path}: its final model was not saved completely ({partial.name} is what a save that "
                         "failed or was stopped left); rerun the training command to save it (--resume continues "
                         "from its last checkpoint)")
    if (path / "config.json").exists() or (path / "adapter_config.json").exists():
        return path  # a model directory (or a run's --out from before the final model had a folder of its own)
    if (path / LOG_FILE).exists() or any(path.glob("checkpoint-*")):
        raise ValueError(f"{path}: a training run without its final model (it has not finished); continue it with "
                         "--resume, or load one of its checkpoint-N directories")
    return path


def resolve_model_path(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A Hugging Face model directory for ``path``; a ``.gguf`` file is converted once into
    ``cache_dir`` (default: :func:`gguf_cache_dir`); an ``sft``/``grpo`` output directory stands
    for its final model (:func:`_model_dir`)."""
    p = Path(path)
    if not p.exists():  # else transformers reads it as a Hub repo id, and says the name is malformed
        raise ValueError(f"{path}: no model directory or .gguf file there (nothing is downloaded)")
    if p.suffix == ".gguf":
        return gguf_to_hf(p, cache_dir or gguf_cache_dir(p))
    return _model_dir(p)


def load_causal_lm(path: str | os.PathLike[str], dtype: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a model directory or ``.gguf`` file; pad token set if missing."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = resolve_model_path(path)
    torch_dtype = getattr(torch, dtype) if dtype and dtype != "auto" else ("auto" if dtype else None)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
