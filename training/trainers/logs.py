"""Progress and metrics logging: one JSON object per line in ``<out>/log.jsonl``."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping

from transformers import TrainerCallback

from aegis_probe.storage.jsonl import read_jsonl

LOG_FILE = "log.jsonl"
logger = logging.getLogger("aegis_probe.train")


class JsonlLog:
    """Appends metric records to ``<out_dir>/log.jsonl`` and echoes them to the logger."""

    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / LOG_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: Mapping[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        line = json.dumps({"time": round(time.time(), 3), **clean}, default=str)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        logger.info("%s", line)


def read_log(out_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``<out_dir>/log.jsonl``, in order."""
    path = Path(out_dir) / LOG_FILE
    return read_jsonl(path) if path.exists() else []


class JsonlLogCallback(TrainerCallback):
    """Writes every ``Trainer`` log event (loss, rewards, lr, ...) to ``log.jsonl`` (main process only)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.log = JsonlLog(out_dir)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - TrainerCallback API
        if state.is_world_process_zero and logs:
            self.log.write({"step": state.global_step, "epoch": state.epoch, **logs})
