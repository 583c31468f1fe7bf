"""Replayed answers handed to the app in the order the recorded answers came back.

Concurrent agents (MetaGPT roles acting in one round, a GraphFlow's parallel branches) publish
their messages as their model answers arrive, and a later agent's prompt lists them in that
order. A recording answers at once, so without care the replay's order is the order the calls
were made, not the one recorded. So a replayed answer waits, before the app gets it, for the
answers of the calls that were in flight beside it and came back first when recorded (``after``
their start, ``before`` its end), then lets the loop run their agents on. A thread waits
in the interceptor; a coroutine where its adapter awaits the call through :func:`in_recorded_order`.
A call that is waited for and never made (the replay left the recording) is given up on after
:data:`GIVE_UP_S` without any call made or answered.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextvars import ContextVar
from typing import Awaitable, Callable, TypeVar

from .recording import Key, RecordedCall

T = TypeVar("T")

#: Seconds a replayed answer waits for an earlier one while no replayed call is made or answered.
GIVE_UP_S = 5.0
#: Loop turns a coroutine's answer yields after the answers before it, so their agents act first.
_SETTLE_TURNS = 20

#: Set by :func:`in_recorded_order` for its call: where the replayer leaves the wait to await.
_AWAIT_SLOT: ContextVar[list[Callable[[], Awaitable[None]]] | None] = ContextVar("aegis_replay_order", default=None)


async def in_recorded_order(call: Awaitable[T]) -> T:
    """Await a model call (``interception.acall_llm``) whose replayed answer must reach the app in
    the recorded order (see the module docstring); any other call passes through."""
    slot: list[Callable[[], Awaitable[None]]] = []
    token = _AWAIT_SLOT.set(slot)
    try:
        result = await call
    finally:
        _AWAIT_SLOT.reset(token)
    for wait in slot:
        await wait()
    return result


class RecordedOrder:
    """Which replayed answers are handed over, and which each one waits for (thread-safe)."""

    def __init__(self, recording: dict[Key, RecordedCall]) -> None:
        calls = list(recording.values())
        self._before = {
            (c.agent, c.call_index): {(o.agent, o.call_index) for o in calls
                                      if o is not c and c.start_ns < o.end_ns < c.end_ns}
            for c in calls
        }
        self._done: set[Key] = set()
        self._progress = time.monotonic()
        self._changed = threading.Condition()
        self.given_up = False  # no call waits any more (the run went live, or left the recording)

    def moved(self) -> None:
        """A replayed call was made: waits that seemed hopeless may not be."""
        with self._changed:
            self._progress = time.monotonic()

    def done(self, key: Key) -> None:
        """The app has the answer of call ``key``."""
        with self._changed:
            self._done.add(key)
            self._progress = time.monotonic()
            self._changed.notify_all()

    def stop(self) -> None:
        """Nothing waits from now on (the run went live)."""
        with self._changed:
            self.given_up = True
            self._changed.notify_all()

    def _ready(self, key: Key) -> bool:
        if self.given_up or self._before.get(key, set()) <= self._done:
            return True
        return time.monotonic() - self._progress > GIVE_UP_S

    def hand_over(self, key: Key) -> None:
        """Called with a replayed answer before the app gets it: in a thread, waits here for its
        turn; in a coroutine under :func:`in_recorded_order`, leaves the wait to it to await."""
        slot = _AWAIT_SLOT.get()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread of its own: it may block
            with self._changed:
                while not self._ready(key):
                    self._changed.wait(0.05)
            self.done(key)
            return
        if slot is None:  # a coroutine that cannot wait, or a sync call on the loop's thread
            self.done(key)
            return

        async def wait() -> None:
            if not self._before.get(key, set()) <= self._done:
                while not self._ready(key):
                    await asyncio.sleep(0.001)
                for _ in range(_SETTLE_TURNS):
                    await asyncio.sleep(0)
            self.done(key)

        slot.append(wait)
