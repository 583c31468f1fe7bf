"""Any value as JSON text, never failing: what a span records of a structured value (a graph's
state, a node's writes, a tool's result)."""

from __future__ import annotations

import json
from typing import Any


def json_text(value: Any) -> str:
    """``value`` as JSON text: keys JSON cannot have (a tuple, a date) by their text, a container
    inside itself as ``{...}``/``[...]`` (as Python shows it), other values by ``str``; a value too
    deep for that as Python's text of it."""
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):  # keys JSON cannot have, a cycle
        pass
    try:
        return json.dumps(_plain(value, frozenset()), default=str, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _plain(value: Any, above: frozenset[int]) -> Any:
    """``value`` with every dict key JSON cannot have replaced by its text, and every dict or list
    inside itself (``above``: the ids of those it is in) by ``{...}``/``[...]``."""
    if not isinstance(value, (dict, list, tuple)):
        return value
    if id(value) in above:
        return "{...}" if isinstance(value, dict) else "[...]"
    above = above | {id(value)}
    if isinstance(value, dict):
        return {k if k is None or isinstance(k, (str, int, float)) else str(k): _plain(v, above)
                for k, v in value.items()}
    return [_plain(v, above) for v in value]
