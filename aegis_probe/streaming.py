"""A stream an app reads, watched: whether it was read at all, and to its end.

Adapters wrap a framework's iterator or async iterator in :class:`WatchedStream` to tell a stream
the app read to its end from one it left (closed, dropped, or never read), which ends its step
or run cancelled rather than as a success.
"""

from __future__ import annotations

from typing import Any


class WatchedStream:
    """An iterator or async iterator (``items``) that notes whether it was ``started`` and ``exhausted``."""

    __slots__ = ("items", "started", "exhausted")

    def __init__(self, items: Any) -> None:
        self.items, self.started, self.exhausted = items, False, False

    def __iter__(self) -> "WatchedStream":
        return self

    def __aiter__(self) -> "WatchedStream":
        return self

    def __next__(self) -> Any:
        self.started = True
        try:
            return next(self.items)
        except StopIteration:
            self.exhausted = True
            raise

    async def __anext__(self) -> Any:
        self.started = True
        try:
            return await self.items.__anext__()
        except StopAsyncIteration:
            self.exhausted = True
            raise

    def close(self) -> None:
        close = getattr(self.items, "close", None)
        if close is not None:
            close()

    async def aclose(self) -> None:
        aclose = getattr(self.items, "aclose", None)
        if aclose is not None:
            await aclose()
