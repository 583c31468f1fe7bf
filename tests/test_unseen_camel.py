"""CAMEL apps written the way other teams write them, through real camel-ai and its OpenAI backends
against the loopback model server: a lone ``ChatAgent`` with sync, async and failing tools (step
and astep), a model error, structured output, an agent reset and reused, a ``RolePlaying`` whose
task was specified by camel's task-specify agent, and a ``Workforce`` of two workers whose task
fails. A key in a tool's result, a tool's exception or a model error is in no span, event, status,
log record or stored line."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

pytest.importorskip("camel.agents")

import aegis_probe  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from framework_checks import no_hook_errors, ours, parent_of  # noqa: E402
from test_realuse_camel import add  # noqa: E402

KEY = "sk-proj-Jd9Kq2Lw7Xm4Np8Rt1Vy5Zb3Hc6"
MODEL = "aegis-scripted"


async def amul(a: int, b: int) -> int:
    """Multiply two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    await asyncio.sleep(0)
    return a * b


def vault(name: str) -> str:
    """Read a credential.

    Args:
        name: Its name.
    """
    return f"the key of {name} is {KEY}"


def broken(x: int) -> int:
    """A tool that fails.

    Args:
        x: Anything.
    """
    raise RuntimeError(f"backend refused token {KEY}")


def _backend(base_url: str, platform: str = "OPENAI_COMPATIBLE_MODEL", model: str = MODEL) -> Any:
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.types import ModelPlatformType

    return ModelFactory.create(model_platform=getattr(ModelPlatformType, platform), model_type=model, url=base_url,
                               api_key="sk-test", token_counter=StubTokenCounter(), max_retries=0)


def _agent(base_url: str, name: str, prompt: str, tools: list | None = None, **kwargs: Any) -> Any:
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage

    return ChatAgent(BaseMessage.make_assistant_message(name, prompt), model=_backend(base_url, **kwargs), tools=tools)


def _op(spans: list, operation: str) -> list:
    return [s for s in spans if s.attributes.get(sc.OPERATION) == operation]


def _steps(spans: list) -> list:
    return [s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None]


def _nowhere(secret: str, spans: list, records: list, store: Path | None = None) -> None:
    """``secret`` is in no span attribute, event, status description, aegis log record or stored line."""
    for span in spans:
        text = json.dumps(dict(span.attributes), default=str) + (span.status.description or "")
        text += json.dumps([[e.name, dict(e.attributes)] for e in span.events], default=str)
        assert secret not in text, span.name
    assert not [r for r in records if r.name.startswith("aegis") and secret in r.getMessage() + (r.exc_text or "")]
    if store is not None:
        assert all(secret not in p.read_text() for p in store.rglob("*") if p.is_file())


def _tool_policy(body: dict[str, Any]) -> Reply:
    """Call every tool once, then answer with their results."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content="results: " + " | ".join(m["content"] for m in body["messages"] if m["role"] == "tool"))
    if "fail" in str(last["content"]):
        raise RuntimeError(f"upstream failure with {KEY}")
    return Reply(tool_calls=[("add", {"a": 1, "b": 2}), ("amul", {"a": 3, "b": 4}), ("vault", {"name": "db"}),
                             ("broken", {"x": 1}), ("missing", {"y": 2})])


@pytest.mark.parametrize("mode", ["step", "astep"])
def test_a_lone_agent_with_sync_async_and_failing_tools(mode, model_server, provider, exporter, tmp_path, caplog):
    """One run per step call: a step holding both model calls and one tool span per call (a failing
    tool's and an unknown tool's ERROR); the key the tools handle is redacted everywhere."""
    from camel.toolkits import FunctionTool

    server = model_server(_tool_policy)
    agent = _agent(server.base_url, "Helper", "You help.", tools=[FunctionTool(add), FunctionTool(amul), vault, broken])
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
    with caplog.at_level(logging.DEBUG):
        response = agent.step("compute") if mode == "step" else asyncio.run(agent.astep("compute"))
        probe.flush()
    said = response.msgs[0].content
    assert said.startswith("results: 3 | 12 | ") and KEY in said  # the app gets what the tools said
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    (step,) = _steps(spans)
    assert root.name == "invoke_agent Helper" and parent_of(step, spans) is root and step.name == "invoke_agent Helper"
    assert root.status.status_code is StatusCode.UNSET and root.attributes[sc.TASK] == "compute"
    chats, tools = _op(spans, sc.OP_CHAT), _op(spans, sc.OP_TOOL)
    assert len(chats) == 2 and all(parent_of(c, spans) is step for c in chats)
    assert [t.attributes[sc.TOOL_NAME] for t in tools] == ["add", "amul", "vault", "broken", "missing"]
    assert all(parent_of(t, spans) is step for t in tools)
    assert [t.status.status_code for t in tools] == [StatusCode.UNSET] * 3 + [StatusCode.ERROR] * 2
    assert [t.attributes[sc.TOOL_CALL_RESULT] for t in tools[:3]] == ["3", "12", "the key of db is [REDACTED]"]
    assert "[REDACTED]" in tools[3].attributes[sc.TOOL_CALL_RESULT]
    traj = probe.trajectory()
    assert [s.agent for s in traj.steps] == ["Helper"] and len(traj.steps[0].tool_calls) == 5
    _nowhere(KEY, spans, caplog.records, tmp_path / "store")
    no_hook_errors(caplog.records)


@pytest.mark.parametrize("mode", ["step", "astep"])
def test_a_model_error_fails_the_step_and_the_run_without_the_key(mode, model_server, provider, exporter, tmp_path, caplog):
    server = model_server(_tool_policy)
    agent = _agent(server.base_url, "Helper", "You help.", tools=[add])
    aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
    from openai import InternalServerError

    with caplog.at_level(logging.DEBUG), pytest.raises(InternalServerError, match="upstream failure"):
        agent.step("please fail") if mode == "step" else asyncio.run(agent.astep("please fail"))
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    (step,) = _steps(spans)
    (chat,) = _op(spans, sc.OP_CHAT)
    for span in (root, step, chat):
        assert span.status.status_code is StatusCode.ERROR and span.attributes[sc.ERROR_TYPE] == "InternalServerError"
        assert "upstream failure with [REDACTED]" in span.status.description
    _nowhere(KEY, spans, caplog.records, tmp_path / "store")


def test_structured_output_is_traced_on_both_openai_backends(model_server, provider, exporter, tmp_path):
    """``response_format`` with a pydantic model (camel parses the answer through the openai
    client's ``parse``): the step's output is the JSON the model gave, the tool call before it traced."""
    from pydantic import BaseModel

    class Answer(BaseModel):
        total: int
        note: str

    def policy(body: dict[str, Any]) -> Reply:
        assert body["response_format"]["type"] == "json_schema"
        if body["messages"][-1]["role"] != "tool":
            return Reply(tool_calls=[("add", {"a": 40, "b": 2})])
        return Reply(content=json.dumps({"total": 42, "note": "caf\u00e9 \u202e \U0001F600"}))

    server = model_server(policy)
    parsed = []
    for platform, model in [("OPENAI_COMPATIBLE_MODEL", MODEL), ("OPENAI", "gpt-4o-mini")]:
        agent = _agent(server.base_url, "Structurer", "You answer in JSON.", tools=[add], platform=platform, model=model)
        probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
        parsed.append(agent.step("What is 40+2?", response_format=Answer).msgs[0].parsed)
        parsed.append(asyncio.run(agent.astep("What is 40+2?", response_format=Answer)).msgs[0].parsed)
        probe.uninstrument()
    assert [p.total for p in parsed] == [42] * 4 and parsed[0].note == "caf\u00e9 \u202e \U0001F600"
    spans = ours(exporter)
    steps = _steps(spans)
    assert len(steps) == 4 and len({s.context.trace_id for s in steps}) == 4
    for step in steps:
        (out,) = json.loads(step.attributes[sc.OUTPUT_MESSAGES])
        assert json.loads(out["parts"][0]["content"]) == {"total": 42, "note": "caf\u00e9 \u202e \U0001F600"}
        children = [s for s in spans if parent_of(s, spans) is step]
        assert [s.attributes[sc.OPERATION] for s in children] == [sc.OP_CHAT, sc.OP_TOOL, sc.OP_CHAT]
    assert {s.attributes[sc.REQUEST_MODEL] for s in _op(spans, sc.OP_CHAT)} == {MODEL, "gpt-4o-mini"}


def test_an_agent_reset_and_reused_makes_one_run_per_step(model_server, provider, exporter, tmp_path):
    """After ``reset()`` the agent's next step is a run of its own, its prompt without the earlier turn."""
    server = model_server(lambda body: Reply(content=f"heard {len(body['messages'])} messages"))
    agent = _agent(server.base_url, "Echo", "You echo.")
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=tmp_path / "store")
    assert agent.step("one").msgs[0].content == "heard 2 messages"
    assert agent.step("two").msgs[0].content == "heard 4 messages"
    agent.reset()
    assert agent.step("three").msgs[0].content == "heard 2 messages"
    spans = ours(exporter)
    roots = [s for s in spans if s.parent is None]
    assert [r.attributes[sc.TASK] for r in roots] == ["one", "two", "three"]
    assert [s.attributes[sc.STEP_INDEX] for s in _steps(spans)] == [0, 0, 0]
    last_prompt = json.loads(_op(spans, sc.OP_CHAT)[-1].attributes[sc.INPUT_MESSAGES])
    assert [m["parts"][0]["content"] for m in last_prompt] == ["You echo.", "three"]
    assert probe.trajectory().outcome.answer is None and len(probe.trajectory().steps) == 1


def test_a_society_whose_task_camel_specified_is_one_run(model_server, provider, exporter, tmp_path):
    """``with_task_specify=True`` (camel's task-specify agent runs as the society is built, before
    ``instrument``): the conversation's run has the specified task, its steps the two roles'."""
    from camel.societies import RolePlaying

    def policy(body: dict[str, Any]) -> Reply:
        system = str(body["messages"][0]["content"])
        if "Here is a task that" in str(body["messages"][-1]["content"]):  # camel's task-specify prompt
            return Reply(content="Sort the numbers 3, 1, 2 in \u05e2\u05d1\u05e8\u05d9\u05ea order.")
        if "never forget you are a boss" in system.lower():
            done = sum(m["role"] == "assistant" for m in body["messages"]) >= 2
            return Reply(content="CAMEL_TASK_DONE" if done else "Instruction: sort.\nInput: None")
        return Reply(content="Solution: 1, 2, 3. Next request.")

    server = model_server(policy)
    society = RolePlaying(assistant_role_name="Sorter", user_role_name="Boss", task_prompt="Sort numbers",
                          with_task_specify=True, model=_backend(server.base_url))
    assert society.specified_task_prompt.startswith("Sort the numbers")
    probe = aegis_probe.instrument(society, tracer_provider=provider, store=tmp_path / "store")
    message = society.init_chat()
    for _ in range(5):
        assistant, user = society.step(message)
        message = assistant.msg
        if "CAMEL_TASK_DONE" in user.msg.content:
            break
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow Sorter & Boss" and root.attributes[sc.TASK] == society.specified_task_prompt
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["Boss", "Sorter"] * 3
    assert all(parent_of(s, spans) is root for s in steps)
    assert all(parent_of(c, spans) in steps for c in _op(spans, sc.OP_CHAT))
    assert probe.trajectory().steps[-1].agent == "Sorter"


def _two_worker_policy(body: dict[str, Any]) -> Reply:
    """The planner splits the task in two, the coordinator gives the sum to the Adder and the product
    to the Multiplier, whose model always fails (with a key in its error); the planner retries."""
    last = body["messages"][-1]
    text, system = str(last.get("content")), str(body["messages"][0].get("content"))
    if last["role"] == "tool":
        return Reply(content=json.dumps({"content": f"result {last['content']}", "failed": False}))
    if "<tasks>" in text:
        return Reply(content="<tasks>\n<task>Add 2 and 3 with add.</task>\n<task>Multiply 4 and 5.</task>\n</tasks>")
    if "assignee_id" in text:
        workers = {name: node for node, name in re.findall(r"<([0-9a-f\-]{36})>:?\s*<?([A-Za-z]+)", text)}
        tasks = re.findall(r"Task ID: (\S+)\s*\nContent: (.*)", text)
        return Reply(content=json.dumps({"assignments": [
            {"task_id": t, "assignee_id": workers["Multiplier" if "Multiply" in c else "Adder"], "dependencies": []}
            for t, c in tasks]}))
    if "You multiply" in system:
        raise RuntimeError(f"multiplier backend down {KEY}")
    if body.get("tools"):
        return Reply(tool_calls=[("add", {"a": 2, "b": 3})])
    if '"quality_score"' not in text and "recovery_strategy" in text:  # a failure's analysis
        return Reply(content=json.dumps({"reasoning": "try again", "recovery_strategy": "retry", "issues": ["down"]}))
    return Reply(content=json.dumps({"reasoning": "fine", "quality_score": 95, "issues": []}))  # a result's quality


def _two_workers(url: str) -> Any:
    """An Adder and a Multiplier; camel's pause before it stops a failed workforce (15 s) is off."""
    from camel.societies.workforce import Workforce

    workforce = Workforce("Calc team", coordinator_agent=_agent(url, "Coordinator", "You coordinate."),
                          task_agent=_agent(url, "Planner", "You plan."), new_worker_agent=_agent(url, "Helper", "You help."),
                          graceful_shutdown_timeout=0)
    workforce.add_single_agent_worker("Adder: adds with add", worker=_agent(url, "Adder", "You add.", tools=[add]))
    workforce.add_single_agent_worker("Multiplier: multiplies", worker=_agent(url, "Multiplier", "You multiply."))
    return workforce


def test_a_workforce_whose_task_fails_is_a_failed_run(model_server, provider, exporter, tmp_path, caplog):
    """Two workers; one fails on every attempt, so camel gives up and returns the task FAILED: every
    attempt is an ERROR step of that worker, and the run (root span, outcome) failed."""
    from camel.tasks import Task
    from camel.tasks.task import TaskState

    server = model_server(_two_worker_policy)
    workforce = _two_workers(server.base_url)
    probe = aegis_probe.instrument(workforce, tracer_provider=provider, store=tmp_path / "store")
    with caplog.at_level(logging.DEBUG):
        result = workforce.process_task(Task(content="Compute 2+3 and 4*5", id="0"))
        probe.flush()
    assert result.state is TaskState.FAILED
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow Calc team" and root.status.status_code is StatusCode.ERROR
    assert root.attributes[sc.OUTCOME_SUCCESS] is False and root.attributes[sc.ERROR_TYPE] == "TaskFailed"
    steps = _steps(spans)
    assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(len(steps)))
    failed = [s for s in steps if s.attributes[sc.AGENT_NAME] == "Multiplier"]
    assert len(failed) == 3 and all(s.status.status_code is StatusCode.ERROR for s in failed)
    (tool,) = [t for t in _op(spans, sc.OP_TOOL) if parent_of(t, spans).attributes[sc.AGENT_NAME] == "Adder"][:1]
    assert tool.attributes[sc.TOOL_CALL_RESULT] == "5"
    assert all(parent_of(c, spans) in steps for c in _op(spans, sc.OP_CHAT))
    traj = probe.trajectory()
    assert traj.outcome.success is False and traj.error
    _nowhere(KEY, spans, caplog.records, tmp_path / "store")


def test_a_judge_verdict_wins_over_a_failed_workforce_task(model_server, provider, exporter, tmp_path):
    from camel.tasks import Task

    server = model_server(_two_worker_policy)
    workforce = _two_workers(server.base_url)
    probe = aegis_probe.instrument(workforce, tracer_provider=provider, store=tmp_path / "store",
                                   judge=lambda task, answer: "result 5" in (answer or ""))
    workforce.process_task(Task(content="Compute 2+3 and 4*5", id="0"))
    assert probe.trajectory().outcome.success is True


def test_workforce_agents_with_generic_role_names_are_told_apart(model_server, provider, exporter, tmp_path):
    """Agents built from a plain system prompt (``ChatAgent("You add.")``, role name ``System``, as
    camel's examples build them): each worker's steps are named by its description, the coordinator
    and the task planner by camel's own names for them, in the app's agents too."""
    from camel.agents import ChatAgent
    from camel.societies.workforce import Workforce
    from camel.tasks import Task

    def policy(body: dict[str, Any]) -> Reply:
        text = str(body["messages"][-1].get("content"))
        if "Multiply" in text and "<tasks>" not in text and "assignee_id" not in text:
            return Reply(content=json.dumps({"content": "20", "failed": False}))
        return _two_worker_policy(body)

    server = model_server(policy)

    def plain(prompt: str, tools: list | None = None) -> Any:
        return ChatAgent(prompt, model=_backend(server.base_url), tools=tools)

    workforce = Workforce("Calc team", coordinator_agent=plain("You coordinate."), task_agent=plain("You plan."),
                          graceful_shutdown_timeout=0)
    workforce.add_single_agent_worker("Adder: adds with add", worker=plain("You add.", tools=[add]))
    workforce.add_single_agent_worker("Multiplier: multiplies", worker=plain("You multiply numbers."))
    assert {a.role_name for a in (workforce.coordinator_agent, workforce.task_agent)} == {"System"}
    probe = aegis_probe.instrument(workforce, tracer_provider=provider, store=tmp_path / "store")
    assert probe.apps[0].agents == ("Workforce Manager", "Task Planner", "Adder: adds with add", "Multiplier: multiplies")
    result = workforce.process_task(Task(content="Compute 2+3 and 4*5", id="0"))
    assert "result 5" in result.result and "20" in result.result
    names = [s.attributes[sc.AGENT_NAME] for s in _steps(ours(exporter))]
    assert names[:2] == ["Task Planner", "Workforce Manager"] and "System" not in names
    assert sorted(names[2:4]) == ["Adder: adds with add", "Multiplier: multiplies"]
    probe.uninstrument()
    assert workforce.coordinator_agent.role_name == "System"  # camel's own objects unchanged
