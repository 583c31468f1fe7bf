"""Values an app draws afresh on every run (UUIDs, wall-clock timestamps), matched up between a
recording and its replay.

Apps name things by random ids and stamp them with the time: CAMEL's ``Workforce`` lists its
workers by ``uuid4`` in its planner's and coordinator's prompts, the coordinator's answer assigns
tasks to those ids, and a failed attempt is shown to it with its ``timestamp``. A replayed request
therefore matches its recording when it is equal up to a consistent renaming of such values (one
replayed value per recorded one, and back), and the recorded answer reaches the app with the
recorded values renamed to the replay's. Dates alone are not renamed: too coarse to be fresh.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from typing import Any

from ..capture.interception import LLMResponse

FRESH = re.compile(r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                   r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?)")


class FreshIds:
    """The renaming learnt so far: recorded value <-> replayed value (thread-safe)."""

    def __init__(self) -> None:
        self._forward: dict[str, str] = {}
        self._back: dict[str, str] = {}
        self._lock = threading.Lock()

    def match(self, recorded: str, replayed: str) -> bool:
        """Whether ``replayed`` is ``recorded`` up to the renaming of ids (learning new pairs)."""
        if recorded == replayed:
            return True
        rec, rep = FRESH.split(recorded), FRESH.split(replayed)
        if len(rec) != len(rep) or rec[::2] != rep[::2]:
            return False
        with self._lock:
            forward, back = dict(self._forward), dict(self._back)
            for old, new in zip(rec[1::2], rep[1::2]):
                if forward.setdefault(old, new) != new or back.setdefault(new, old) != old:
                    return False
            self._forward, self._back = forward, back
        return True

    def to_replay(self, text: str) -> str:
        """``text`` with the recorded ids renamed to the replay's."""
        return FRESH.sub(lambda m: self._forward.get(m.group(1), m.group(1)), text) if self._forward else text

    def to_recorded(self, text: str) -> str:
        """``text`` with the replay's ids renamed back to the recorded ones."""
        return FRESH.sub(lambda m: self._back.get(m.group(1), m.group(1)), text) if self._back else text

    def response(self, response: LLMResponse) -> LLMResponse:
        """The recorded response as the replay must see it (ids in text and tool calls renamed)."""
        if not self._forward:
            return response
        return replace(response, content=None if response.content is None else self.to_replay(response.content),
                       tool_calls=[self._renamed(call) for call in response.tool_calls])

    def _renamed(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.to_replay(value)
        if isinstance(value, dict):
            return {key: self._renamed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._renamed(item) for item in value]
        return value
