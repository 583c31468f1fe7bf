"""MetaGPT model paths beyond its own providers: a user's own ``BaseLLM`` subclass posting to a
chat-completions endpoint with urllib, registered for an ``api_type`` with ``register_provider`` (as
metagpt's providers are, so a config naming that type builds it) or handed to each role as its
``llm`` (its actions take the role's), plain and streamed through ``log_llm_stream``: ``chat``
spans, exact replay, injection; the demo team's roles against the loopback model server."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any, Callable, ClassVar, Iterator

import pytest

demo = pytest.importorskip("aegis_probe.demos.metagpt")

import metagpt.logs  # noqa: E402
from metagpt.config2 import Config  # noqa: E402
from metagpt.configs.llm_config import LLMConfig, LLMType  # noqa: E402
from metagpt.context import Context  # noqa: E402
from metagpt.provider.base_llm import BaseLLM  # noqa: E402
from metagpt.provider.llm_provider_registry import LLM_REGISTRY, register_provider  # noqa: E402
from metagpt.team import Team  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.capture.interception import text_pieces  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from streamed_turn import INJECTED, AnswerCall  # noqa: E402

pytestmark = pytest.mark.metagpt
OWN_TYPE = LLMType.OPEN_LLM  # the api_type the user's class is registered for in the registered case


class UrllibLLM(BaseLLM):
    """A user's own LLM: posts the messages with urllib, streams through ``log_llm_stream``, hands
    the usage to ``_update_costs``; counts the requests it made."""

    requests: ClassVar[int] = 0

    def __init__(self, config: LLMConfig) -> None:
        self.config, self.model = config, config.model

    def _post(self, messages: list[dict[str, Any]], stream: bool) -> Any:
        UrllibLLM.requests += 1
        body = {"model": self.model, "messages": messages,
                **({"stream": True, "stream_options": {"include_usage": True}} if stream else {})}
        request = urllib.request.Request(f"{self.config.base_url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {self.config.api_key}"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            if not stream:
                return json.load(reply)
            lines = [line.decode().removeprefix("data: ").strip() for line in reply]
        return [json.loads(line) for line in lines if line and line != "[DONE]"]

    async def _achat_completion(self, messages: list[dict], timeout: int = 60) -> dict:
        data = await asyncio.to_thread(self._post, messages, False)
        self._update_costs(data["usage"])
        return data

    async def acompletion(self, messages: list[dict], timeout: int = 60) -> dict:
        return await self._achat_completion(messages, timeout)

    async def _achat_completion_stream(self, messages: list[dict], timeout: int = 60) -> str:
        chunks = await asyncio.to_thread(self._post, messages, True)
        pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]
        for piece in pieces:
            metagpt.logs.log_llm_stream(piece)
        metagpt.logs.log_llm_stream("\n")
        self._update_costs(next(c["usage"] for c in reversed(chunks) if c.get("usage")))
        return "".join(pieces)


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes logs/ and workspace/ into the working directory


@pytest.fixture
def registered() -> Iterator[None]:
    """``UrllibLLM`` registered for :data:`OWN_TYPE` as an app registers its provider; put back after."""
    before = LLM_REGISTRY.providers.get(OWN_TYPE)
    register_provider(OWN_TYPE)(UrllibLLM)
    yield
    LLM_REGISTRY.providers[OWN_TYPE] = before


@pytest.fixture
def pieces() -> Iterator[list[str]]:
    """What the app's stream function (``set_llm_stream_logfunc``) receives."""
    received: list[str] = []
    before = metagpt.logs._llm_stream_log
    metagpt.logs.set_llm_stream_logfunc(received.append)
    yield received
    metagpt.logs.set_llm_stream_logfunc(before)


def own_app(how: str, stream: bool) -> Callable[..., Team]:
    """``build_app`` of the demo team whose roles' model calls go through ``UrllibLLM``."""

    def build_app(base_url: str, model: str = "own-model", api_key: str = "sk-test") -> Team:
        api_type = OWN_TYPE.value if how == "registered" else "openai"
        config = Config.from_llm_config({"api_type": api_type, "base_url": base_url, "model": model,
                                         "api_key": api_key, "stream": stream, "calc_usage": False})
        ctx = Context(config=config)
        specs = (("Planner", "plan how to solve the task", demo.WritePlan, demo.UserRequirement),
                 ("Calculator", "compute the numbers exactly with the calculator", demo.Calculate, demo.WritePlan),
                 ("Reviewer", "check the result and give the final answer", demo.Review, demo.Calculate))
        team = Team(context=ctx)  # one LLM per role: a role's actions set its system prompt to the role's
        team.hire([demo.DemoRole(action, watch, name=name, profile=name, goal=goal, context=ctx,
                                 **({} if how == "registered" else {"llm": UrllibLLM(config.llm)}))
                   for name, goal, action, watch in specs])
        return team

    return build_app


def chats(exporter: Any) -> list[Any]:
    return sorted((s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_CHAT),
                  key=lambda s: s.start_time)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("how", ["registered", "role-llm"])
def test_a_users_own_llm_is_traced_replayed_and_injected(how, stream, registered, pieces, model_server, provider,
                                                         exporter, tmp_path):
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    build_app = own_app(how, stream)
    team = build_app(server.base_url)
    assert all(type(a.llm) is UrllibLLM for r in team.env.roles.values() for a in r.actions)
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=store)
    UrllibLLM.requests = 0
    answer = demo.run_app(team, demo.TASK)
    probe.flush()
    assert answer == f"The calculation is correct. FINAL ANSWER: {demo.EXPECTED}"
    spans = chats(exporter)
    assert len(spans) == UrllibLLM.requests == len(server.requests) == 3, "one chat span per request the class made"
    for span in spans:
        assert span.attributes[sc.REQUEST_MODEL] == "own-model" and span.attributes[sc.SERVER_ADDRESS] == "127.0.0.1"
        assert span.attributes[sc.USAGE_OUTPUT_TOKENS] > 0  # the usage the class handed to _update_costs
    assert demo.EXPRESSION in json.loads(spans[1].attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"]
    live = list(pieces)
    assert live.count("\n") == (3 if stream else 0)
    trace_id = probe.last_trace_id
    probe.uninstrument()

    del pieces[:]
    result = replay(trace_id, AppSpec(build_app, demo.run_app), store=store)
    assert result.exact and result.live_calls == 0 and result.replayed_calls == 3, result.divergence or result.error
    assert result.answer == answer and len(server.requests) == 3
    assert [p for p in pieces if p] == [p for p in live if p], "replayed answers are streamed as the live ones were"

    del pieces[:]
    team = build_app(server.base_url)
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=store)
    with probe.intercept(AnswerCall(3)):  # the reviewer's
        assert demo.run_app(team, demo.TASK) == INJECTED
    if stream:
        assert pieces[-len(text_pieces(INJECTED)) - 1:] == [*text_pieces(INJECTED), "\n"]
    probe.uninstrument()
