"""What aegis-probe logs holds no secret either: a user's judge that fails with an API key in its
message (a real AutoGen agent against the loopback model server) is logged as a hook error, its
stack trace kept and the key redacted; the app's run is unaffected. And the command line's
output holds none of a framework's log records' secrets (an error the provider echoed a key in)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
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


def test_a_framework_error_logged_during_a_command_is_redacted(model_server, tmp_path):
    """AutoGen's runtime logs the failed model call at ERROR with its traceback, which quotes the
    key the provider echoed: the demo command prints it (errors always show; -v shows the rest,
    and the error's traceback), redacted."""
    def refuse(body: dict) -> Reply:
        raise PermissionError(f"Incorrect API key provided: {KEY}")

    server = model_server(refuse)
    env = {**os.environ, "DEMO_KEY": KEY, "AEGIS_TRACE_DIR": str(tmp_path / "store")}
    done = subprocess.run([sys.executable, "-m", "aegis_probe", "-v", "demo", "--base-url", server.base_url,
                           "--model", "m", "--api-key-env", "DEMO_KEY"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" in done.stderr and "Error processing publish message" in done.stderr, done.stderr[-2000:]
    assert f"Incorrect API key provided: {REDACTED}" in done.stderr and KEY not in done.stderr + done.stdout


def test_a_ray_task_logs_with_secrets_redacted_and_the_record_factory_is_restored(caplog):
    """A campaign's Ray task (``executors._invoke``, run here in process): what the app logs there
    reaches the driver's terminal, so its records are redacted too, and only while the task runs."""
    from aegis_probe.executors import _invoke

    def run() -> str:
        try:
            raise PermissionError(f"Incorrect API key provided: {KEY}")
        except PermissionError:
            logging.getLogger("some.framework").error("call failed for key %s", KEY, exc_info=True, stack_info=True)
        return "done"

    factory = logging.getLogRecordFactory()
    with caplog.at_level(logging.ERROR, logger="some.framework"):
        assert _invoke(run) == "done"
    assert logging.getLogRecordFactory() is factory
    assert "PermissionError" in caplog.text and "Stack (most recent call last)" in caplog.text
    assert caplog.text.count(REDACTED) >= 2 and KEY not in caplog.text
