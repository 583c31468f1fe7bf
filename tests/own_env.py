"""Running a framework's tests in the environment of its own (.venv-<name>, built by
scripts/install-dev.sh) from the main suite: for frameworks whose pins cannot share the main
environment (see README.md, "Installing the extras")."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSIDE = "running inside the framework's own environment"


def importable(module: str) -> bool:
    """Whether ``module`` (dotted) can be imported here, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def run_in_own_env(venv: str, test_file: str, keyword: str, env: dict[str, str] | None = None) -> None:
    """Run ``test_file`` and the shared conformance and replay suites' ``keyword`` cases with
    ``venv``'s Python; fail with their output unless all passed (skips other than the wrapper's own
    count as failures: a missing dependency must not pass silently). Skips when ``venv`` is absent."""
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {venv}: build it with scripts/install-dev.sh")
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file,
         "tests/test_conformance.py", "tests/test_replay.py", "-k", keyword],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all(INSIDE in line for line in skips), skips
    assert " passed" in proc.stdout.strip().splitlines()[-1]
