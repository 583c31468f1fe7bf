"""MetaGPT adapter: a real metagpt Team and lone Role, the real openai client, the loopback model server."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, ClassVar

import pytest
from opentelemetry.trace import StatusCode

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.interception import ModelCall, LLMResponse
from aegis_probe.modelserver import Reply

demo = pytest.importorskip("aegis_probe.demos.metagpt")

from metagpt.actions import Action, UserRequirement  # noqa: E402
from metagpt.provider.base_llm import BaseLLM  # noqa: E402
from metagpt.provider.metagpt_api import MetaGPTLLM  # noqa: E402
from metagpt.provider.openai_api import OpenAILLM  # noqa: E402
from metagpt.roles import Role  # noqa: E402
from metagpt.team import Team  # noqa: E402

import aegis_probe.adapters.metagpt as adapter_module  # noqa: E402

pytestmark = pytest.mark.metagpt

MODEL = "aegis-scripted"
API_KEY = "sk-test-key-do-not-leak-1234567890"
PATCHED = [(Team, "run"), (Team, "_check_balance"), (Role, "run"), (Role, "react"), (Role, "_act"), (BaseLLM, "aask"),
           (BaseLLM, "_update_costs"), (OpenAILLM, "_calc_usage"), (MetaGPTLLM, "_calc_usage")]


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def server(model_server):
    return model_server(demo.policy)


def _instrument(app: Any, provider, tmp_path, **kwargs: Any):
    return aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", **kwargs)


def _ours(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]


def _steps(spans) -> list:
    steps = [s for s in spans if sc.STEP_INDEX in (s.attributes or {})]
    return sorted(steps, key=lambda s: s.start_time)


def _parent(span, spans):
    return next((p for p in spans if span.parent is not None and p.context.span_id == span.parent.span_id), None)


def _lone_calculator(server) -> Role:
    ctx = demo.llm_context(server.base_url, MODEL, API_KEY)
    return demo.DemoRole(demo.Calculate, UserRequirement, name="Calculator", profile="Calculator", goal="compute", context=ctx)


class Never(Action):
    """An action no role runs (so a role watching it never has news)."""


class Bystander(Role):
    """A role that is run every round and never acts; counts its runs."""

    results: ClassVar[list[Any]] = []

    async def run(self, with_message=None):
        rsp = await super().run(with_message)
        Bystander.results.append(rsp)
        return rsp


def test_team_span_tree(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = _instrument(app, provider, tmp_path)
    assert probe.apps[0].name == "Team" and probe.apps[0].agents == demo.AGENTS
    answer = demo.run_app(app, demo.TASK)
    assert answer is not None and demo.EXPECTED in answer
    spans = _ours(exporter)
    assert len({s.context.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_workflow Team"
    assert root.attributes[sc.FRAMEWORK] == "metagpt" and root.attributes[sc.TASK] == demo.TASK

    steps = _steps(spans)
    assert [(s.attributes[sc.STEP_INDEX], s.name) for s in steps] == [
        (0, "invoke_agent Planner"), (1, "invoke_agent Calculator"), (2, "invoke_agent Reviewer")]
    assert all(_parent(s, spans) is root for s in steps)
    assert steps[1].attributes[sc.AGENT_ROLE] == "Calculator"

    tools = [s for s in spans if s.attributes[sc.OPERATION] == sc.OP_TOOL]
    assert [(t.name, _parent(t, spans).name) for t in sorted(tools, key=lambda s: s.start_time)] == [
        ("execute_tool WritePlan", "invoke_agent Planner"),
        ("execute_tool Calculate", "invoke_agent Calculator"),
        ("execute_tool Review", "invoke_agent Reviewer")]
    assert next(t for t in tools if t.name == "execute_tool Calculate").attributes[sc.TOOL_CALL_RESULT] == "(17 + 25) * 3 = 126"

    chats = [s for s in spans if s.attributes[sc.OPERATION] == sc.OP_CHAT]
    assert len(chats) == len(server.requests) == 3
    for chat in chats:
        assert chat.name == f"chat {MODEL}" and chat.attributes[sc.REQUEST_MODEL] == MODEL
        assert chat.attributes[sc.PROVIDER] == "openai"
        assert _parent(chat, spans).attributes[sc.OPERATION] == sc.OP_TOOL
        assert chat.attributes[sc.USAGE_INPUT_TOKENS] > 0 and chat.attributes[sc.USAGE_OUTPUT_TOKENS] > 0
    calc_chat = next(c for c in chats if c.attributes[sc.AGENT_NAME] == "Calculator")
    assert json.loads(calc_chat.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "(17 + 25) * 3"

    traj = probe.trajectory()
    assert [(s.index, s.agent) for s in traj.steps] == list(enumerate(demo.AGENTS))
    assert traj.steps[1].input_messages[0].name == "Planner"
    assert traj.steps[2].output == answer
    assert traj.steps[1].usage.input_tokens == calc_chat.attributes[sc.USAGE_INPUT_TOKENS]


def test_idle_role_runs_make_no_spans(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    app.hire([Bystander(name="Bystander", profile="Bystander", watch=[Never], context=app.env.context)])
    Bystander.results.clear()
    _instrument(app, provider, tmp_path)
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    assert Bystander.results == [None] * demo.N_ROUNDS  # run every round, acted in none
    spans = _ours(exporter)
    assert not [s for s in spans if "Bystander" in s.name or s.attributes.get(sc.AGENT_NAME) == "Bystander"]
    # 4 roles x 3 rounds = 12 Role.run calls, 3 of them acted: 3 steps, each with a model call.
    steps = _steps(spans)
    assert len(steps) == 3
    chat_parents = {_parent(_parent(c, spans), spans).context.span_id for c in spans if c.attributes[sc.OPERATION] == sc.OP_CHAT}
    assert chat_parents == {s.context.span_id for s in steps}


class Archive(Action):
    """Files the conversation away and says nothing (an empty message)."""

    name: str = "Archive"

    async def run(self, history: list[Any]) -> str:
        return ""


def test_a_role_that_says_nothing_last_leaves_the_answer(server, provider, exporter, tmp_path, monkeypatch):
    """A Logger watching the Reviewer publishes an empty message after it: the run's answer (what the
    judge scores) stays the Reviewer's final answer."""
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    app.hire([demo.DemoRole(Archive, demo.Review, name="Logger", profile="Logger", goal="archive",
                            context=app.env.context)])
    answers: list[str | None] = []
    probe = _instrument(app, provider, tmp_path, judge=lambda task, answer: answers.append(answer) or True)
    monkeypatch.setattr(demo, "N_ROUNDS", demo.N_ROUNDS + 1)  # a round for the Logger
    final = demo.run_app(app, demo.TASK)
    assert [s.agent for s in probe.trajectory().steps] == [*demo.AGENTS, "Logger"]
    assert answers == [final] and demo.EXPECTED in final


def _concurrent_team(base_url: str, model: str = MODEL, api_key: str = API_KEY) -> Team:
    """The demo team plus a Critic that acts in round 1 alongside the Planner."""
    app = demo.build_app(base_url, model, api_key)
    app.hire([demo.DemoRole(demo.Review, UserRequirement, name="Critic", profile="Critic", goal="criticise",
                            context=app.env.context)])
    return app


def test_step_order_follows_start_order_and_is_stable(server, provider, exporter, tmp_path):
    orders = []
    for _ in range(2):
        exporter.clear()
        app = _concurrent_team(server.base_url)
        _instrument(app, provider, tmp_path)
        assert demo.EXPECTED in demo.run_app(app, demo.TASK)
        steps = _steps(_ours(exporter))
        assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(len(steps)))
        orders.append([s.attributes[sc.AGENT_NAME] for s in steps])
        aegis_probe.uninstrument()
    # Round 1: Planner and Critic concurrently, in hiring order; then Calculator, Reviewer.
    assert orders[0] == orders[1] == ["Planner", "Critic", "Calculator", "Reviewer"]


def test_one_trace_per_run(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = _instrument(app, provider, tmp_path)

    async def twice() -> None:  # metagpt's client is bound to one event loop
        for _ in range(2):
            await app.run(n_round=demo.N_ROUNDS, idea=demo.TASK)

    asyncio.run(twice())
    spans = _ours(exporter)
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 2 and len({s.context.trace_id for s in spans}) == 2
    for root in roots:
        steps = _steps([s for s in spans if s.context.trace_id == root.context.trace_id])
        assert [s.attributes[sc.STEP_INDEX] for s in steps] == [0, 1, 2]
    assert len(aegis_probe.load_trajectories(tmp_path / "store")) == 2
    assert probe.trajectory().outcome.answer is None  # no judge given


def test_lone_role(server, provider, exporter, tmp_path):
    role = _lone_calculator(server)
    probe = _instrument(role, provider, tmp_path)
    assert probe.apps[0].lone_agent and probe.apps[0].agents == ("Calculator",)
    rsp = asyncio.run(role.run("Please evaluate (2 + 3) * 4."))
    assert rsp.content == "(2 + 3) * 4 = 20"
    spans = _ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_agent Calculator" and sc.STEP_INDEX not in root.attributes
    assert root.attributes[sc.TASK] == "Please evaluate (2 + 3) * 4."
    (step,) = _steps(spans)
    assert step.name == "invoke_agent Calculator" and step.attributes[sc.STEP_INDEX] == 0 and _parent(step, spans) is root
    names = {s.name: _parent(s, spans).name for s in spans if s.parent is not None}
    assert names["execute_tool Calculate"] == "invoke_agent Calculator"
    assert names[f"chat {MODEL}"] == "execute_tool Calculate"
    # A second run with nothing to observe is idle: no span at all.
    count = len(spans)
    assert asyncio.run(role.run()) is None
    assert len(_ours(exporter)) == count


def test_content_capture(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    _instrument(app, provider, tmp_path, capture_content=False)
    demo.run_app(app, demo.TASK)
    spans = _ours(exporter)
    content_keys = {sc.INPUT_MESSAGES, sc.OUTPUT_MESSAGES, sc.TASK, sc.TOOL_CALL_RESULT}
    assert spans and not any(content_keys & set(s.attributes) for s in spans)
    assert all(sc.USAGE_INPUT_TOKENS in s.attributes for s in spans if s.attributes[sc.OPERATION] == sc.OP_CHAT)

    aegis_probe.uninstrument()
    exporter.clear()
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    _instrument(app, provider, tmp_path)
    demo.run_app(app, demo.TASK)
    spans = _ours(exporter)
    plan_chat = next(s for s in spans if s.attributes[sc.OPERATION] == sc.OP_CHAT and s.attributes[sc.AGENT_NAME] == "Planner")
    sent = json.loads(plan_chat.attributes[sc.INPUT_MESSAGES])
    assert [m["role"] for m in sent] == ["system", "user"]
    assert "named Planner" in sent[0]["parts"][0]["content"] and demo.TASK in sent[1]["parts"][0]["content"]
    planner = _steps(spans)[0]
    news = json.loads(planner.attributes[sc.INPUT_MESSAGES])
    assert news[0]["name"] == "Human" and news[0]["parts"][0]["content"] == demo.TASK
    assert API_KEY not in json.dumps([dict(s.attributes) for s in spans])


class _Rewrite:
    """Edits the Planner's prompt and answers the Calculator's call without the model."""

    def before(self, call: ModelCall) -> LLMResponse | None:
        if call.agent == "Planner":
            call.messages[-1]["content"] += " Be brief."
        return LLMResponse(content="(1 + 1) * 2") if call.agent == "Calculator" else None

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        return response


def test_interceptors_rewrite_prompt_and_response(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = _instrument(app, provider, tmp_path)
    with probe.intercept(_Rewrite()):
        answer = demo.run_app(app, demo.TASK)
    assert probe.interceptors == ()
    assert answer == "The calculation is correct. FINAL ANSWER: 4"
    planner_request, reviewer_request = server.requests  # the Calculator's call never reached the model
    assert [m["role"] for m in planner_request["messages"]] == ["system", "user"]
    assert "named Planner" in planner_request["messages"][0]["content"]
    assert planner_request["messages"][1]["content"].endswith(" Be brief.")
    assert "(1 + 1) * 2 = 4" in reviewer_request["messages"][-1]["content"]
    chats = [s for s in _ours(exporter) if s.attributes[sc.OPERATION] == sc.OP_CHAT]
    calc_chat = next(s for s in chats if s.attributes[sc.AGENT_NAME] == "Calculator")
    assert json.loads(calc_chat.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "(1 + 1) * 2"


def test_uninstrument_restores_every_patch(server, provider, exporter, tmp_path):
    originals = {(owner, name): vars(owner).get(name) for owner, name in PATCHED}
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    _instrument(app, provider, tmp_path)
    assert all(vars(owner)[name] is not originals[owner, name] for owner, name in PATCHED)
    aegis_probe.uninstrument()
    assert {(owner, name): vars(owner).get(name) for owner, name in PATCHED} == originals
    assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    assert _ours(exporter) == []


def test_hook_errors_never_reach_app(server, provider, exporter, tmp_path, monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError("hook failure")

    monkeypatch.setattr(adapter_module, "start_step", boom)
    monkeypatch.setattr(adapter_module, "start_tool", boom)
    monkeypatch.setattr(adapter_module.MetaGPTCodec, "request", boom)
    monkeypatch.setattr(adapter_module.MetaGPTCodec, "record_usage", boom)
    monkeypatch.setattr(adapter_module, "_request_info", boom)  # the codec reads its LLM config when made
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    _instrument(app, provider, tmp_path)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        assert demo.EXPECTED in demo.run_app(app, demo.TASK)
    assert "error in step start hook" in caplog.text and "error in llm call start hook" in caplog.text
    assert [s.name for s in _ours(exporter)] == ["invoke_workflow Team"]  # the run is still traced


def test_hook_errors_at_span_end(server, provider, exporter, tmp_path, monkeypatch, caplog):
    import aegis_probe.capture.spans as spans_module

    def boom(*args, **kwargs):
        raise RuntimeError("hook failure")

    monkeypatch.setattr(spans_module.StepScope, "finish", boom)
    monkeypatch.setattr(spans_module.ToolScope, "finish", boom)
    role = _lone_calculator(server)
    _instrument(role, provider, tmp_path)
    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        rsp = asyncio.run(role.run("Please evaluate (1 + 1) * 5."))
    assert rsp.content == "(1 + 1) * 5 = 10"
    assert "error in step end hook" in caplog.text and "error in action end hook" in caplog.text
    names = sorted(s.name for s in _ours(exporter))  # spans still ended, once each
    assert names == [f"chat {MODEL}", "execute_tool Calculate", "invoke_agent Calculator", "invoke_agent Calculator"]


def _bad_expression(body: dict[str, Any]) -> Reply:
    return Reply("pens * 3 + notebooks * 3") if "named Calculator" in json.dumps(body) else demo.policy(body)


def test_app_exceptions_propagate(model_server, provider, exporter, tmp_path):
    server = model_server(_bad_expression)
    plain = _lone_calculator(server)
    with pytest.raises(Exception) as uninstrumented:
        asyncio.run(plain.run("Please evaluate it."))

    role = _lone_calculator(server)
    _instrument(role, provider, tmp_path)
    with pytest.raises(Exception) as instrumented:
        asyncio.run(role.run("Please evaluate it."))
    assert type(instrumented.value) is type(uninstrumented.value)
    assert "only numbers" in str(instrumented.value)
    spans = _ours(exporter)
    failed = {s.name for s in spans if s.status.status_code == StatusCode.ERROR}
    assert failed == {"invoke_agent Calculator", "execute_tool Calculate"}
    assert len([s for s in spans if s.name == "invoke_agent Calculator"]) == 2  # root and step, both failed
    chat = next(s for s in spans if s.attributes[sc.OPERATION] == sc.OP_CHAT)
    assert chat.status.status_code != StatusCode.ERROR  # the model answered; the action failed after


def test_team_swallows_role_errors_as_metagpt_does(model_server, provider, exporter, tmp_path):
    server = model_server(_bad_expression)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    _instrument(app, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) is None  # Team.run logs, serializes and returns None
    spans = _ours(exporter)
    step = next(s for s in spans if s.name == "invoke_agent Calculator")
    assert step.status.status_code == StatusCode.ERROR
    assert [s.name for s in _steps(spans)] == ["invoke_agent Planner", "invoke_agent Calculator"]


def test_swallowed_role_error_fails_the_run(model_server, provider, exporter, tmp_path):
    server = model_server(_bad_expression)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = _instrument(app, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) is None  # the app's behaviour is unchanged
    spans = _ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    step = next(s for s in _steps(spans) if s.status.status_code == StatusCode.ERROR)
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes[sc.ERROR_TYPE] == step.attributes[sc.ERROR_TYPE] != "Exception"  # not metagpt's re-raise
    assert "only numbers" in root.status.description
    traj = probe.trajectory()
    assert traj.outcome.success is False and "only numbers" in traj.error
    assert traj.steps[1].error and traj.steps[1].agent == "Calculator"


def test_judge_verdict_wins_over_a_swallowed_role_error(model_server, provider, exporter, tmp_path):
    server = model_server(_bad_expression)
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = _instrument(app, provider, tmp_path, judge=lambda task, answer: True)
    demo.run_app(app, demo.TASK)
    traj = probe.trajectory()
    assert traj.outcome.success is True and traj.error  # the judge's word on the outcome; the error stays


def test_a_run_without_role_errors_is_not_marked_failed(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    probe = _instrument(app, provider, tmp_path)
    demo.run_app(app, demo.TASK)
    traj = probe.trajectory()
    assert traj.error is None and traj.outcome.success is None


def test_swallowed_budget_error_fails_the_run(server, provider, exporter, tmp_path):
    app = demo.build_app(server.base_url, MODEL, API_KEY)
    app.invest(0.0)  # Team.run's first balance check raises NoMoneyException, which it swallows
    probe = _instrument(app, provider, tmp_path)
    assert demo.run_app(app, demo.TASK) is None
    (root,) = [s for s in _ours(exporter) if s.parent is None]
    assert root.status.status_code == StatusCode.ERROR and root.attributes[sc.ERROR_TYPE] == "NoMoneyException"
    traj = probe.trajectory()
    assert traj.outcome.success is False and traj.steps == []


def test_request_attributes_follow_the_llm_config_of_each_call(server, provider, exporter, tmp_path):
    role = _lone_calculator(server)
    _instrument(role, provider, tmp_path)

    async def two_runs() -> None:  # one event loop: the role's openai client is bound to it
        await role.run("Please evaluate (2 + 3) * 4.")
        role.llm.config.temperature, role.llm.config.max_token = 0.5, 99  # changed between calls: read anew
        await role.run("Please evaluate (2 + 3) * 4.")

    asyncio.run(two_runs())
    chats = sorted((s for s in _ours(exporter) if s.attributes[sc.OPERATION] == sc.OP_CHAT), key=lambda s: s.start_time)
    assert [(s.attributes[sc.REQUEST_TEMPERATURE], s.attributes[sc.REQUEST_MAX_TOKENS]) for s in chats] == [(0.0, 4096), (0.5, 99)]
    assert all(s.attributes[sc.PROVIDER] == "openai" and s.attributes[sc.SERVER_ADDRESS] == "127.0.0.1" for s in chats)


@pytest.mark.parametrize("last", ["Critic", "Planner"])
def test_replay_keeps_the_order_concurrent_roles_see_each_other_in(last, model_server, tmp_path):
    """Planner and Critic act in the same round (each runs until its model request, then the other
    starts): a replayed answer, with no network to wait on, still lets the Critic start before the
    Planner publishes, so the Critic's prompt is the recorded one; and the answers reach the roles
    in the recorded order (the Planner's last: not the order they were asked in), so they publish
    in that order, the order the Calculator's history lists them in, and the replay is exact."""
    import time

    from aegis_probe.apps import AppSpec
    from aegis_probe.counterfactual import load_recording, replay
    from aegis_probe.storage.store import TraceStore

    def answers_last(body: dict[str, Any]) -> Reply:
        if f"named {last}" in json.dumps(body):
            time.sleep(0.3)
        return demo.policy(body)

    server = model_server(answers_last)
    store = TraceStore(tmp_path / "store")
    app = _concurrent_team(server.base_url)
    probe = aegis_probe.instrument(app, store=store)
    demo.run_app(app, demo.TASK)
    probe.flush()
    probe.uninstrument()
    critic = next(s for s in probe.trajectory().steps if s.agent == "Critic")
    assert "Plan:" not in " ".join(m.content for m in critic.input_messages)  # it started before the plan was out
    steps = {s.agent: s for s in probe.trajectory().steps}
    prompt = load_recording(store.trace(probe.last_trace_id))[("Calculator", 0)].request
    first, second = sorted(("Planner", "Critic"), key=lambda agent: prompt.index(steps[agent].output))
    assert second == last  # published (and listed) in the order the answers came back
    result = replay(probe.last_trace_id, AppSpec(_concurrent_team, demo.run_app), store=store)
    assert result.exact, result.divergence or result.error
    assert result.live_calls == 0 and result.replayed_calls == len(server.requests)


def test_two_teams_at_once_on_one_loop_keep_their_runs_and_errors_apart(server, model_server, provider, exporter, tmp_path):
    """Two teams gathered on one event loop, one whose Calculator fails: each run is its own trace
    with contiguous steps, and only the failing team's run is marked failed."""
    good = demo.build_app(server.base_url, MODEL, API_KEY)
    bad = demo.build_app(model_server(_bad_expression).base_url, MODEL, API_KEY)
    probes = [_instrument(app, provider, tmp_path) for app in (good, bad)]

    async def both() -> None:
        await asyncio.gather(demo._run_and_close(good, demo.TASK), demo._run_and_close(bad, "Another " + demo.TASK))

    asyncio.run(both())
    good_run, bad_run = (p.trajectory() for p in probes)
    assert good_run.trace_id != bad_run.trace_id
    assert [s.agent for s in good_run.steps] == list(demo.AGENTS) and good_run.error is None
    assert [s.agent for s in bad_run.steps] == ["Planner", "Calculator"] and bad_run.outcome.success is False
    assert bad_run.task.startswith("Another ")
    spans = _ours(exporter)
    for root in (s for s in spans if s.parent is None):
        steps = _steps([s for s in spans if s.context.trace_id == root.context.trace_id])
        assert [s.attributes[sc.STEP_INDEX] for s in steps] == list(range(len(steps)))
