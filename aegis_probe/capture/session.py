"""Sessions, users, tags and metadata of runs: ``using_attributes`` and the keys backends read.

The values travel in the OpenTelemetry context under OpenInference's own keys (``session.id``,
``user.id``, ``tag.tags``, ``metadata`` as a JSON string), so :func:`using_attributes` and
OpenInference's ``using_attributes`` are read alike, and each one's instrumentations see the
other's. A run takes them from the context it starts in (else from ``instrument(...)``'s
keywords) and every span of the run carries them; ``gen_ai.conversation.id`` is the session id.
Context variables make them per thread and per asyncio task.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

from opentelemetry import context as otel_context

try:  # OpenInference's names for the keys, where it is installed (the same strings otherwise)
    from openinference.semconv.trace import SpanAttributes as _OI

    SESSION_ID, USER_ID, TAGS, METADATA = _OI.SESSION_ID, _OI.USER_ID, _OI.TAG_TAGS, _OI.METADATA
except ImportError:  # pragma: no cover - openinference-semantic-conventions is in the dev extra
    SESSION_ID, USER_ID, TAGS, METADATA = "session.id", "user.id", "tag.tags", "metadata"

#: The span attributes (and context keys) of a session, in the order they are read.
KEYS = (SESSION_ID, USER_ID, TAGS, METADATA)


def session_attributes(
    session_id: str | None = None, user_id: str | None = None, tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The span attributes of the given values (those that are None left out)."""
    attrs: dict[str, Any] = {}
    if session_id is not None:
        attrs[SESSION_ID] = str(session_id)
    if user_id is not None:
        attrs[USER_ID] = str(user_id)
    if tags is not None:
        attrs[TAGS] = [str(t) for t in tags]
    if metadata is not None:
        attrs[METADATA] = json.dumps(dict(metadata), default=str, ensure_ascii=False)
    return attrs


@contextmanager
def using_attributes(
    *, session_id: str | None = None, user_id: str | None = None, tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Iterator[None]:
    """Give the runs inside the block a session, user, tags and metadata (OpenInference's name and
    keywords; nested blocks override the values they give and keep the others)."""
    attrs = session_attributes(session_id, user_id, tags, metadata)
    ctx = otel_context.get_current()
    for key, value in attrs.items():
        ctx = otel_context.set_value(key, value, ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def from_context(ctx: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    """The session attributes in ``ctx`` (an OpenTelemetry context), each falling back to ``defaults``."""
    attrs = dict(defaults) if defaults else {}
    for key in KEYS:
        value = ctx.get(key)
        if isinstance(value, str) or (key == TAGS and isinstance(value, (list, tuple))):
            attrs[key] = list(value) if key == TAGS else value
    return attrs
