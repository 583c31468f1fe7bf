"""smolagents' CodeAgent under the adapter: the scripted model writes code over two steps (calling the
calculate tool and printing, then final_answer on what the executor printed); the run is replayed
exactly (the same code reaches the local Python executor, which runs it again), and an injected
answer's code is what the executor runs (its tool call and final answer follow the injected code).
Real smolagents, its local Python executor and the real openai client against the loopback server."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("smolagents")

import aegis_probe  # noqa: E402
from aegis_probe.apps import AppSpec  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.capture.interception import LLMResponse  # noqa: E402
from aegis_probe.counterfactual import replay  # noqa: E402
from aegis_probe.demos import smolagents as demo  # noqa: E402
from aegis_probe.demos.task import EXPRESSION, final_number  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import ours  # noqa: E402

TASK = f"What is {EXPRESSION}?"
WRONG = "(17 + 25) * 2"


def code(body: str) -> str:
    return f"Thought: next step.\n<code>\n{body}\n</code>"


def compute(expression: str) -> str:
    return code(f'result = calculate(expression="{expression}")\nprint(result)')


def policy(body: dict[str, Any]) -> Reply:
    """Step one computes and prints; step two answers with the number the executor printed."""
    seen = demo.observation(body.get("messages", []))  # "Execution logs:\n126\nLast output ..."
    if seen is None:
        return Reply(content=compute(EXPRESSION))
    printed = seen.split("Execution logs:", 1)[-1].split("Last output", 1)[0]
    return Reply(content=code(f'final_answer("FINAL ANSWER: {final_number(printed)}")'))


def build_app(base_url: str, model: str = "aegis-scripted", api_key: str = "sk-test") -> Any:
    from smolagents import CodeAgent
    from smolagents.monitoring import LogLevel

    calculator = demo.build_app(base_url, model, api_key).managed_agents[demo.WORKER]
    return CodeAgent(tools=list(calculator.tools.values()), model=calculator.model, name="coder", max_steps=4,
                     verbosity_level=LogLevel.OFF)


def run_app(agent: Any, task: str) -> str | None:
    output = agent.run(task)
    return None if output is None else str(output)


def _tool_arguments(spans: list[Any]) -> list[str]:
    tools = sorted((s for s in spans if s.name == f"execute_tool {demo.TOOL}"), key=lambda s: s.start_time)
    return [s.attributes[sc.TOOL_CALL_ARGUMENTS] for s in tools]


def test_code_steps_are_replayed_exactly(model_server, provider, exporter, tmp_path):
    server = model_server(policy)
    agent = build_app(server.base_url)
    store = TraceStore(tmp_path / "store")
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=store)
    assert run_app(agent, TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    steps = sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["coder", "coder"]
    assert "<code>" in steps[0].attributes[sc.OUTPUT_MESSAGES] and "126" in steps[1].attributes[sc.INPUT_MESSAGES]
    assert _tool_arguments(spans) == [f'{{"expression": "{EXPRESSION}"}}']
    probe.uninstrument()

    requests = len(server.requests)
    result = replay(probe.last_trace_id, AppSpec(build_app, run_app), store=store)
    assert result.exact, result.divergence or result.error
    assert result.replayed_calls == 2 and result.live_calls == 0
    assert len(server.requests) == requests, "no model call reached the server"


class WrongCode:
    """An interceptor answering the first model call with code that computes ``WRONG``."""

    def __init__(self) -> None:
        self.calls = 0

    def before(self, call: Any) -> None:
        return None

    def after(self, call: Any, response: LLMResponse) -> LLMResponse:
        self.calls += 1
        return LLMResponse(content=compute(WRONG), finish_reason="stop") if self.calls == 1 else response


def test_injected_code_is_what_the_executor_runs(model_server, provider, exporter, tmp_path):
    server = model_server(policy)
    agent = build_app(server.base_url)
    probe = aegis_probe.instrument(agent, tracer_provider=provider, store=False)
    with probe.intercept(WrongCode()):
        assert run_app(agent, TASK) == "FINAL ANSWER: 84", "the second step saw what the injected code printed"
    probe.flush()
    spans = ours(exporter)
    assert _tool_arguments(spans) == [f'{{"expression": "{WRONG}"}}']
    first = min((s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT), key=lambda s: s.start_time)
    assert WRONG in first.attributes[sc.OUTPUT_MESSAGES], "the chat span records the injected answer"
    assert "84" in (demo.observation(server.requests[-1]["messages"]) or ""), "the model saw the injected code's output"
