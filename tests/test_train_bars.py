"""The train command line's progress bars: a command run with its bars off (``--no-progress``, or
standard error not a terminal) turns off the Hugging Face libraries' bars for that command only,
and puts back what it found when it returns or fails (a notebook calling ``main()`` keeps its bars)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from aegis_probe.train import cli
from test_train_data import whowhen_record, write_json

pytestmark = pytest.mark.train
VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def _switches() -> tuple[bool, bool, bool, dict[str, str | None]]:
    """Whether transformers', datasets' and the hub's bars are on, and the variables that set them."""
    import datasets
    import huggingface_hub.utils as hub
    import transformers

    return (transformers.utils.logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled(),
            not hub.are_progress_bars_disabled(), {v: os.environ.get(v) for v in VARIABLES})


@pytest.mark.parametrize("ends", ["returns", "fails"])
def test_a_command_off_a_terminal_leaves_the_libraries_bars_as_it_found_them(ends, tmp_path, capsys) -> None:
    """They were off for the rest of the process (environment variables and switches)."""
    import transformers

    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    argv = ["import", str(src if ends == "returns" else tmp_path / "missing.json"), "-o", str(tmp_path / "o.jsonl")]
    found = _switches()
    assert found[:3] == (True, True, True)
    assert cli.main(argv) == (0 if ends == "returns" else 2)  # captured: not a terminal, so no bars
    assert _switches() == found
    transformers.utils.logging.disable_progress_bar()  # a user's own choice stays too
    try:
        assert cli.main(argv + ["--no-progress"]) == (0 if ends == "returns" else 2)
        assert transformers.utils.logging.is_progress_bar_enabled() is False
    finally:
        transformers.utils.logging.enable_progress_bar()
    capsys.readouterr()


def test_libraries_the_command_imports_get_their_bars_back_after_it(tmp_path) -> None:
    """datasets imported by ``build --hf-dir`` read the quieting variable and kept it (its
    ``enable_progress_bars`` then refuses); transformers, imported meanwhile, read the hub's switch."""
    src = write_json(tmp_path / "ww" / "1.json", whowhen_record())
    script = textwrap.dedent(f"""
        import os, sys
        assert "datasets" not in sys.modules and "transformers" not in sys.modules
        from aegis_probe.train import cli
        assert cli.main(["build", "dcl", {str(src)!r}, "-o", {str(tmp_path / "rows.jsonl")!r},
                         "--hf-dir", {str(tmp_path / "hf")!r}, "--no-progress"]) == 0
        import datasets, transformers
        import huggingface_hub.utils as hub
        print(datasets.is_progress_bar_enabled(), transformers.utils.logging.is_progress_bar_enabled(),
              hub.are_progress_bars_disabled(), os.environ.get("HF_DATASETS_DISABLE_PROGRESS_BARS"))
        datasets.disable_progress_bars(); datasets.enable_progress_bars()  # the user's switch works again
        print(datasets.is_progress_bar_enabled())
    """)
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["True True False None", "True"], done.stdout
