"""AutoGen workbench tools: a real MCP server (tests/mcp_server.py over stdio) behind ``McpWorkbench``,
an ``AssistantAgent`` on the loopback model server, and workbenches that delegate."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_core.models import ModelFamily, ModelInfo  # noqa: E402
from autogen_core.tools import FunctionTool, StaticStreamWorkbench, StaticWorkbench  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402
from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402

MODEL = "aegis-scripted"
SERVER = Path(__file__).with_name("mcp_server.py")
SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
TASK = "Divide 84 by 2."
SYSTEM = "You are the divider. Divide numbers with the divide tool."

#: The workbench and model client of each agent built here, closed after its run.
_resources: "weakref.WeakKeyDictionary[Any, tuple[Any, Any]]" = weakref.WeakKeyDictionary()


def policy(body: dict[str, Any]) -> Reply:
    """Call ``divide`` on the two numbers of the task, then report the tool's answer."""
    messages = body["messages"]
    if messages[-1].get("role") == "tool":
        return Reply(content=f"The quotient is {messages[-1]['content']}.")
    task = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    a, b = (float(x) for x in re.findall(r"\d+", task)[:2])
    args: dict[str, Any] = {"a": a, "b": b}
    if "secret" in task:
        args["api_key"] = SECRET  # an extra argument the tool ignores: must be redacted in the trace
    return Reply(tool_calls=[("divide", args)])


def _agent(base_url: str, model: str, api_key: str, **tooling: Any) -> AssistantAgent:
    """The divider agent with ``workbench=`` or ``tools=``."""
    client = OpenAIChatCompletionClient(
        model=model, base_url=base_url, api_key=api_key,
        model_info=ModelInfo(vision=False, function_calling=True, json_output=False,
                             family=ModelFamily.UNKNOWN, structured_output=False),
    )
    agent = AssistantAgent("divider", model_client=client, system_message=SYSTEM, reflect_on_tool_use=True, **tooling)
    _resources[agent] = (tooling.get("workbench"), client)
    return agent


def build_app(base_url: str, model: str, api_key: str) -> AssistantAgent:
    """An agent whose only tools come from the MCP server, started as a subprocess."""
    params = StdioServerParams(command=sys.executable, args=[str(SERVER)], read_timeout_seconds=30)
    return _agent(base_url, model, api_key, workbench=McpWorkbench(params))


def run_app(app: AssistantAgent, task: str) -> str | None:
    """One run with the MCP server up; the server and the client are closed after."""
    workbench, client = _resources.pop(app)

    async def run() -> Any:
        try:
            async with workbench:
                return await app.run(task=task)
        finally:
            await client.close()

    result = asyncio.run(run())
    return result.messages[-1].to_text()


def _spans(exporter: Any, op: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == op]


def _parent(span: Any, exporter: Any) -> Any:
    return next(s for s in exporter.get_finished_spans() if s.context.span_id == span.parent.span_id)


def test_mcp_tool_call_is_one_tool_span_under_its_step(model_server, provider, exporter):
    server = model_server(policy)
    agent = build_app(server.base_url, MODEL, "sk-test")
    aegis_probe.instrument(agent, tracer_provider=provider)
    answer = run_app(agent, TASK + " (with the secret)")
    assert answer == "The quotient is 42."
    (step,) = [s for s in _spans(exporter, sc.OP_AGENT) if sc.STEP_INDEX in s.attributes]
    (tool,) = _spans(exporter, sc.OP_TOOL)
    assert tool.name == "execute_tool divide" and _parent(tool, exporter) is step
    assert tool.status.status_code is not StatusCode.ERROR
    assert tool.attributes[sc.TOOL_CALL_RESULT] == "42"
    arguments = json.loads(tool.attributes[sc.TOOL_CALL_ARGUMENTS])
    assert arguments["a"] == 84 and arguments["b"] == 2 and SECRET not in tool.attributes[sc.TOOL_CALL_ARGUMENTS]
    first_chat = min(_spans(exporter, sc.OP_CHAT), key=lambda s: s.start_time)
    (call,) = [p for m in json.loads(first_chat.attributes[sc.OUTPUT_MESSAGES]) for p in m["parts"] if p["type"] == "tool_call"]
    assert call["id"] == tool.attributes[sc.TOOL_CALL_ID] and call["name"] == "divide"
    assert SECRET not in json.dumps([dict(s.attributes) for s in exporter.get_finished_spans()])


def test_failing_mcp_tool_marks_its_span_and_the_step_goes_on(model_server, provider, exporter, tmp_path):
    server = model_server(policy)
    agent = build_app(server.base_url, MODEL, "sk-test")
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
    answer = run_app(agent, "Divide 1 by 0.")
    assert "division by zero" in answer  # the agent saw the tool's error result, as without aegis
    (tool,) = _spans(exporter, sc.OP_TOOL)
    assert tool.status.status_code is StatusCode.ERROR
    assert "division by zero" in tool.attributes[sc.TOOL_CALL_RESULT]
    probe.flush()
    (step,) = probe.trajectory().steps
    (call,) = step.tool_calls
    assert call.name == "divide" and call.error and "division by zero" in call.error


def test_exact_replay_of_an_mcp_run(model_server, tmp_path):
    store = TraceStore(tmp_path / "store")
    server = model_server(policy)
    agent = build_app(server.base_url, MODEL, "sk-test")
    probe = aegis_probe.instrument(agent, store=store)
    run_app(agent, TASK)
    probe.flush()
    probe.uninstrument()
    # The model is answered from the recording; the MCP tool runs again on a fresh server.
    result = replay(probe.last_trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact, result.divergence or result.error
    assert result.live_calls == 0 and result.replayed_calls == 2
    (step,) = result.trajectory.steps
    (call,) = step.tool_calls
    assert (call.name, call.result) == ("divide", "42")
    assert result.trajectory.steps[0].output == result.original.steps[0].output == "The quotient is 42."


class AuditedWorkbench(StaticWorkbench):
    """A user's workbench that delegates to ``StaticWorkbench`` (which runs tools via ``run_json``)."""

    async def call_tool(self, name: str, arguments: Any = None, cancellation_token: Any = None,
                        call_id: str | None = None) -> Any:
        self.seen.append(name)
        return await super().call_tool(name, arguments, cancellation_token, call_id)

    def __init__(self, tools: list[Any]) -> None:
        super().__init__(tools)
        self.seen: list[str] = []


def _divide(a: float, b: float) -> str:
    return f"{a / b:g}"


@pytest.mark.parametrize("workbench", ["delegating", "stream"])
def test_workbench_running_tools_makes_one_span_per_call_with_the_tool_error_type(workbench, model_server, provider, exporter):
    """A workbench delegating to ``StaticWorkbench.call_tool``, and the ``StaticStreamWorkbench`` an
    agent builds from ``tools=`` (``call_tool_stream``): both run the tool through ``run_json``."""
    server = model_server(policy)
    tool = FunctionTool(_divide, name="divide", description="Divide a by b.")
    audited = AuditedWorkbench([tool])
    tooling = {"workbench": audited} if workbench == "delegating" else {"tools": [tool]}
    agent = _agent(server.base_url, MODEL, "sk-test", **tooling)
    client = _resources.pop(agent)[1]
    patched = [(StaticWorkbench, "call_tool"), (StaticStreamWorkbench, "call_tool_stream"), (McpWorkbench, "call_tool"),
               (AuditedWorkbench, "call_tool")]
    originals = [vars(owner)[name] for owner, name in patched]
    aegis_probe.instrument(agent, tracer_provider=provider)

    async def two_runs() -> None:
        for task in (TASK, "Divide 1 by 0."):
            await agent.run(task=task)
        await client.close()

    asyncio.run(two_runs())
    if workbench == "delegating":
        assert audited.seen == ["divide", "divide"]
    ok, failed = sorted(_spans(exporter, sc.OP_TOOL), key=lambda s: s.start_time)
    assert ok.attributes[sc.TOOL_CALL_RESULT] == "42" and ok.status.status_code is not StatusCode.ERROR
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes[sc.ERROR_TYPE] == "ZeroDivisionError"
    assert any(vars(owner)[name] is not original for (owner, name), original in zip(patched, originals))
    aegis_probe.uninstrument()
    assert [vars(owner)[name] for owner, name in patched] == originals
