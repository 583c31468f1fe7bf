"""A stream an app reads, watched: whether it was read at all, and to its end.

Adapters wrap a framework's iterator or async iterator in :class:`WatchedStream` to tell a stream
the app read to its end from one it left (closed, dropped, or never read), and end its step or run
through :func:`end_once`, which makes such an end cancelled rather than a success.
"""

from __future__ import annotations

from asyncio import CancelledError
from typing import Any, Callable

Ender = Callable[[BaseException | None], None]


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


def end_once(end: Ender, stream: WatchedStream | None, what: str) -> Ender:
    """``end`` called at most once (later calls do nothing); a clean end of ``stream`` before it was
    read to its end is ``CancelledError("the app left {what} before its end")``."""
    ended = False

    def once(exc: BaseException | None) -> None:
        nonlocal ended
        if ended:
            return
        ended = True
        if exc is None and stream is not None and not stream.exhausted:
            exc = CancelledError(f"the app left {what} before its end")
        end(exc)

    return once
