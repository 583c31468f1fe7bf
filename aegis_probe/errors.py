"""The base of every error aegis-probe raises at its users (bad files, plans, replays, data)."""

from __future__ import annotations


class AegisProbeError(Exception):
    """Base class of aegis-probe's own errors; catch it to handle any of them."""
