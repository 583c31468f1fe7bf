"""Agent Framework's prompts converted incrementally: a workflow hands each step new ``Message``
objects around the same contents, and the adapter converts each message once per run (the real
agent-framework and openai client against the loopback model server)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("agent_framework")
pytest.importorskip("agent_framework_orchestrations")
pytest.importorskip("agent_framework_openai")

import aegis_probe  # noqa: E402
from aegis_probe.adapters import agent_framework as adapter  # noqa: E402
from aegis_probe.capture.messages import SharedMessage  # noqa: E402
from aegis_probe.capture.spans import current_run  # noqa: E402
from aegis_probe.demos import agent_framework as demo  # noqa: E402
from aegis_probe.demos.task import TASK  # noqa: E402


def test_a_runs_prompts_share_each_messages_neutral_form(model_server, provider, tmp_path, monkeypatch):
    """Every prompt of the run converts to what a fresh conversion gives; a message seen again (the
    task, an agent's answer) is the same ``SharedMessage`` in every later prompt, a tool-call message
    is made anew; the run's caches go when it ends."""
    seen: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    runs = []
    convert = adapter.neutral_messages

    def spy(messages: Any) -> list[dict[str, Any]]:
        out = convert(messages)
        seen.append((out, [d for m in adapter._as_messages(messages) for d in adapter.message_dicts(m)]))
        runs.append(current_run())
        return out

    monkeypatch.setattr(adapter, "neutral_messages", spy)
    app = demo.build_app(model_server(demo.policy).base_url, "aegis-scripted", "sk-test")
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    try:
        asyncio.run(app.run(TASK))
    finally:
        probe.uninstrument()

    prompts = [out for out, _ in seen if out]
    assert len(prompts) >= 6 and all(out == fresh for out, fresh in seen)
    assert {id(out[0]) for out in prompts} == {id(prompts[0][0])} and type(prompts[0][0]) is SharedMessage  # the task
    longest = max(prompts, key=len)
    calls = [m for m in longest if m.get("tool_calls")]
    assert calls and all(type(m) is dict for m in calls)
    answers = [m for m in longest if m["role"] == "assistant" and not m.get("tool_calls")]
    assert answers and all(type(m) is SharedMessage for m in answers)
    for out in prompts:  # an answer in an earlier prompt is the same object in the longest one
        assert all(any(a is m for a in answers) for m in out if m in answers)
    run = runs[-1]
    assert run is not None and all(r is run for r in runs[1:]) and not run.caches  # let go when the run ended

