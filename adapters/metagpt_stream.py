"""A metagpt model call that streams (``stream: true``), under interceptors (replay, injection).

metagpt's providers hand a streamed answer to the app piece by piece through
``metagpt.logs.log_llm_stream`` (the function an app sets with ``set_llm_stream_logfunc``; by
default, printing), then a ``"\\n"``. While interceptors decide on the answer, the pieces of the
live call are held (:func:`held_pieces`, only those of the calling task: other roles' pass on);
then they are passed on as they came, or a new answer is sent word by word, then the ``"\\n"``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

import metagpt.logs

from aegis_probe.capture.interception import text_pieces

#: The pieces held for the current task's streamed call (None: not holding).
_HELD: ContextVar[list[str] | None] = ContextVar("aegis_metagpt_held_pieces", default=None)


class _Holding:
    """Stands for the app's stream function while some call holds its pieces: a piece of a holding
    task is kept, any other goes to the app's function."""

    def __init__(self, app_log: Callable[[str], Any]) -> None:
        self.app_log, self.holders = app_log, 0

    def __call__(self, msg: str) -> Any:
        held = _HELD.get()
        if held is None:
            return self.app_log(msg)
        held.append(msg)
        return None


_lock = threading.Lock()


def _hold() -> None:
    with _lock:
        current = metagpt.logs._llm_stream_log
        if not isinstance(current, _Holding):
            current = _Holding(current)
            metagpt.logs._llm_stream_log = current  # type: ignore[assignment]
        current.holders += 1


def _release() -> None:
    """The app's function back once no call holds (unless the app set another meanwhile)."""
    with _lock:
        current = metagpt.logs._llm_stream_log
        if isinstance(current, _Holding):
            current.holders -= 1
            if current.holders <= 0:
                metagpt.logs._llm_stream_log = current.app_log  # type: ignore[assignment]


@contextmanager
def held_pieces() -> Iterator[list[str]]:
    """Inside: the current task's streamed pieces are kept in the yielded list, not sent."""
    held: list[str] = []
    token = _HELD.set(held)
    _hold()
    try:
        yield held
    finally:
        _HELD.reset(token)
        _release()


def send(pieces: list[str]) -> None:
    for piece in pieces:
        metagpt.logs.log_llm_stream(piece)


def answer_pieces(text: str) -> list[str]:
    """A new answer as metagpt's providers stream one: its words, then the closing newline."""
    return [*text_pieces(text), "\n"]


def streams(llm: Any, args: tuple, kwargs: dict, stream_at: int) -> bool:
    """Whether an ``aask`` call streams: its ``stream`` argument, else the LLM's config."""
    stream = kwargs["stream"] if "stream" in kwargs else args[stream_at] if len(args) > stream_at else None
    if stream is None:
        stream = getattr(getattr(llm, "config", None), "stream", False)
    return bool(stream)
