"""Secrets never leave the app: every secret form x every position x streaming and not, checked in
the trace store, the HTML report and the payload a real OTLP/HTTP receiver gets (zero leaks).

A real AutoGen agent (``create`` or, streaming, ``create_stream``) with two real tools runs
against the loopback model server. Each secret is made unique per position, so a leak names its
form and position.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

import aegis_probe
from aegis_probe.modelserver import Reply
from aegis_probe.redact import REDACTED, redact_secrets
from aegis_probe.report.html import render_report
from aegis_probe.storage.store import TraceStore
from test_redaction_providers import PROVIDER_FORMS

API_KEY = "sk-client-key-never-recorded-0123456789"
POSITIONS = ("task", "system", "reply", "args", "result", "exception")


def _pem(core: str) -> tuple[str, str]:
    return f"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA{core}\n-----END RSA PRIVATE KEY-----", core


def _nested(levels: int, name: str, core: str) -> tuple[str, str]:
    value: Any = {name: core}
    for _ in range(levels):
        value = {"config": json.dumps(value)}
    return json.dumps(value), core


#: form -> secret text made from a unique alphanumeric core (the part that must never appear).
FORMS: dict[str, Callable[[str], tuple[str, str]]] = {
    "openai sk-proj": lambda c: (f"sk-proj-{c}", c),
    "anthropic sk-ant": lambda c: (f"sk-ant-api03-{c}", c),
    "aws key id": lambda c: ("AKIA" + (c.upper() + "Q" * 16)[:16], (c.upper() + "Q" * 16)[:16]),
    "aws_secret_access_key=": lambda c: (f"aws_secret_access_key = wJalr/{c}/bPxRfiCY", c),
    "github_pat_": lambda c: (f"github_pat_11ABCDEFG0{c}", c),
    "github ghp_": lambda c: (f"ghp_{c}0123456789", c),
    "bare JWT": lambda c: (f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.{c}", c),
    "URL ?key=": lambda c: (f"https://maps.example.com/api?key={c}&q=1", c),
    "URL &access_token=": lambda c: (f"https://api.example.com/v1/items?page=2&access_token={c}", c),
    "URL user:pass@host": lambda c: (f"postgres://admin:{c}@db.internal:5432/app", c),
    "slack xoxb-": lambda c: (f"xoxb-1234567890-{c}", c),
    "slack xoxp-": lambda c: (f"xoxp-1234567890-{c}", c),
    "stripe sk_live_": lambda c: (f"sk_live_51H{c}", c),
    "stripe rk_live_": lambda c: (f"rk_live_51H{c}", c),
    "hugging face hf_": lambda c: (f"hf_{c}ABCDEFGHIJ", c),
    "PEM private key": _pem,
    '"token": "..."': lambda c: (f'{{"token": "{c}", "user": "ann"}}', c),
    "Authorization: Bearer": lambda c: (f"Authorization: Bearer {c}", c),
    "Authorization: Basic": lambda c: (f"Authorization: Basic dXNl{c}cGFzcw==", c),
    "password=": lambda c: (f"password={c}", c),
    "api_key: ...": lambda c: (f"api_key: {c}", c),
    "google AIza": lambda c: ("AIza" + (c + "x" * 35)[:35], (c + "x" * 35)[:35]),
    "gitlab glpat-": lambda c: (f"glpat-{c}", c),
    "JSON in a JSON string": lambda c: _nested(1, "client_secret", c),
    "JSON in JSON in a JSON string": lambda c: _nested(2, "api_key", c),
    "GITHUB_TOKEN env line": lambda c: (f"export GITHUB_TOKEN={c}", c),
    "Azure Ocp-Apim-Subscription-Key header": lambda c: (f"Ocp-Apim-Subscription-Key: {c}", c),
    **PROVIDER_FORMS,
}


def _secrets(position: str) -> list[tuple[str, str, str]]:
    """``(form, text, core)`` for every form, cores unique to ``position``."""
    out = []
    for i, (form, make) in enumerate(FORMS.items()):
        core = f"Zq{position[:3]}{i:02d}Vw7Xk9Lm2Np4Rt6Y"
        text, secret = make(core)
        out.append((form, text, secret))
    return out


def _text(position: str) -> str:
    return "\n".join(text for _, text, _ in _secrets(position))


def policy(body: dict[str, Any]) -> Reply:
    """First call: both tools, with secrets in their arguments; after the tool results: a reply full of secrets."""
    if body["messages"][-1].get("role") == "tool":
        return Reply(content="Done. " + _text("reply"))
    args = {"note": _text("args")}
    return Reply(tool_calls=[("reveal", args), ("explode", args)])


def reveal(note: str) -> str:
    """Return a result holding secrets."""
    return "result: " + _text("result")


def explode(note: str) -> str:
    """Fail with secrets in the exception message."""
    raise PermissionError("auth failed: " + _text("exception"))


class _Receiver(ThreadingHTTPServer):
    """A real OTLP/HTTP receiver on 127.0.0.1: keeps every ``/v1/traces`` body it is sent."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                receiver.bodies.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _run(base_url: str, store: Path, exporter: OTLPSpanExporter, streaming: bool) -> str:
    client = OpenAIChatCompletionClient(
        model="aegis-scripted", base_url=base_url, api_key=API_KEY,
        model_info=ModelInfo(vision=False, function_calling=True, json_output=False,
                             family=ModelFamily.UNKNOWN, structured_output=False),
    )
    agent = AssistantAgent(
        "keeper", model_client=client, system_message="You keep secrets. " + _text("system"),
        tools=[FunctionTool(reveal, description="reveal"), FunctionTool(explode, description="explode")],
        reflect_on_tool_use=True, model_client_stream=streaming,
    )
    return run_lone_agent(agent, client, "Look after these: " + _text("task"), store=store, exporter=exporter)


def run_lone_agent(agent: AssistantAgent, client: OpenAIChatCompletionClient, task: str, **options: Any) -> str:
    """Instrument ``agent`` (``options`` go to ``instrument``), run ``task``, flush, uninstrument;
    the run's trace id."""
    probe = aegis_probe.instrument(agent, **options)

    async def go() -> None:
        try:
            await agent.run(task=task)
        finally:
            await client.close()

    try:
        asyncio.run(go())
        assert probe.flush(10_000)
    finally:
        probe.uninstrument()
    assert probe.last_trace_id
    return probe.last_trace_id


def _leaks(text: str) -> list[tuple[str, str]]:
    return [(form, position) for position in POSITIONS for form, _, core in _secrets(position) if core in text]


@pytest.mark.parametrize("streaming", [False, True], ids=["create", "create_stream"])
def test_no_secret_form_leaks_from_any_position(streaming, model_server, receiver, tmp_path):
    assert len(FORMS) >= 24
    server = model_server(policy)
    store_dir = tmp_path / "store"
    trace_id = _run(server.base_url, store_dir, OTLPSpanExporter(endpoint=receiver.endpoint, timeout=5), streaming)

    stored = "\n".join(p.read_text(encoding="utf-8") for p in sorted(store_dir.rglob("*")) if p.is_file())
    traj = aegis_probe.Trajectory.from_spans(TraceStore(store_dir).trace(trace_id))
    report = render_report(traj)
    payload = b"".join(receiver.bodies).decode("utf-8", "replace")

    # Every position really was captured (so "no leak" is not vacuous) ...
    tools = {t.name: t for step in traj.steps for t in step.tool_calls}
    assert traj.task and REDACTED in traj.task and "Look after these" in traj.task
    assert tools["reveal"].result and REDACTED in tools["reveal"].result
    assert tools["explode"].error and "auth failed" in tools["explode"].error and REDACTED in tools["explode"].error
    assert "exception.stacktrace" in stored and "exception.stacktrace" in payload
    assert "You keep secrets." in stored and "Done." in stored
    # ... and no secret of any form, from any position, is anywhere.
    for where, text in (("store", stored), ("report", report), ("otlp", payload)):
        assert _leaks(text) == [], f"secrets leaked into the {where}"
        assert API_KEY not in text


@pytest.mark.parametrize(("form", "make"), list(FORMS.items()), ids=list(FORMS))
def test_each_form_is_redacted_alone(form, make):
    text, core = make("Ab12Cd34Ef56Gh78Ij90")
    for wrapped in (text, f"prefix {text} suffix", json.dumps({"arguments": text}), json.dumps(json.dumps({"x": text}))):
        assert core not in redact_secrets(wrapped), wrapped


@pytest.mark.parametrize("text", [
    "max_tokens=500 and input_tokens: 12", "basic arithmetic first", "the author: Jane", "a monkey ate 3 keys",
    "see https://example.com/docs?page=2", "The task is to add 3*12.",
])
def test_ordinary_text_is_left_alone(text):
    assert redact_secrets(text) == text


def test_redaction_is_idempotent():
    text = "\n".join(make("Ab12Cd34Ef56Gh78Ij90")[0] for make in FORMS.values())
    once = redact_secrets(text)
    assert redact_secrets(once) == once


@pytest.mark.parametrize(("form", "make"), list(FORMS.items()), ids=list(FORMS))
def test_a_growing_conversation_is_redacted_where_it_grows(form, make):
    """A long trigger-free text is remembered, and its extensions are scanned from where they
    grow: a secret added later is still found, also one whose trigger straddles the old end."""
    text, core = make("Ab12Cd34Ef56Gh78Ij90")
    conversation = "Conversation:\n" + "".join(f"alice: reply number {i}, all good\n" for i in range(60))
    assert redact_secrets(conversation) == conversation
    for cut in (0, 1, 3, len(text) // 2):
        old = conversation + text[:cut]
        redact_secrets(old)  # clean or not, whichever the cut gives
        grown = old + text[cut:] + "\nbob: done"
        assert core not in redact_secrets(grown) and redact_secrets(grown).endswith("\nbob: done"), cut
