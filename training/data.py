"""Where the shared (not shipped) datasets and the repository's example apps are found."""

from __future__ import annotations

import os
from pathlib import Path

ENV_SHARED_DATA = "AEGIS_SHARED_DATA"
_CHECKOUT = Path(__file__).resolve().parent.parent  # the repository root in a source checkout


def shared_data_dir() -> Path:
    """``$AEGIS_SHARED_DATA``, else the first ``shared/data`` in the working directory or one of
    its parents (a checkout next to ``shared/``), else ``./shared/data`` (which may not exist)."""
    raw = os.environ.get(ENV_SHARED_DATA)
    if raw:
        return Path(raw)
    cwd = Path.cwd()
    for base in (cwd, *cwd.parents):
        if (base / "shared" / "data").is_dir():
            return base / "shared" / "data"
    return cwd / "shared" / "data"


def whowhen_dir(subset: str = "Algorithm-Generated", *, must_exist: bool = False) -> Path:
    """The directory of one Who&When subset; with ``must_exist``, a missing one is a
    ``FileNotFoundError`` that says how to point at the data."""
    path = shared_data_dir() / "whowhen" / subset
    if must_exist and not path.is_dir():
        raise FileNotFoundError(f"Who&When {subset} not found at {path}: set {ENV_SHARED_DATA} to the folder "
                                "holding whowhen/ (see docs/training-data.md, 'Where the data comes from')")
    return path


def examples_dir() -> Path:
    """The repository's ``examples/`` (apps and tasks of the injection benchmarks): the source
    checkout's, else ``./examples``; they are not part of an installed wheel."""
    for candidate in (_CHECKOUT / "examples", Path.cwd() / "examples"):
        if (candidate / "injection").is_dir():
            return candidate
    raise FileNotFoundError("the example apps (examples/injection) were not found: run from a source checkout "
                            "of aegis-probe (they are not installed with the package)")
