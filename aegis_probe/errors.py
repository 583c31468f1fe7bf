"""The base of every error aegis-probe raises at its users (bad files, plans, replays, data)."""

from __future__ import annotations

import re

_EMBEDDED_TRACEBACK = re.compile(r"\s*(?:Traceback:\s*)?Traceback \(most recent call last\):.*$")


class AegisProbeError(Exception):
    """Base class of aegis-probe's own errors; catch it to handle any of them."""


def one_line(message: str) -> str:
    """An error message on one line, without the traceback some libraries put in it (autogen's
    ``RuntimeError`` carries its cause's, Ray's task errors theirs): that is for ``-v``."""
    return _EMBEDDED_TRACEBACK.sub("", " ".join(message.split()))
