"""Per-step tracing overhead of the CAMEL and MetaGPT adapters, with zero-latency model backends.

The same measurement as ``overhead.py`` (shared in ``_harness``), one table per framework:

- CAMEL: a ``RolePlaying`` society of two ``ChatAgent``s playing 25 rounds (50 agent steps, 50
  model calls), whose model backend (a ``StubModel`` subclass) answers at once with a numbered
  ``ChatCompletion`` and usage, no I/O. aegis runs wrap the loop in ``probe.run(task)``;
- MetaGPT: a ``Team`` of two roles that answer each other for 25 rounds (both act every round:
  50 steps, 50 model calls, 50 actions), whose ``BaseLLM`` subclass answers at once; each prompt
  holds the conversation so far, as metagpt's own actions do. metagpt's log sinks (console and
  file, an INFO line per action) are replaced by one WARNING console sink, in every configuration.

Configurations: ``uninstrumented``; ``aegis`` (content capture on, in-memory exporter);
``aegis (no content)``; ``aegis + store`` (plus the embedded trace store); ``aegis, not
sampled`` (diagnostic: a sampler that records nothing, so only aegis's own work is left); the
floor of each is the bare cost of creating its spans with the SDK. No OpenInference instrumentor exists for
either framework. Run: ``python benchmarks/overhead_adapters.py [--framework camel|metagpt]``.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import shutil
import sys
import tempfile
import time
from contextlib import nullcontext
from typing import Any, Callable

import aegis_probe
from _harness import Config, Result, measure, memory_provider, now, parse_args, table

STEPS = 50
TASK = "Count together."
_STORE_DIR = tempfile.mkdtemp(prefix="aegis-bench-")
atexit.register(shutil.rmtree, _STORE_DIR, ignore_errors=True)


def _reply(n: int) -> str:
    return f"reply number {n}, all good"


def configs(build: Callable[[], Any], play: Callable[[Any, Any], None]) -> dict[str, Config]:
    """The four configurations of an app: ``build()`` makes a fresh app, ``play(app, probe)``
    runs it once (``probe`` is None uninstrumented) and is what gets timed."""

    def uninstrumented() -> Result:
        app = build()
        start = now()
        play(app, None)
        return now() - start, ()

    def aegis(capture: bool = True, store: Any = False, sampled: bool = True) -> Result:
        provider, exporter = memory_provider(sampled)
        app = build()
        probe = aegis_probe.instrument(app, tracer_provider=provider, store=store, capture_content=capture)
        try:
            start = now()
            play(app, probe)
            elapsed = now() - start
        finally:
            probe.uninstrument()
        return elapsed, exporter.get_finished_spans()

    return {
        "uninstrumented": uninstrumented,
        "aegis": aegis,
        "aegis (no content)": lambda: aegis(capture=False),
        "aegis + store": lambda: aegis(store=_STORE_DIR),
        "aegis, not sampled": lambda: aegis(sampled=False),
    }


# -- CAMEL ---------------------------------------------------------------------------------------
def camel_configs() -> dict[str, Config]:
    from camel.models.stub_model import StubModel
    from camel.societies import RolePlaying
    from camel.types import ChatCompletion, ModelType

    class InstantBackend(StubModel):
        """Answers at once with a numbered completion and usage (no I/O)."""

        def __init__(self) -> None:
            super().__init__(ModelType.STUB)
            self.calls = 0

        def _run(self, messages: list, response_format: Any = None, tools: Any = None) -> ChatCompletion:
            self.calls += 1
            return ChatCompletion.model_validate({
                "id": f"instant-{self.calls}", "object": "chat.completion", "created": int(time.time()),
                "model": "instant",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": _reply(self.calls)}}],
                "usage": {"prompt_tokens": 10 * len(messages), "completion_tokens": 5,
                          "total_tokens": 10 * len(messages) + 5},
            })

        async def _arun(self, messages: list, response_format: Any = None, tools: Any = None) -> ChatCompletion:
            return self._run(messages, response_format, tools)

    logging.getLogger("camel").setLevel(logging.ERROR)  # "model provided globally", once per society

    def build() -> Any:
        return RolePlaying(assistant_role_name="alice", user_role_name="bob", task_prompt=TASK,
                           with_task_specify=False, model=InstantBackend())

    def play(society: Any, probe: Any) -> None:
        with probe.run(TASK) if probe is not None else nullcontext():
            message = society.init_chat()
            for _ in range(STEPS // 2):
                assistant, user = society.step(message)
                assert not assistant.terminated and not user.terminated
                message = assistant.msg

    return configs(build, play)


# -- MetaGPT -------------------------------------------------------------------------------------
def metagpt_configs() -> dict[str, Config]:
    import aegis_probe.demos.metagpt  # noqa: F401  (lets metagpt import without a user config)
    from metagpt.actions import Action, UserRequirement
    from metagpt.configs.llm_config import LLMConfig
    from metagpt.logs import logger
    from metagpt.provider.base_llm import BaseLLM
    from metagpt.roles import Role
    from metagpt.schema import Message
    from metagpt.team import Team

    logger.remove()
    logger.add(sys.stderr, level="WARNING")

    class InstantLLM(BaseLLM):
        """Answers at once and reports usage, as providers do (no I/O)."""

        def __init__(self) -> None:
            self.config = LLMConfig(api_type="openai", model="instant", api_key="sk-none", calc_usage=False)
            self.model, self.pricing_plan, self.cost_manager, self.calls = "instant", None, None, 0

        async def _achat_completion(self, messages: list[dict], timeout: int = 0) -> dict:
            self.calls += 1
            usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": 5}
            self._update_costs(usage)
            return {"choices": [{"message": {"role": "assistant", "content": _reply(self.calls)}}], "usage": usage}

        acompletion = _achat_completion

        async def _achat_completion_stream(self, messages: list[dict], timeout: int = 0) -> str:
            return self.get_choice_text(await self._achat_completion(messages))

    class Ping(Action):
        name: str = "Ping"

        async def run(self, history: list[Message]) -> str:
            return await self._aask("Conversation:\n" + "\n".join(f"{m.role}: {m.content}" for m in history))

    class Pong(Ping):
        name: str = "Pong"

    class Player(Role):
        def __init__(self, action: type[Action], watch: list[type[Action]], **data: Any) -> None:
            super().__init__(**data)
            self.set_actions([action])
            self._watch(watch)

    def build() -> Any:
        llm = InstantLLM()
        team = Team()
        team.hire([Player(Ping, [UserRequirement, Pong], name="alice", profile="alice", llm=llm),
                   Player(Pong, [Ping], name="bob", profile="bob", llm=llm)])
        return team

    def play(team: Any, probe: Any) -> None:
        asyncio.run(team.run(n_round=STEPS // 2, idea=TASK))
        llm = team.env.roles["alice"].llm
        assert llm.calls == STEPS, llm.calls

    return configs(build, play)


FRAMEWORKS = {
    "camel": ("CAMEL: RolePlaying, 25 rounds (50 ChatAgent steps)", camel_configs),
    "metagpt": ("MetaGPT: Team of 2 roles, 25 rounds (50 steps)", metagpt_configs),
}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], frameworks=tuple(FRAMEWORKS))
    for name in args.framework:
        title, make = FRAMEWORKS[name]
        results = measure(make(), args.repeats)
        print(table(f"{title}, zero-latency model, medians of {args.repeats} runs, {args.clock} clock", results, STEPS))
        print()


if __name__ == "__main__":
    main()
