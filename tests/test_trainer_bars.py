"""``train sft``/``grpo`` off a terminal: transformers' tqdm bars are off unless asked for
(``disable_tqdm`` defaults to true when standard error is not a terminal; a value given wins)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_trainers import parser, sft_rows, tiny_qwen  # noqa: F401  (fixtures)

pytestmark = pytest.mark.train


def _sft_into_a_pipe(model: Path, rows: Path, out: Path, *options: str) -> str:
    """What ``python -m aegis_probe.train sft`` (2 steps) writes to standard error, a pipe."""
    done = subprocess.run([sys.executable, "-m", "aegis_probe.train", "sft", "--data", str(rows), "--model", str(model),
                           "--out", str(out), "--max_steps", "2", "--save_steps", "2", "--report_to", "none", *options],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TQDM_DISABLE": ""})
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_sft_draws_no_bars_into_a_pipe_unless_asked(tiny_qwen, sft_rows, tmp_path) -> None:  # noqa: F811
    """transformers' training bar ("100%|##########| 2/2 [00:01<00:00, ...it/s]") went into pipes and
    logs, with its "Loading weights" and datasets' "Tokenizing train dataset" (sft has no --no-progress)."""
    assert "%|" not in _sft_into_a_pipe(tiny_qwen, sft_rows, tmp_path / "quiet")
    asked = _sft_into_a_pipe(tiny_qwen, sft_rows, tmp_path / "asked", "--disable_tqdm", "false").splitlines()
    assert [line for line in asked if "%|" in line and "2/2 [" in line], asked


def test_sft_and_grpo_help_say_when_bars_are_off() -> None:
    for name in ("sft", "grpo"):
        text = " ".join(parser(name)._subparsers._group_actions[0].choices[name].format_help().split())
        assert "(default: true when standard error is not a terminal, else transformers' rule)" in text, name
