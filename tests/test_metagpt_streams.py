"""MetaGPT's streamed model calls (``stream: true``): a replayed or injected answer reaches the app
as a provider streams one, piece by piece through ``log_llm_stream`` (the function an app sets with
``set_llm_stream_logfunc``) and then a newline, and the live pieces of an answer an interceptor
replaces are never sent; through metagpt's openai LLM against the loopback model server."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

demo = pytest.importorskip("aegis_probe.demos.metagpt")

import metagpt.logs  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture.interception import text_pieces  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from streamed_turn import AnswerCall  # noqa: E402

pytestmark = pytest.mark.metagpt
INJECTED = "An injected plan streamed word by word"


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes logs/ and workspace/ into the working directory


@pytest.fixture
def pieces() -> Iterator[list[str]]:
    """What the app's stream function (``set_llm_stream_logfunc``) receives."""
    received: list[str] = []
    before = metagpt.logs._llm_stream_log
    metagpt.logs.set_llm_stream_logfunc(received.append)
    yield received
    metagpt.logs.set_llm_stream_logfunc(before)


def build_app(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    """The demo team, its roles' model calls streamed."""
    team = demo.build_app(base_url, model, api_key)
    for role in team.env.roles.values():
        role.llm.config.stream = True
    return team


def test_streamed_answers_replayed_or_injected_reach_the_app_as_pieces(model_server, provider, tmp_path, pieces):
    server = model_server(demo.policy)
    store = TraceStore(tmp_path / "store")
    team = build_app(server.base_url)
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=store)
    answer = demo.run_app(team, demo.TASK)
    probe.flush()
    live = list(pieces)
    calls = len(server.requests)
    assert calls >= 3 and live.count("\n") == calls, "one stream per model call"
    assert len(live) > 2 * calls, "the server streams word by word"
    trace_id = probe.last_trace_id
    probe.uninstrument()

    del pieces[:]
    result = replay(trace_id, AppSpec(build_app, demo.run_app), store=store)
    assert result.exact and result.live_calls == 0, result.divergence or result.error
    assert result.answer == answer and len(server.requests) == calls
    assert [p for p in pieces if p] == [p for p in live if p], "the replayed answers are streamed as the live ones were"

    del pieces[:]
    team = build_app(server.base_url)
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=store)
    with probe.intercept(AnswerCall(1, INJECTED)):  # the planner's
        demo.run_app(team, demo.TASK)
    first = pieces[:pieces.index("\n") + 1]
    assert first == [*text_pieces(INJECTED), "\n"], \
        "the live pieces of the replaced answer were held back and the injected one streamed instead"
    assert metagpt.logs._llm_stream_log == pieces.append, "the app's stream function is back"
