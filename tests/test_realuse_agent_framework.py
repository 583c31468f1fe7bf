"""Microsoft Agent Framework in real use, through its OpenAI chat client against the loopback model
server: a lone agent run from two threads (each its own event loop) and two asyncio tasks at once
on one probe keeps each run apart (its own trace, content and outcome)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agent_framework")

import aegis_probe  # noqa: E402
from aegis_probe.demos import agent_framework as demo  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from framework_checks import AT_ONCE, all_in_flight, run_at_once, runs_stay_apart  # noqa: E402


def _task_key(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return next(k for k in AT_ONCE if k in json.dumps(users))


def test_runs_in_threads_and_asyncio_tasks_at_once_stay_apart(model_server, tmp_path):
    from agent_framework import Agent

    server = model_server(all_in_flight(len(AT_ONCE), _task_key, lambda key, body: Reply(content=f"marker {key}")))
    agent = Agent(demo.client(server.base_url, "aegis-scripted", "sk-test"), "Answer briefly.", name="answerer")
    probe = aegis_probe.instrument(agent, store=tmp_path / "store")
    tasks = {key: f"run {key}" for key in AT_ONCE}

    async def one_async(key: str) -> str:
        out = (await agent.run(tasks[key])).text
        probe.set_outcome(key.endswith("ok"), answer=key)
        return out

    try:
        answers = run_at_once(lambda key: asyncio.run(one_async(key)), one_async)
        assert answers == [f"marker {key}" for key in AT_ONCE]
        probe.flush()
    finally:
        probe.uninstrument()
    runs_stay_apart(tmp_path / "store", tasks, {key: f"marker {key}" for key in AT_ONCE})
