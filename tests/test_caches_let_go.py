"""The hot path's message caches let go of an app's messages once no run is open.

They keep each conversation's last prompt (and its JSON) so that the next prompt costs only its new
messages; a long-lived process must not keep the last big prompts of apps that are gone.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import aegis_probe
from framework_checks import memory_held_after

pytest.importorskip("camel")

MIB = 1 << 20


def _society() -> Any:
    """A real CAMEL ``RolePlaying`` whose model answers at once with a 1 MiB reply."""
    from camel.models.stub_model import StubModel
    from camel.societies import RolePlaying
    from camel.types import ChatCompletion, ModelType

    class BigBackend(StubModel):
        def __init__(self) -> None:
            super().__init__(ModelType.STUB)
            self.calls = 0

        def _run(self, messages: list, response_format: Any = None, tools: Any = None) -> ChatCompletion:
            self.calls += 1
            text = f"reply {self.calls} " + "x" * MIB
            return ChatCompletion.model_validate({
                "id": f"big-{self.calls}", "object": "chat.completion", "created": int(time.time()), "model": "big",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })

    return RolePlaying(assistant_role_name="alice", user_role_name="bob", task_prompt="Count together.",
                       with_task_specify=False, model=BigBackend())


def _play(probe: Any, society: Any, rounds: int = 2) -> None:
    with probe.run("Count together."):
        message = society.init_chat()
        for _ in range(rounds):
            assistant, _user = society.step(message)
            message = assistant.msg


def test_big_prompts_are_not_kept_once_the_run_is_over(tmp_path: Any) -> None:
    def instrumented() -> None:
        society = _society()
        probe = aegis_probe.instrument(society, store=tmp_path / "store")
        try:
            _play(probe, society)
            assert probe.store.flush()
            steps = [s for s in probe.trajectory().steps]
            assert len(steps) == 4 and all(len(s.output) > MIB for s in steps)  # the content was captured
        finally:
            probe.uninstrument()

    def bare() -> None:
        society = _society()
        message = society.init_chat()
        for _ in range(2):
            message = society.step(message)[0].msg

    instrumented()  # first use: imports, one-off caches
    bare()
    assert memory_held_after(bare) < 1
    assert memory_held_after(instrumented) < 1  # before: ~5 MiB of the last prompts and their JSON


def test_a_run_still_open_keeps_its_conversation_cached(tmp_path: Any) -> None:
    """Another run ending does not let go while this one is open: its next prompt reuses the JSON."""
    from aegis_probe.adapters import camel

    society = _society()
    probe = aegis_probe.instrument(society, store=tmp_path / "store")
    other_open, other_done = threading.Event(), threading.Event()

    def other() -> None:
        with probe.run("another run"):
            other_open.set()
            other_done.wait(30)

    thread = threading.Thread(target=other)
    try:
        thread.start()
        assert other_open.wait(30)
        _play(probe, society)  # ends while the other run is open
        assert camel._PROMPTS  # still there for the open run's conversations
        other_done.set()
        thread.join(30)
        assert not camel._PROMPTS  # the last open run ended: let go
    finally:
        other_done.set()
        probe.uninstrument()



def test_a_finished_runs_prompt_is_let_go_while_another_run_stays_open(tmp_path: Any) -> None:
    """A long-lived process may always have some run open: what was remembered for a run that is
    over (its last prompt's messages and JSON, its long texts) goes when it ends."""
    from aegis_probe.messages import SharedMessage
    from aegis_probe.spans import start_llm

    society = _society()
    probe = aegis_probe.instrument(society, store=tmp_path / "store")
    opened, release = threading.Event(), threading.Event()

    def stay_open() -> None:
        with probe.run("stays open"):
            opened.set()
            release.wait(60)

    other = threading.Thread(target=stay_open)
    other.start()
    try:
        assert opened.wait(60)

        def finished() -> None:
            with probe.run("over"):
                prompt = [SharedMessage(role="user", content=f"turn {i} " + "x" * MIB) for i in range(8)]
                start_llm(probe, "big", provider="test", input_messages=prompt).finish([{"role": "assistant", "content": "ok"}])
            assert probe.store.flush()

        assert memory_held_after(finished) < 1
    finally:
        release.set()
        other.join()
        probe.uninstrument()
