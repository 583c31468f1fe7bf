"""Long attributes that repeat an earlier span's value are stored as a reference plus the new tail.

Each LLM call's prompt (``gen_ai.input.messages``) repeats the conversation so far, so a trace
stored verbatim grows with the square of its length. The store writer keeps, per trace, the last
long value of each (span name, agent, attribute) and writes a later value that shares a prefix
with it as ``aegis.store.delta/{key} = [base span id, shared length, tail]``; readers put the
value back together (:func:`expand`). The stored line stays valid OTLP/JSON.
"""

from __future__ import annotations

import logging
from typing import Any, MutableMapping

from . import semconv as sc
from .otlp_json import SpanRecord

logger = logging.getLogger(__name__)

DELTA_PREFIX = "aegis.store.delta/"
#: Values shorter than this are stored as they are; a shared prefix shorter than this is not used.
MIN_SHARED = 256

#: Per trace: (span name, agent, attribute key) -> (span id, last value).
Bases = dict[tuple[Any, Any, str], tuple[str, str]]


def common_prefix(a: str, b: str) -> int:
    """Length of a common prefix of ``a`` and ``b``: all of ``a`` but its last character when
    ``b`` extends it that way (a message list that grew), else the longest (slices compared in C)."""
    if len(b) >= len(a) > 1 and b.startswith(a[:-1]):
        return len(a) - 1
    n = min(len(a), len(b))
    lo, size = 0, 4096
    while lo < n:
        hi = min(n, lo + size)
        if a[lo:hi] != b[lo:hi]:
            while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
                mid = (lo + hi) // 2
                if a[lo:mid] == b[lo:mid]:
                    lo = mid
                else:
                    hi = mid
            return lo if a[lo] != b[lo] else hi
        lo, size = hi, size * 2
    return n


def shrink(rec: SpanRecord, bases: Bases) -> None:
    """Replace ``rec``'s long string attributes that extend a remembered value by deltas (in place)."""
    attrs = rec.attributes
    agent = attrs.get(sc.AGENT_NAME)
    for key, value in [(k, v) for k, v in attrs.items() if type(v) is str and len(v) >= MIN_SHARED]:
        slot = (rec.name, agent, key)
        base = bases.get(slot)
        bases[slot] = (rec.span_id, value)
        if base is None:
            continue
        shared = common_prefix(base[1], value)
        if shared >= MIN_SHARED:
            del attrs[key]
            attrs[DELTA_PREFIX + key] = [base[0], shared, value[shared:]]


def expand(by_span: MutableMapping[tuple[str, str], SpanRecord]) -> None:
    """Put delta attributes back together, in place (``by_span`` keyed by (trace id, span id)).

    A delta whose base span is missing (a store written by a crashed process) is dropped with a
    warning: the span keeps its other attributes.
    """
    for (trace_id, _), rec in by_span.items():
        for dkey in [k for k in rec.attributes if k.startswith(DELTA_PREFIX)]:
            if dkey in rec.attributes:  # not yet resolved as part of another span's chain
                _resolve(by_span, trace_id, rec, dkey)


def _resolve(by_span: MutableMapping[tuple[str, str], SpanRecord], trace_id: str, rec: SpanRecord | None, dkey: str) -> None:
    """Resolve delta ``dkey`` of ``rec`` and of every span on its chain of bases (iteratively)."""
    key = dkey[len(DELTA_PREFIX):]
    chain: list[tuple[SpanRecord, Any]] = []
    value: str | None = None
    while rec is not None and len(chain) <= len(by_span):
        if key in rec.attributes and dkey not in rec.attributes:
            value = rec.attributes[key]
            break
        delta = rec.attributes.get(dkey)
        if not (isinstance(delta, list) and len(delta) == 3 and isinstance(delta[1], int) and isinstance(delta[2], str)):
            break
        chain.append((rec, delta))
        rec = by_span.get((trace_id, str(delta[0])))
    if not isinstance(value, str):
        logger.warning("trace %s: attribute %s of %d span(s) refers to a span that is not stored; left out",
                       trace_id, key, len(chain))
    for rec, delta in reversed(chain):
        del rec.attributes[dkey]
        if isinstance(value, str):
            value = value[: delta[1]] + delta[2]
            rec.attributes[key] = value  # resolved once: later spans of the chain reuse it
