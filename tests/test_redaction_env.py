"""A key of no known shape is still never written when the app holds it in an environment variable
whose name says secret: a real AutoGen agent against the loopback model server carries it in its
task, system prompt, the model's reply, tool arguments, a tool result and a tool's exception; the
trace store and the HTML report hold none of it. Variables whose values cannot be told from
ordinary text (paths, numbers, short words, the shell's ``PWD``) are not looked for."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

import aegis_probe
from aegis_probe.modelserver import Reply
from aegis_probe.redact import REDACTED, environment_secrets, redact_secrets, remember_environment_secrets
from aegis_probe.report.html import render_report
from aegis_probe.storage.store import TraceStore
from test_redaction import run_lone_agent

#: Shapes no built-in form knows: an Azure-style hex key, a bare alphanumeric one, a password.
SECRETS = {"ACME_API_KEY": "3f9a1c7e5b2d4068a9e1f3c5b7d90246", "VENDOR_TOKEN": "Qm7Lr2Xw9Kp4Zt8Nv3Hc",
           "DB_PASSWORD": "correct-horse-42"}


@pytest.fixture
def secret_env(monkeypatch) -> Iterator[None]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    yield
    for name in SECRETS:
        monkeypatch.delenv(name)
    remember_environment_secrets()  # leave redaction as the environment now is


def _said(where: str) -> str:
    return f"{where}: " + " and ".join(f"{name.lower()} is {value}" for name, value in SECRETS.items())


def policy(body: dict[str, Any]) -> Reply:
    if body["messages"][-1].get("role") == "tool":
        return Reply(content="Done. " + _said("reply"))
    return Reply(tool_calls=[("reveal", {"note": _said("args")}), ("explode", {"note": "x"})])


def reveal(note: str) -> str:
    """Return a result holding the keys."""
    return _said("result")


def explode(note: str) -> str:
    """Fail with the keys in the exception message."""
    raise PermissionError("upstream rejected " + _said("exception"))


def test_an_environment_key_of_any_shape_is_written_nowhere(secret_env, model_server, tmp_path):
    server = model_server(policy)
    client = OpenAIChatCompletionClient(
        model="aegis-scripted", base_url=server.base_url, api_key="not-a-secret",
        model_info=ModelInfo(vision=False, function_calling=True, json_output=False,
                             family=ModelFamily.UNKNOWN, structured_output=False),
    )
    agent = AssistantAgent("keeper", model_client=client, system_message="Keep them. " + _said("system"),
                           tools=[FunctionTool(reveal, description="reveal"), FunctionTool(explode, description="explode")],
                           reflect_on_tool_use=True)
    store_dir = tmp_path / "store"
    trace_id = run_lone_agent(agent, client, _said("task"), store=store_dir)

    stored = "\n".join(p.read_text(encoding="utf-8") for p in sorted(store_dir.rglob("*")) if p.is_file())
    report = render_report(aegis_probe.Trajectory.from_spans(TraceStore(store_dir).trace(trace_id)))
    for where in ("task", "system", "reply", "args", "result", "exception"):  # captured, redacted
        assert f"{where}: acme_api_key is {REDACTED}" in stored, where
    assert "exception.stacktrace" in stored
    for value in SECRETS.values():
        assert value not in stored and value not in report


def test_keys_loaded_after_import_are_known_once_a_probe_is_made(monkeypatch):
    monkeypatch.setenv("LATE_API_KEY", "Zx81Late0Loaded7Key")
    try:
        # aegis_probe was imported long ago: the key came later, as with load_dotenv
        assert aegis_probe.instrument(AssistantAgent("a", model_client=_client())) is not None
        assert redact_secrets("key Zx81Late0Loaded7Key.") == f"key {REDACTED}."
    finally:
        aegis_probe.uninstrument()
        monkeypatch.delenv("LATE_API_KEY")
        remember_environment_secrets()
    assert redact_secrets("key Zx81Late0Loaded7Key.") == "key Zx81Late0Loaded7Key."


def _client() -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="m", base_url="http://127.0.0.1:9/v1", api_key="x",
                                      model_info=ModelInfo(vision=False, function_calling=False, json_output=False,
                                                           family=ModelFamily.UNKNOWN, structured_output=False))


@pytest.mark.parametrize(("name", "value"), [
    ("PWD", "/work/main/project"), ("OLDPWD", "somewhere-else-1"), ("SSH_AUTH_SOCK", "/tmp/ssh-a1/agent.9"),
    ("AUTH_URL", "https://login.example.com"), ("TOKEN_LIMIT", "100000000"), ("GIT_AUTH", "disabled"),
    ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"), ("TOKENIZERS_PARALLELISM", "false1234"), ("API_KEY", "two words here"),
    ("HOME", "Zx81NotASecret99"),
])
def test_values_that_cannot_be_told_from_text_are_not_looked_for(name, value):
    assert environment_secrets({name: value}) == frozenset()


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ACME_APIKEY", "AWS_SESSION_TOKEN", "CLIENT_SECRET",
                                  "DB_PASSWORD", "SMTP_PASS", "GITHUB_PAT", "azure.storage.sas", "MY-ACCESSTOKEN"])
def test_names_that_say_secret_are_looked_for(name):
    assert environment_secrets({name: "Zx81Secret0Value7"}) == {"Zx81Secret0Value7"}


def test_a_key_inside_a_longer_key_is_redacted_whole():
    remember_environment_secrets({"A_TOKEN": "abcd1234efgh", "B_TOKEN": "abcd1234efgh5678ijkl"})
    try:
        assert redact_secrets("use abcd1234efgh5678ijkl or abcd1234efgh") == f"use {REDACTED} or {REDACTED}"
    finally:
        remember_environment_secrets()


def test_redacting_in_threads_while_probes_learn_new_secrets():
    """Threads redact while another thread's probes learn new environment secrets: each text is
    redacted with one whole set of detectors (never a half-replaced one), and a key known from the
    start is never let through."""
    import threading

    known = {"A_TOKEN": "Kn0wnFromTheStart77"}
    remember_environment_secrets(known)
    text = "key Kn0wnFromTheStart77 and token Zx81LaterKey0042 in " + "x" * 200
    failures: list[BaseException] = []
    outputs: set[str] = set()
    stop = threading.Event()

    def redacting(n: int) -> None:
        try:
            while not stop.is_set():
                outputs.add(redact_secrets(f"{text} {n} {len(outputs)}").split(" in ")[0])
        except BaseException as exc:  # noqa: BLE001  (any error is the failure reported below)
            failures.append(exc)

    threads = [threading.Thread(target=redacting, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(200):
            remember_environment_secrets({**known, "B_TOKEN": "Zx81LaterKey0042"} if i % 2 else known)
    finally:
        stop.set()
        for t in threads:
            t.join()
        remember_environment_secrets()
    assert not failures
    assert outputs <= {f"key {REDACTED} and token Zx81LaterKey0042", f"key {REDACTED} and token {REDACTED}"}
