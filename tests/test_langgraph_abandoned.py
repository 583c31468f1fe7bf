"""LangGraph streams the app leaves before their end (the real graph of the demo, the real openai
client on the loopback model server): the run ends cancelled, as autogen's do, and the app sees and
reports what it does uninstrumented."""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

import aegis_probe  # noqa: E402
from aegis_probe.demos import langgraph as demo  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import the_one_run_ended_cancelled  # noqa: E402

ENDINGS = ["closed", "dropped", "never iterated", "async closed", "async dropped after its loop closed",
           "async never iterated"]


@pytest.fixture(autouse=True)
def _no_langsmith(monkeypatch):
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _leave(app: Any, ending: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """Stream ``app`` and leave the stream as ``ending`` says, after its first item (but "never
    iterated"); the keys of the items read, and what was reported (unraisables, logged errors)."""
    gc.collect()
    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    config = {"configurable": {"thread_id": "left"}}
    graph_input = {"messages": [("user", demo.TASK)]}
    read: list[str] = []
    caplog.clear()
    with caplog.at_level("ERROR"):
        if not ending.startswith("async"):
            stream = app.stream(graph_input, config)
            if ending != "never iterated":
                read += list(next(stream))
            if ending == "closed":
                stream.close()
            del stream
        else:
            loop = asyncio.new_event_loop()
            astream = app.astream(graph_input, config)
            if ending != "async never iterated":
                read += list(loop.run_until_complete(astream.__anext__()))
            if ending == "async closed":
                loop.run_until_complete(astream.aclose())
            loop.close()
            del astream
        gc.collect()
    return read, reported + [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_stream_left_before_its_end_ends_its_run_cancelled(model_server, tmp_path, monkeypatch, caplog, ending):
    """``stream``/``astream`` closed, dropped (an ``astream`` after its event loop closed, where its end
    never runs) or never iterated: the run ends ERROR, ``error.type`` ``CancelledError`` (it was a
    success, or never ended and never stored), is stored and is the probe's last run."""
    server = model_server(demo.policy)
    plain = _leave(demo.build_app(server.base_url, "aegis-scripted", "sk-test"), ending, monkeypatch, caplog)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    assert _leave(app, ending, monkeypatch, caplog) == plain
    assert plain[0] == ([] if "never" in ending else ["planner"])
    trace_id = the_one_run_ended_cancelled(probe, tmp_path / "store")
    assert [s.agent for s in probe.trajectory(trace_id).steps] == ([] if "never" in ending else ["planner"])


def test_a_stream_read_to_its_end_is_a_success(model_server, tmp_path):
    """The control: ``stream`` and ``astream`` read to their end end their runs without error."""
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    config = {"configurable": {"thread_id": "whole"}}
    assert [list(item) for item in app.stream({"messages": [("user", demo.TASK)]}, config)] == [
        ["planner"], ["calculator"], ["reviewer"]]

    async def whole() -> list[Any]:
        return [item async for item in app.astream({"messages": [("user", demo.TASK)]}, config)]

    assert len(asyncio.run(whole())) == 3
    probe.flush()
    store = TraceStore(tmp_path / "store")
    roots = [r for t in store.traces() for r in store.trace(t) if r.parent_span_id is None]
    assert [r.status for r in roots] == ["UNSET", "UNSET"]  # not ERROR
