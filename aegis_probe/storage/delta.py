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

from .otlp_json import SpanRecord

logger = logging.getLogger(__name__)

DELTA_PREFIX = "aegis.store.delta/"
#: Values shorter than this are stored as they are; a shared prefix shorter than this is not used.
MIN_SHARED = 256

#: Common endings longer than this are not looked for (:func:`common_prefix`).
_SUFFIX_MAX = 32

#: Per trace: (span name, agent, attribute key) -> (span id, last value).
Bases = dict[tuple[Any, Any, str], tuple[str, str]]


#: Long strings their producer built from an earlier one: id(value) -> (value, base, shared
#: length), taken by the store writer (:func:`shorten`) so that it need not compare them. Kept
#: only once a store is in the process (:func:`want_hints`), and at most ``_HINT_CHARS`` characters.
_HINTS: dict[int, tuple[str, str, int]] = {}
_HINT_CHARS = 1 << 24
_hint_chars = 0
_wanted = False


def want_hints() -> None:
    """Start keeping :func:`note_extension`'s hints (a store span processor exists to take them)."""
    global _wanted
    _wanted = True


def note_extension(value: str, base: str, shared: int) -> None:
    """Tell the store that ``value[:shared] == base[:shared]``, because the caller built ``value``
    from ``base`` (a prompt's JSON that extends the last prompt's): its delta against ``base``
    then costs the store nothing proportional to their length."""
    global _hint_chars
    if _wanted and len(value) >= MIN_SHARED and shared >= MIN_SHARED:
        if _hint_chars > _HINT_CHARS:  # hints no writer took (spans not stored): forget them
            _HINTS.clear()
            _hint_chars = 0
        _HINTS[id(value)] = (value, base, shared)
        _hint_chars += len(value)


def _hinted_prefix(base: str, value: str) -> int | None:
    """The shared length :func:`note_extension` gave for ``value`` built from ``base``, if any."""
    global _hint_chars
    hint = _HINTS.pop(id(value), None)
    if hint is None:
        return None
    _hint_chars -= len(hint[0])
    return hint[2] if hint[0] is value and hint[1] is base else None


def common_prefix(a: str, b: str) -> int:
    """Length of a common prefix of ``a`` and ``b``: all of ``a`` but its last character when
    ``b`` extends it that way (a message list that grew), else the longest.

    A list that grew (``b`` extends all of ``a`` but its ``]``) or a value that grew inside its
    closing characters (a single message's text: ``..."}]}]``) costs one comparison in C: the
    prefix before the two strings' common ending is compared at once, and the few characters
    after it by bisection. Otherwise slices of ``a`` are compared with ``b`` in doubling chunks.
    """
    last = len(a) - 1
    if a is b and last > 0:
        return last
    if len(b) > last > 0:
        k = max(0, last - _SUFFIX_MAX)  # the characters before a's last first: b extends all of a but it?
        if b.startswith(a[k:last], k) and b.startswith(a[:k]):
            return last
        lo, hi = 0, min(_SUFFIX_MAX, last)  # the common ending's length (each shorter one is common too)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if b.endswith(a[-mid:]):
                lo = mid
            else:
                hi = mid - 1
        shared = last + 1 - max(lo, 1)
        if b.startswith(a[:shared]):
            return _shared_up_to(a, b, shared, last)
    n = min(len(a), len(b))
    lo, size = 0, 4096
    while lo < n:
        hi = min(n, lo + size)
        if not b.startswith(a[lo:hi], lo):
            return _shared_up_to(a, b, lo, hi - 1)
        lo, size = hi, size * 2
    return n


def _shared_up_to(a: str, b: str, lo: int, hi: int) -> int:
    """The largest ``m <= hi`` with ``a[:m] == b[:m]``, given ``a[:lo] == b[:lo]`` (bisection in C)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.startswith(a[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def shorten(bases: Bases, slot: tuple[Any, Any, str], span_id: str, value: str) -> list[Any] | None:
    """The delta ``[base span id, shared length, tail]`` of a long string attribute of span
    ``span_id`` against the last value of its ``slot`` (span name, agent, key) in ``bases``, or
    None to store it whole. ``value`` becomes the slot's base either way."""
    base = bases.get(slot)
    bases[slot] = (span_id, value)
    if base is None:
        return None
    shared = (_hinted_prefix(base[1], value) if _HINTS else None) or common_prefix(base[1], value)
    return [base[0], shared, value[shared:]] if shared >= MIN_SHARED else None


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
