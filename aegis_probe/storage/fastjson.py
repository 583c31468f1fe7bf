"""JSON decoding on the trace read path (store lines, message attributes): msgspec, about twice
as fast as the standard library, which still decodes what msgspec refuses (lone surrogate escapes,
``NaN``, ``1e400``, UTF-16 bytes, deep nesting), so the values and errors are the standard
library's."""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``, through msgspec when it can."""
    try:
        return _decode(data)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # ValueError: a str that is not UTF-8
        return json.loads(data)
