"""What aegis-probe logs holds no secret either: a user's judge that fails with an API key in its
message (a real AutoGen agent against the loopback model server) is logged as a hook error, its
stack trace kept and the key redacted; the app's run is unaffected."""

from __future__ import annotations

import logging
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

from aegis_probe.modelserver import Reply
from aegis_probe.redact import REDACTED
from test_redaction import run_lone_agent

KEY = "sk-proj-Jd9Kq2Lw7Xm4Np8Rt1Vy5Zb3Hc6"


def failing_judge(task: str, answer: Any) -> bool:
    raise RuntimeError(f"grader refused Authorization: Bearer {KEY}")


def test_a_hook_error_is_logged_with_its_stack_trace_and_no_key(model_server, tmp_path, caplog):
    server = model_server(lambda body: Reply(content="42"))
    client = OpenAIChatCompletionClient(
        model="aegis-scripted", base_url=server.base_url, api_key="not-a-secret",
        model_info=ModelInfo(vision=False, function_calling=False, json_output=False,
                             family=ModelFamily.UNKNOWN, structured_output=False),
    )
    agent = AssistantAgent("solver", model_client=client)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        assert run_lone_agent(agent, client, "What is 6*7?", store=tmp_path / "store", judge=failing_judge)
    hooks = [r for r in caplog.records if r.getMessage() == "aegis-probe: error in judge hook, ignored"]
    assert len(hooks) == 1
    assert "Traceback" in caplog.text and "failing_judge" in caplog.text and "grader refused" in caplog.text
    assert f"Bearer {REDACTED}" in caplog.text and KEY not in caplog.text
