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


def validation_summary(exc: BaseException) -> str | None:
    """pydantic's ``ValidationError`` on one line, its first error (``Model: field: msg (and N more)``),
    without the documentation link pydantic appends; ``None`` for any other exception."""
    errors = getattr(exc, "errors", None)
    title = getattr(exc, "title", None)
    if not callable(errors) or title is None:
        return None
    try:
        found = errors()
        first = found[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or title
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        return f"{title}: {where}: {first.get('msg')}{more}"
    except Exception:  # noqa: BLE001 - not the shape expected: the caller's plain message
        return None
