"""The hot path's message caches let go of an app's messages once no run is open.

They keep each conversation's last prompt (and its JSON) so that the next prompt costs only its new
messages; a long-lived process must not keep the last big prompts of apps that are gone.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

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


def _played(store: Any, check: Callable[[Any], None] = lambda probe: None) -> None:
    """A new society instrumented into ``store``, played, its trace written and ``check(probe)``ed, uninstrumented."""
    society = _society()
    probe = aegis_probe.instrument(society, store=store)
    try:
        _play(probe, society)
        assert probe.store.flush()
        check(probe)
    finally:
        probe.uninstrument()


def _content_captured(probe: Any) -> None:
    steps = [s for s in probe.trajectory().steps]
    assert len(steps) == 4 and all(len(s.output) > MIB for s in steps)  # the content was captured


def test_big_prompts_are_not_kept_once_the_run_is_over(tmp_path: Any) -> None:
    def instrumented() -> None:
        _played(tmp_path / "store", _content_captured)

    def bare() -> None:
        society = _society()
        message = society.init_chat()
        for _ in range(2):
            message = society.step(message)[0].msg

    instrumented()  # first use: imports, one-off caches
    bare()
    assert memory_held_after(bare) < 1
    assert memory_held_after(instrumented) < 1  # before: ~5 MiB of the last prompts and their JSON


def test_another_run_ending_leaves_an_open_runs_caches(tmp_path: Any) -> None:
    """A run's caches are its own: another run ending leaves them (the open run's next prompt still
    converts only its new messages); they go when their run ends."""
    society = _society()
    probe = aegis_probe.instrument(society, store=tmp_path / "store")

    def another_run() -> None:
        with probe.run("another run"):
            pass

    try:
        with probe.run("Count together.") as run:
            message = society.step(society.init_chat())[0].msg
            other = threading.Thread(target=another_run)
            other.start()
            other.join(30)
            assert run.caches["camel.prompts"]  # still there for this run's conversations
            society.step(message)
        assert not run.caches  # the run ended: let go
    finally:
        probe.uninstrument()


def test_a_society_dropped_while_another_run_stays_open_leaves_nothing(tmp_path: Any) -> None:
    """A long-lived process may always have some run open: a CAMEL society's run that is over and
    the app gone, nothing of its 1 MiB turns stays (its prompts were remembered for its run alone)."""
    probe_of_other = aegis_probe.instrument(_society(), store=tmp_path / "other")
    opened, release = threading.Event(), threading.Event()

    def stay_open() -> None:
        with probe_of_other.run("stays open"):
            opened.set()
            release.wait(60)

    def finished() -> None:
        _played(tmp_path / "store")

    other = threading.Thread(target=stay_open)
    other.start()
    try:
        assert opened.wait(60)
        assert memory_held_after(finished) < 1
    finally:
        release.set()
        other.join()
        probe_of_other.uninstrument()


def test_a_finished_runs_prompt_is_let_go_while_another_run_stays_open(tmp_path: Any) -> None:
    """A long-lived process may always have some run open: what was remembered for a run that is
    over (its last prompt's messages and JSON, its long texts) goes when it ends."""
    from aegis_probe.capture.messages import SharedMessage
    from aegis_probe.capture.spans import start_llm

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
