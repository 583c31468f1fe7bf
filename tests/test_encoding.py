"""Content that cannot be encoded (lone surrogates: ``os.fsdecode`` of a non-UTF-8 file name) is
escaped wherever it appears, never a dropped trace: the store keeps the run, it reads back, the
report renders and the OTLP receiver gets the spans.

Positions: the model's reply and tool-call arguments, a tool's result and exception, the user's
redaction callback output and the service name. (The task and system prompt cannot hold one: the
``openai`` client itself refuses to send it.)"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

import aegis_probe
from aegis_probe.modelserver import Reply
from aegis_probe.storage.otlp_json import utf8
from aegis_probe.report.html import render_report
from aegis_probe.storage.store import TraceStore
from test_redaction import receiver, run_lone_agent  # noqa: F401  (receiver: the real OTLP/HTTP receiver fixture)

NAME = os.fsdecode(b"report-\xe9t\xe9.txt")  # 'report-\udce9t\udce9.txt'
ESCAPED = "report-\\udce9t\\udce9.txt"  # what is recorded instead


def policy(body: dict[str, Any]) -> Reply:
    """Lone surrogates in the reply and the tool arguments (JSON ``\\udce9`` escapes decode to them)."""
    return Reply(content=f"Listing {NAME}", tool_calls=[("list_files", {"pattern": NAME}), ("open_file", {"name": NAME})])


def list_files(pattern: str) -> str:
    """Return a non-UTF-8 file name, as os.listdir gives it."""
    return f"found {NAME} for {pattern}"


def open_file(name: str) -> str:
    """Fail with the file name in the message."""
    raise FileNotFoundError(f"cannot open {name}")


def _run(base_url: str, store: TraceStore, exporter: OTLPSpanExporter) -> str:
    client = OpenAIChatCompletionClient(
        model="aegis-scripted", base_url=base_url, api_key="sk-test",
        model_info=ModelInfo(vision=False, function_calling=True, json_output=False,
                             family=ModelFamily.UNKNOWN, structured_output=False),
    )
    agent = AssistantAgent("lister", model_client=client, system_message="You list files.",
                           tools=[FunctionTool(list_files, description="list"), FunctionTool(open_file, description="open")])
    return run_lone_agent(agent, client, "List the report files", store=store, exporter=exporter,
                          service_name=f"svc-{NAME}", redact=lambda text: text.replace("List", f"List{NAME}"))


def test_lone_surrogates_everywhere_are_escaped_not_dropped(model_server, receiver, tmp_path):  # noqa: F811
    server = model_server(policy)
    store = TraceStore(tmp_path / "store")
    trace_id = _run(server.base_url, store, OTLPSpanExporter(endpoint=receiver.endpoint, timeout=5))

    raw = store.file.read_bytes()
    raw.decode("utf-8")  # strict: the file is valid UTF-8
    traj = aegis_probe.Trajectory.from_spans(store.trace(trace_id))
    assert traj.task == f"List{ESCAPED} the report files", "the user's redactor's output"
    tools = {t.name: t for step in traj.steps for t in step.tool_calls}
    assert ESCAPED in tools["list_files"].arguments and ESCAPED in tools["list_files"].result
    assert ESCAPED in tools["open_file"].error
    replies = [c.output for step in traj.steps for c in step.llm_calls]
    assert any(f"List{ESCAPED}ing {ESCAPED}" in (r or "") for r in replies), "the model's reply"
    assert f"found {ESCAPED}" in traj.steps[-1].output
    spans = store.trace(trace_id)
    assert spans[0].resource["service.name"] == f"svc-{ESCAPED}"
    assert any(ESCAPED in e["attributes"]["exception.message"] for s in spans for e in s.events if e["name"] == "exception")
    render_report(traj).encode("utf-8")  # strict
    payload = b"".join(receiver.bodies)
    assert b"invoke_agent lister" in payload and b"svc-report-\\udce9t\\udce9.txt" in payload


def test_store_line_with_a_lone_surrogate_stays_valid_json():
    line = json.dumps({"name": NAME, "nested": [f"a{NAME}"]}, ensure_ascii=False)
    data = utf8(line)
    assert json.loads(data.decode("utf-8")) == {"name": ESCAPED, "nested": [f"a{ESCAPED}"]}
    assert utf8("plain ascii é") == "plain ascii é".encode("utf-8")


def test_lone_surrogates_in_task_and_system_prompt(tmp_path):
    """Positions the openai client cannot send: through autogen's offline replay client instead."""
    from autogen_ext.models.replay import ReplayChatCompletionClient

    agent = AssistantAgent("lister", model_client=ReplayChatCompletionClient([f"seen {NAME}"]),
                           system_message=f"Files like {NAME} are yours.")
    store = TraceStore(tmp_path / "store")
    probe = aegis_probe.instrument(agent, store=store)
    try:
        asyncio.run(agent.run(task=f"Open {NAME}"))
        probe.flush()
    finally:
        probe.uninstrument()
    traj = aegis_probe.Trajectory.from_spans(store.trace(probe.last_trace_id))
    assert traj.task == f"Open {ESCAPED}"
    chat = next(s for s in store.trace(probe.last_trace_id) if s.name.startswith("chat"))
    prompt = json.loads(chat.attributes["gen_ai.input.messages"])
    assert prompt[0]["parts"][0]["content"] == f"Files like {ESCAPED} are yours."
    assert traj.steps[0].llm_calls[0].output == f"seen {ESCAPED}"
