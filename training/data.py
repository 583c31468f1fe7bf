"""Where the shared (not shipped) datasets live."""

from __future__ import annotations

import os
from pathlib import Path

ENV_SHARED_DATA = "AEGIS_SHARED_DATA"
REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """``$AEGIS_SHARED_DATA``, else ``<repo>/../shared/data``."""
    raw = os.environ.get(ENV_SHARED_DATA)
    return Path(raw) if raw else REPO_ROOT.parent / "shared" / "data"


def whowhen_dir(subset: str = "Algorithm-Generated") -> Path:
    """The directory of one Who&When subset (may not exist)."""
    return shared_data_dir() / "whowhen" / subset
