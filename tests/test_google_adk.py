"""Google ADK adapter, in the environment of its own (.venv-google-adk: google-genai needs
pydantic>=2.12.5, the main environment pins 2.12.0).

In the main environment only :func:`test_in_own_environment` runs: it runs this file and the
shared conformance and replay suites (their ``google-adk`` cases) in .venv-google-adk and asserts
they pass, skipping with the reason when that environment is absent. Beyond those suites: the
sequential team's span tree, a transfer to a sub-agent, an AgentTool's agent nested under the
tool, LiteLlm and a user's own BaseLlm class as chat spans, ADK's own spans kept out, app errors,
uninstrument, blame and an injection campaign; real google-adk, the real openai client and
LiteLLM against the loopback model server.
"""

from __future__ import annotations

import os

import pytest
from own_env import INSIDE, importable, run_in_own_env

#: LiteLLM fetches its model price map from GitHub at import unless told to use its own copy.
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
HERE = importable("google.adk")


@pytest.mark.skipif(HERE, reason=INSIDE)
def test_in_own_environment():
    run_in_own_env(".venv-google-adk", "tests/test_google_adk.py", "google", env=OFFLINE)


needs_adk = pytest.mark.skipif(not HERE, reason="google-adk is not installed here (it runs in .venv-google-adk)")
if HERE:
    os.environ.update(OFFLINE)
    import aegis_probe
    from aegis_probe.capture import semconv as sc
    from aegis_probe.demos import google_adk as demo
    from aegis_probe.modelserver import Reply
    from aegis_probe.demos.task import final_number, message_text
    from framework_checks import (blame_finds_planted_step, campaign_keeps_labelled_failures, ours,
                                  raising_tool_policy, uninstrument_restores_originals)


def _instrumented(model_server, provider, tmp_path, policy=None, app=None):
    server = model_server(policy or demo.policy)
    app = app(server.base_url) if app else demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    return app, aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")


def _steps(spans):
    return sorted((s for s in spans if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.attributes[sc.STEP_INDEX])


def _chats(spans):
    return [s for s in spans if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]


@needs_adk
def test_google_adk_sequential_team_is_steps_with_chats_and_tool(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == f"invoke_workflow {demo.TEAM}" and root.attributes[sc.FRAMEWORK] == "google-adk"
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["planner", "calculator", "calculator"]
    assert all(by_id[s.parent.span_id] is root for s in steps)
    assert [by_id[c.parent.span_id] for c in _chats(spans)] == steps
    tool = next(s for s in spans if s.name == f"execute_tool {demo.TOOL}")
    assert by_id[tool.parent.span_id] is steps[1] and "126" in tool.attributes[sc.TOOL_CALL_RESULT]
    traj = probe.trajectory()
    assert traj.task == demo.TASK
    assert traj.steps[0].output == "Evaluate (17 + 25) * 3" and traj.steps[2].output == "FINAL ANSWER: 126"
    assert "You are the calculator" in str(traj.steps[1].input_messages)


COORDINATOR = "You are the coordinator. Hand the arithmetic over to the calculator."


def _coordinated(policy_of_calculator):
    """A policy: the coordinator transfers to (or asks, through its tool) the calculator."""
    def policy(body):
        messages = body.get("messages", [])
        system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
        if system.startswith(COORDINATOR):
            tools = [t["function"]["name"] for t in body.get("tools", [])]
            last = messages[-1]
            if last.get("role") == "tool" and "calculator" in tools:  # the AgentTool's answer
                return Reply(content=f"{demo.TERMINATION}: {final_number(message_text(last))}")
            if "transfer_to_agent" in tools:
                return Reply(content=f"Evaluate {demo.EXPRESSION}", tool_calls=[("transfer_to_agent", {"agent_name": "calculator"})])
            return Reply(tool_calls=[("calculator", {"request": f"Evaluate {demo.EXPRESSION}"})])
        return policy_of_calculator(body)
    return policy


def _calculator(base_url: str):
    from google.adk.agents import LlmAgent

    llm = demo.OpenAICompatibleLlm(model="aegis-scripted", base_url=base_url, api_key="sk-test")
    return llm, LlmAgent(name="calculator", model=llm, instruction=demo.SYSTEM["calculator"], tools=[demo.calculate],
                         description="Evaluates arithmetic.")


@needs_adk
def test_google_adk_transfer_names_the_next_speaker(model_server, provider, exporter, tmp_path):
    from google.adk.agents import LlmAgent

    def build(base_url):
        llm, calculator = _calculator(base_url)
        return LlmAgent(name="coordinator", model=llm, instruction=COORDINATOR, sub_agents=[calculator])

    app, probe = _instrumented(model_server, provider, tmp_path, _coordinated(demo.policy), build)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["coordinator", "calculator", "calculator"]
    assert steps[0].attributes[sc.STEP_NEXT_SPEAKER] == "calculator"
    (root,) = [s for s in spans if s.parent is None]
    assert {s.parent.span_id for s in steps} == {root.context.span_id}, "the transferred-to agent's turns follow, not nested"
    assert any(s.name == "execute_tool transfer_to_agent" for s in spans)


@needs_adk
def test_google_adk_agent_tool_nests_the_inner_agent_under_the_tool(model_server, provider, exporter, tmp_path):
    from google.adk.agents import LlmAgent
    from google.adk.tools.agent_tool import AgentTool

    def build(base_url):
        llm, calculator = _calculator(base_url)
        return LlmAgent(name="coordinator", model=llm, instruction=COORDINATOR, tools=[AgentTool(calculator)])

    app, probe = _instrumented(model_server, provider, tmp_path, _coordinated(demo.policy), build)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    spans = ours(exporter)
    by_id = {s.context.span_id: s for s in spans}
    assert len([s for s in spans if s.parent is None]) == 1, "the AgentTool's runner opens no run"
    steps = _steps(spans)
    assert [s.attributes[sc.AGENT_NAME] for s in steps] == ["coordinator", "calculator", "calculator", "coordinator"]
    tool = next(s for s in spans if s.name == "execute_tool calculator")
    assert by_id[tool.parent.span_id] is steps[0]
    assert [by_id[s.parent.span_id] for s in steps[1:3]] == [tool, tool]


@needs_adk
def test_google_adk_litellm_and_a_users_model_class_are_chat_spans(model_server, provider, exporter, tmp_path):
    """LiteLlm on the loopback server, and a BaseLlm subclass defined after instrument(): a chat span per call."""
    from google.adk.agents import LlmAgent, SequentialAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    server = model_server(demo.policy)
    llm = LiteLlm(model="openai/aegis-scripted", api_base=server.base_url, api_key="sk-test")
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    for agent in app.sub_agents:
        agent.model = llm
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"

    class Echo(BaseLlm):  # defined after instrument(): patched when a run starts
        async def generate_content_async(self, llm_request, stream=False):
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"echo {len(llm_request.contents)}")]))

    original = Echo.__dict__["generate_content_async"]
    echoer = SequentialAgent(name="echo_team", sub_agents=[LlmAgent(name="echoer", model=Echo(model="echo-1"))])
    aegis_probe.instrument(echoer, tracer_provider=provider, store=False)
    assert demo.run_app(echoer, "hi") == "echo 1"
    probe.flush()
    chats = _chats(ours(exporter))
    assert [c.attributes[sc.AGENT_NAME] for c in chats] == ["planner", "calculator", "calculator", "echoer"]
    assert {c.attributes[sc.PROVIDER] for c in chats[:3]} == {"openai"}
    assert all(c.attributes[sc.SERVER_ADDRESS] == "127.0.0.1" for c in chats[:3])
    assert '"FINAL ANSWER: 126"' in chats[2].attributes[sc.OUTPUT_MESSAGES]
    assert chats[3].name == "chat echo-1" and Echo.__dict__["generate_content_async"] is not original
    aegis_probe.uninstrument()
    assert Echo.__dict__["generate_content_async"] is original


@needs_adk
def test_google_adk_own_spans_are_kept_out_of_instrumented_runs(model_server, provider, exporter, tmp_path):
    from google.adk.telemetry import tracing

    tracer = tracing.tracer
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "sk-test")
    from opentelemetry import trace as otel_trace

    otel_trace.set_tracer_provider(provider)  # ADK's tracer, a proxy, now records into our exporter
    demo.run_app(app, demo.TASK)
    theirs = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "gcp.vertex.agent"]
    assert theirs, "on by itself"
    exporter.clear()
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    probe.flush()
    assert not [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "gcp.vertex.agent"]
    spans = ours(exporter)
    assert len(_steps(spans)) == 3 and len({s.context.trace_id for s in spans}) == 1
    aegis_probe.uninstrument()
    assert "start_span" not in vars(tracer)


@needs_adk
def test_google_adk_tool_error_passes_through_and_fails_the_spans(model_server, provider, exporter, tmp_path):
    app, probe = _instrumented(model_server, provider, tmp_path, raising_tool_policy(demo))
    with pytest.raises(SyntaxError):  # ADK re-raises a tool's exception: unchanged through us
        demo.run_app(app, demo.TASK)
    probe.flush()
    failed = {s.name for s in ours(exporter) if s.status.status_code.name == "ERROR"}
    assert {f"execute_tool {demo.TOOL}", "invoke_agent calculator", f"invoke_workflow {demo.TEAM}"} <= failed


@needs_adk
def test_google_adk_model_error_reaches_the_app_and_no_key_leaks(provider, exporter, tmp_path):
    key = "sk-test-key-do-not-leak-1234567890"
    with pytest.raises(Exception) as bare:  # nothing listens on port 9
        demo.run_app(demo.build_app("http://127.0.0.1:9/v1", "aegis-scripted", key), demo.TASK)
    app = demo.build_app("http://127.0.0.1:9/v1", "aegis-scripted", key)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=False)
    with pytest.raises(type(bare.value)) as raised:
        demo.run_app(app, demo.TASK)
    assert str(raised.value) == str(bare.value)
    probe.flush()
    chat = next(s for s in ours(exporter) if s.attributes.get(sc.OPERATION) == sc.OP_CHAT)
    assert chat.status.status_code.name == "ERROR"
    assert "do-not-leak" not in str([dict(s.attributes) for s in ours(exporter)])


@needs_adk
def test_google_adk_uninstrument_restores_every_original(model_server, provider, tmp_path):
    from google.adk.flows.llm_flows.base_llm_flow import BaseLlmFlow
    from google.adk.runners import Runner
    from google.adk.tools.function_tool import FunctionTool

    names = [(Runner, "run_async"), (BaseLlmFlow, "_run_one_step_async"), (BaseLlmFlow, "_call_llm_async"),
             (demo.OpenAICompatibleLlm, "generate_content_async"), (FunctionTool, "run_async")]
    uninstrument_restores_originals(names, lambda: _instrumented(model_server, provider, tmp_path))


@needs_adk
def test_google_adk_blame_finds_planted_step(model_server, tmp_path):
    blame_finds_planted_step(demo, model_server, tmp_path)


@needs_adk
def test_google_adk_campaign_keeps_labelled_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    campaign_keeps_labelled_failures("google_adk_math.py", demo, tmp_path)


@needs_adk
def test_google_adk_requests_share_each_contents_messages_within_a_run(model_server, provider, tmp_path, monkeypatch):
    """ADK rebuilds every request's contents (new objects each call): inside a run each content is
    converted once by value, its messages the same ``SharedMessage``s in every later request (the
    task; a tool call and its result in the step's input and its chat's), equal to a fresh conversion; a content with another kind of part
    (inline data) is converted every time; the run's caches go when it ends."""
    from google.adk.models.llm_request import LlmRequest
    from google.genai import types

    from aegis_probe.adapters import google_adk as adapter
    from aegis_probe.adapters import google_adk_models as models
    from aegis_probe.capture.messages import SharedMessage
    from aegis_probe.capture.spans import current_run

    convert, seen, runs, others = models.request_messages, [], [], []
    image = LlmRequest(contents=[types.Content(role="user", parts=[
        types.Part(text="look"), types.Part(inline_data=types.Blob(mime_type="image/png", data=b"x"))])])

    def spy(request):
        out = convert(request)
        system = models._system(request)
        fresh = ([{"role": "system", "content": system}] if system else []) + [
            m for c in request.contents for m in models.content_messages(c)]
        seen.append((out, fresh))
        runs.append(current_run())
        others.append((convert(image), convert(image)))
        return out

    monkeypatch.setattr(models, "request_messages", spy)
    monkeypatch.setattr(adapter, "request_messages", spy)
    app, probe = _instrumented(model_server, provider, tmp_path)
    try:
        assert demo.run_app(app, demo.TASK) == "FINAL ANSWER: 126"
    finally:
        probe.uninstrument()

    assert len(seen) == 6 and all(out == fresh for out, fresh in seen)  # 3 turns: step input and chat input
    tasks = [next(m for m in out if m["role"] == "user") for out, _ in seen]
    assert type(tasks[0]) is SharedMessage and all(t is tasks[0] for t in tasks)
    last = seen[-1][0]
    call = next(m for m in last if m.get("tool_calls"))
    result = next(m for m in last if m["role"] == "tool")
    # the turn's step input and its chat input: one request, converted twice, the same messages
    assert type(call) is SharedMessage and any(m is call for m in seen[-2][0]) and any(m is result for m in seen[-2][0])
    assert all(a == b == models.content_messages(image.contents[0]) and type(a[0]) is dict for a, b in others)
    run = runs[0]
    assert run is not None and all(r is run for r in runs) and not run.caches  # let go when the run ended
