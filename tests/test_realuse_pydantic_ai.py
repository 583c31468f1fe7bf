"""Pydantic AI in real use, through the real ``OpenAIChatModel`` and openai client against the
loopback model server: runs in threads and asyncio tasks at once on one probe stay apart, and a
run of 200 tool-calling turns is one stored trace with every step and model call."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import AT_ONCE, all_in_flight, run_at_once, runs_stay_apart, store_lines_are_valid  # noqa: E402

TURNS = 200


def agent(base_url: str) -> Any:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    app = Agent(OpenAIChatModel("aegis-scripted", provider=OpenAIProvider(openai_client=client)), name="counter")

    @app.tool_plain(name="tick")
    def tick(n: int) -> str:
        """Count one tick."""
        return f"tick {n} done"

    return app


def _task_key(body: dict[str, Any]) -> str:
    first = next(m for m in body["messages"] if m.get("role") == "user")
    content = first["content"] if isinstance(first["content"], str) else json.dumps(first["content"])
    return next(k for k in AT_ONCE if k in content)


def test_runs_in_threads_and_asyncio_tasks_at_once_stay_apart(model_server, tmp_path):
    server = model_server(all_in_flight(len(AT_ONCE), _task_key, lambda key, body: Reply(content=f"marker {key}")))
    app = agent(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    tasks = {key: f"run {key}" for key in AT_ONCE}

    def one(key: str) -> str:
        out = str(app.run_sync(tasks[key]).output)
        probe.set_outcome(key.endswith("ok"), answer=key)
        return out

    async def one_async(key: str) -> str:
        out = str((await app.run(tasks[key])).output)
        probe.set_outcome(key.endswith("ok"), answer=key)
        return out

    try:
        assert run_at_once(one, one_async) == [f"marker {key}" for key in AT_ONCE]
        probe.flush()
    finally:
        probe.uninstrument()
    runs_stay_apart(tmp_path / "store", tasks, {key: f"marker {key}" for key in AT_ONCE})


def test_a_run_of_hundreds_of_turns_is_one_whole_trace(model_server, tmp_path):
    def policy(body: dict[str, Any]) -> Reply:
        done = sum(1 for m in body["messages"] if m.get("role") == "tool")
        return Reply(tool_calls=[("tick", {"n": done})]) if done < TURNS else Reply(content=f"counted {done} ticks")

    server = model_server(policy)
    app = agent(server.base_url)
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    try:
        from pydantic_ai.usage import UsageLimits

        result = app.run_sync("count the ticks", usage_limits=UsageLimits(request_limit=TURNS + 1))
        assert str(result.output) == f"counted {TURNS} ticks"
        probe.flush()
    finally:
        probe.uninstrument()
    store = TraceStore(tmp_path / "store")
    (trace_id,) = store.traces()
    spans = store.trace(trace_id)
    steps = sorted((s for s in spans if sc.STEP_INDEX in s.attributes), key=lambda s: s.attributes[sc.STEP_INDEX])
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(TURNS + 1))
    assert len([s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]) == len(server.requests) == TURNS + 1
    assert len([s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]) == TURNS
    store_lines_are_valid(tmp_path / "store")
