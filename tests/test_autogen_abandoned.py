"""AutoGen runs the app starts and abandons (real teams, the real openai client on the loopback model
server): a ``run()`` never awaited behaves as without instrumentation; a stream left unfinished ends
its run, cancelled."""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from typing import Any

import pytest

pytest.importorskip("autogen_agentchat")

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

import aegis_probe
from aegis_probe.modelserver import Reply
from aegis_probe.storage.store import TraceStore
from framework_checks import the_one_run_ended_cancelled


def _client(server: Any) -> OpenAIChatCompletionClient:
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)
    return OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="sk-test", model_info=info)


def _by_system_prompt(body: dict[str, Any]) -> Reply:
    return Reply(content=f"{body['messages'][0]['content']} spoke.")


def _app(server: Any, kind: str) -> Any:
    client = _client(server)
    if kind == "lone agent":
        return AssistantAgent("lone", model_client=client, system_message="lone")
    return RoundRobinGroupChat([AssistantAgent("a", model_client=client, system_message="a"),
                                AssistantAgent("b", model_client=client, system_message="b")],
                               termination_condition=MaxMessageTermination(3))


def _unawaited_run(app: Any, ending: str) -> tuple[str, list[tuple[type, str]]]:
    """``app.run(...)`` made, then closed or dropped unawaited: the coroutine's name and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coro = app.run(task="never run")
        name = coro.__qualname__
        if ending == "closed":
            coro.close()
        del coro
        gc.collect()
    return name, [(w.category, str(w.message)) for w in caught if "never awaited" in str(w.message)]


@pytest.mark.parametrize("kind", ["team", "lone agent"])
@pytest.mark.parametrize("ending", ["closed", "dropped"])
def test_a_run_never_awaited_warns_as_without_instrumentation(model_server, tmp_path, kind, ending):
    """``run()`` closed without being awaited warns of nothing, dropped it warns "coroutine
    'BaseChatAgent.run' was never awaited" once (not of aegis's wrapper, nor twice), instrumented or not;
    it runs nothing and records no run."""
    server = model_server(_by_system_prompt)
    plain = _unawaited_run(_app(server, kind), ending)
    app = _app(server, kind)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    traced = _unawaited_run(app, ending)
    assert traced == plain
    assert plain[1] == ([] if ending == "closed" else [(RuntimeWarning, f"coroutine '{plain[0]}' was never awaited")])
    probe.flush()
    assert server.requests == [] and probe.last_run is None and not TraceStore(tmp_path / "store").traces()
    assert asyncio.run(app.run(task="Now run.")).messages[-1].to_text().endswith("spoke.")  # awaited, it runs


def _abandon_stream(team: Any, ending: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Read ``team.run_stream``'s first two items in an event loop of its own, then close the stream, or
    close the loop and drop the stream; what was reported: unraisable exceptions and logged errors."""
    gc.collect()  # earlier garbage (an earlier team's tasks) reports nothing in here
    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    loop = asyncio.new_event_loop()
    stream = team.run_stream(task="Talk.")

    async def first_two(items: Any) -> list[str]:
        return [type(await items.__anext__()).__name__ for _ in range(2)]

    with caplog.at_level("ERROR"):
        assert loop.run_until_complete(first_two(stream)) == ["TextMessage", "TextMessage"]
        if ending == "closed":
            loop.run_until_complete(stream.aclose())
        loop.close()
        del stream
        gc.collect()
    return reported + [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("ending", ["closed", "dropped after its loop closed"])
def test_a_stream_abandoned_before_its_result_ends_its_run_cancelled(model_server, tmp_path, monkeypatch, caplog, ending):
    """A ``run_stream`` the app stops reading before its ``TaskResult`` ends its run as cancelled (ERROR,
    ``CancelledError``): closed, or dropped after its event loop closed, where the loop no longer closes
    it (its end never runs; the run stayed open and was never stored). Nothing touches the closed loop:
    nothing is reported that the uninstrumented app does not report."""
    server = model_server(_by_system_prompt)
    plain_team = _app(server, "team")
    plain = _abandon_stream(plain_team, ending, monkeypatch, caplog)
    caplog.clear()
    team = _app(server, "team")
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    assert _abandon_stream(team, ending, monkeypatch, caplog) == plain
    trace_id = the_one_run_ended_cancelled(probe, tmp_path / "store")
    assert probe.trajectory(trace_id).steps[0].output == "a spoke."
    del plain_team, team
    gc.collect()  # the teams' tasks left on the closed loops: autogen's reports of them go to the hooks above
