"""MetaGPT apps written the way other teams write them, through real metagpt 0.8.2 and its OpenAI LLM
against the loopback model server: roles in react mode (several actions, the model choosing each)
and by order beside a role watching several actions, a team run twice, with an ``n_round`` limit,
run on what ``run_project`` or the app published into its environment, and actions and model calls
that raise with a key in their message, which is in no span, event, status, log record or stored line."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import Reply

demo = pytest.importorskip("aegis_probe.demos.metagpt")

from metagpt.actions import Action, UserRequirement  # noqa: E402
from metagpt.roles import Role  # noqa: E402
from metagpt.roles.role import RoleReactMode  # noqa: E402
from metagpt.schema import Message  # noqa: E402
from metagpt.team import Team  # noqa: E402

from framework_checks import no_hook_errors, ours, parent_of  # noqa: E402

pytestmark = pytest.mark.metagpt

KEY = "sk-proj-Jd9Kq2Lw7Xm4Np8Rt1Vy5Zb3Hc6"
MODEL = "aegis-scripted"
CHOOSE = "Just answer a number between"  # metagpt's prompt for a react-mode role to choose its next action


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes workspace/ and logs/ in the working directory


class Draft(Action):
    name: str = "Draft"

    async def run(self, history: list[Message]) -> str:
        return await self._aask(f"Draft: {history[-1].content if history else ''}")


class Polish(Action):
    name: str = "Polish"

    async def run(self, history: list[Message]) -> str:
        return await self._aask(f"Polish: {history[-1].content if history else ''}")


class Judge(Action):
    name: str = "Judge"

    async def run(self, history: list[Message]) -> str:
        return await self._aask("Judge: " + " / ".join(m.content for m in history[-2:]))


class Explode(Action):
    name: str = "Explode"

    async def run(self, history: list[Message]) -> str:
        raise RuntimeError(f"vault refused key {KEY}")


def policy(body: dict[str, Any]) -> Reply:
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    if "FAIL" in text:
        raise RuntimeError(f"model exploded {KEY}")
    if CHOOSE in text:  # react mode: draft first, then polish
        return Reply(content="1" if "drafted" in text else "0")
    if "Judge:" in text:
        return Reply(content="verdict: fine")
    return Reply(content="polished" if "Polish:" in text else "drafted")


def _role(name: str, actions: list[type[Action]], watch: list[type[Action]], ctx: Any,
          mode: RoleReactMode = RoleReactMode.REACT, loops: int = 1) -> Role:
    role = Role(name=name, profile=name, goal="write", context=ctx)
    role.set_actions(actions)
    role._watch(watch)
    role._set_react_mode(mode, max_react_loop=loops)
    return role


def _team(base_url: str, *roles: tuple) -> Team:
    ctx = demo.llm_context(base_url, MODEL, "sk-test")
    team = Team(context=ctx)
    team.hire([_role(*spec[:3], ctx, *spec[3:]) for spec in roles])
    return team


def _writers(base_url: str) -> Team:
    """A Writer choosing among Draft and Polish (three actions a turn), an Editor doing both in order,
    and a Critic watching both actions."""
    return _team(base_url, ("Writer", [Draft, Polish], [UserRequirement], RoleReactMode.REACT, 3),
                 ("Editor", [Draft, Polish], [UserRequirement], RoleReactMode.BY_ORDER),
                 ("Critic", [Judge], [Draft, Polish]))


async def _run(team: Team, runs: list[dict[str, Any]]) -> None:
    """``team.run(**kwargs)`` for each of ``runs`` (a ``"publish"`` entry: the app publishes that
    text into the environment first, ``"project"``: ``run_project`` it), then close the LLM clients."""
    try:
        for kwargs in runs:
            kwargs = dict(kwargs)
            if "publish" in kwargs:
                team.env.publish_message(Message(content=kwargs.pop("publish"), cause_by=UserRequirement))
            if "project" in kwargs:
                team.run_project(kwargs.pop("project"))
            await team.run(**kwargs)
    finally:
        for llm in {id(r.llm): r.llm for r in team.env.roles.values()}.values():
            await llm.aclient.close()


def _step_of(span: Any, spans: list) -> Any:
    while span is not None and sc.STEP_INDEX not in span.attributes:
        span = parent_of(span, spans)
    return span


def _nowhere(secret: str, spans: list, records: list, store: Path) -> None:
    for span in spans:
        text = json.dumps(dict(span.attributes), default=str) + (span.status.description or "")
        text += json.dumps([[e.name, dict(e.attributes)] for e in span.events], default=str)
        assert secret not in text, span.name
    assert not [r for r in records if r.name.startswith("aegis") and secret in r.getMessage() + (r.exc_text or "")]
    assert all(secret not in p.read_text() for p in store.rglob("*") if p.is_file())


def test_react_and_by_order_roles_keep_their_actions_and_calls(model_server, provider, exporter, tmp_path, caplog):
    """Roles run at once each round: every action and model call is under its own role's step (the
    model's choice of action directly under it), whatever the interleaving."""
    server = model_server(policy)
    team = _writers(server.base_url)
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=tmp_path / "store")
    asyncio.run(_run(team, [{"n_round": 3, "idea": "Write a haiku"}]))
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes[sc.TASK] == "Write a haiku" and root.status.status_code is StatusCode.UNSET
    steps = [s for s in spans if sc.STEP_INDEX in s.attributes]
    assert [(s.attributes[sc.STEP_INDEX], s.attributes[sc.AGENT_NAME]) for s in steps] == [
        (0, "Writer"), (1, "Editor"), (2, "Critic")]
    by_agent = {s.attributes[sc.AGENT_NAME]: s for s in steps}
    tools = [s for s in spans if s.attributes[sc.OPERATION] == sc.OP_TOOL]
    assert [t.name for t in tools if parent_of(t, spans) is by_agent["Writer"]] == [
        "execute_tool Draft", "execute_tool Polish", "execute_tool Polish"]
    assert [t.name for t in tools if parent_of(t, spans) is by_agent["Editor"]] == ["execute_tool Draft", "execute_tool Polish"]
    assert [t.name for t in tools if parent_of(t, spans) is by_agent["Critic"]] == ["execute_tool Judge"]
    chats = [s for s in spans if s.attributes[sc.OPERATION] == sc.OP_CHAT]
    assert len(chats) == len(server.requests) == 3 * 2 + 2 + 1
    for chat in chats:  # each call under the step of the agent that made it
        assert _step_of(chat, spans).attributes[sc.AGENT_NAME] == chat.attributes[sc.AGENT_NAME]
    choices = [c for c in chats if parent_of(c, spans) is by_agent["Writer"]]
    assert [json.loads(c.attributes[sc.OUTPUT_MESSAGES])[0]["parts"][0]["content"] for c in choices] == ["0", "1", "1"]
    critic_input = [(m.name, m.content) for m in probe.trajectory().steps[2].input_messages]
    assert sorted(critic_input) == [("Editor", "polished"), ("Writer", "polished")]  # what each role published
    no_hook_errors(caplog.records)


def test_a_team_run_twice_with_round_limits_and_outside_messages(model_server, provider, exporter, tmp_path):
    """Each ``Team.run`` is a trace of its own, with its own task: the idea given, else the requirement
    ``run_project`` or the app published into the environment (not the idea of an earlier run), else
    the team's idea (a run that goes on with the project); ``n_round=1`` stops after the first round's steps."""
    server = model_server(policy)
    team = _writers(server.base_url)
    aegis_probe.instrument(team, tracer_provider=provider, store=tmp_path / "store")
    asyncio.run(_run(team, [{"n_round": 1, "idea": "first idea"}, {"n_round": 2, "idea": "second idea"},
                            {"n_round": 1, "publish": "outside request"}, {"n_round": 1, "project": "a project"},
                            {"n_round": 1}]))
    spans = ours(exporter)
    roots = [s for s in spans if s.parent is None]
    assert [r.attributes.get(sc.TASK) for r in roots] == ["first idea", "second idea", "outside request", "a project", "a project"]
    assert len({s.context.trace_id for s in spans}) == 5
    steps = {r.context.trace_id: [s.attributes[sc.AGENT_NAME] for s in spans
                                  if sc.STEP_INDEX in s.attributes and s.context.trace_id == r.context.trace_id]
             for r in roots}
    first, second, outside, project, idle = (steps[r.context.trace_id] for r in roots)
    assert first == outside == ["Writer", "Editor"]  # one round: the Critic's news comes in the next
    # a run's first round has the Critic judge what the run before left for it
    assert second == ["Writer", "Editor", "Critic", "Critic"] and project == ["Writer", "Editor", "Critic"]
    assert idle == ["Critic"]  # on the last round's messages, left for the next run


def test_a_failing_action_fails_the_team_run_without_the_key(model_server, provider, exporter, tmp_path, caplog):
    server = model_server(policy)
    team = _team(server.base_url, ("Bomber", [Explode], [UserRequirement]), ("Critic", [Judge], [Draft]))
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=tmp_path / "store")
    with caplog.at_level(logging.DEBUG):
        asyncio.run(_run(team, [{"n_round": 3, "idea": "go"}]))  # metagpt swallows the role's error
        probe.flush()
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    (step,) = [s for s in spans if sc.STEP_INDEX in s.attributes]
    (tool,) = [s for s in spans if s.attributes[sc.OPERATION] == sc.OP_TOOL]
    for span in (root, step, tool):
        assert span.status.status_code is StatusCode.ERROR and span.attributes[sc.ERROR_TYPE] == "RuntimeError"
        assert span.status.description == "RuntimeError: vault refused key [REDACTED]"
    assert root.attributes[sc.OUTCOME_SUCCESS] is False and probe.trajectory().outcome.success is False
    _nowhere(KEY, spans, caplog.records, tmp_path / "store")


@pytest.mark.parametrize("where", ["action", "model"])
def test_a_lone_roles_error_fails_its_run_as_the_error_it_raised(where, model_server, provider, exporter, tmp_path, caplog):
    """metagpt re-raises a role's error as a bare ``Exception`` of its traceback text; the run's root
    records the error the role raised (type and message, redacted), as its step does."""
    server = model_server(policy)
    ctx = demo.llm_context(server.base_url, MODEL, "sk-test")
    role = _role("Solo", [Explode if where == "action" else Draft], [UserRequirement], ctx)
    probe = aegis_probe.instrument(role, tracer_provider=provider, store=tmp_path / "store")
    with caplog.at_level(logging.DEBUG), pytest.raises(Exception, match="Traceback") as raised:
        asyncio.run(role.run("please FAIL"))
    assert type(raised.value) is Exception  # what the app gets, unchanged
    probe.flush()
    spans = ours(exporter)
    (root,) = [s for s in spans if s.parent is None]
    (step,) = [s for s in spans if sc.STEP_INDEX in s.attributes]
    error = "RuntimeError" if where == "action" else "InternalServerError"
    for span in (root, step):
        assert span.status.status_code is StatusCode.ERROR and span.attributes[sc.ERROR_TYPE] == error
        assert "Traceback" not in span.status.description and "[REDACTED]" in span.status.description
    assert probe.trajectory().error.startswith(error)
    _nowhere(KEY, spans, caplog.records, tmp_path / "store")


class SimpleCoder(Role):
    """metagpt's tutorial role: its own ``_act`` runs the action on the last message."""

    async def _act(self) -> Message:
        todo = self.rc.todo
        text = await todo.run(self.get_memories(k=1))
        return Message(content=text, role=self.profile, cause_by=type(todo))


class CarefulCoder(SimpleCoder):
    """An ``_act`` that logs around ``super()._act()`` (one action, one span)."""

    async def _act(self) -> Message:
        return await super()._act()


def test_roles_with_their_own_act_record_their_action(model_server, provider, exporter, tmp_path):
    """A role class overriding ``_act`` (defined after ``instrument``, too): each action is one
    ``execute_tool`` span under the step, its model call inside it, with or without ``super()._act()``."""
    from metagpt.roles import Engineer

    originals = {cls: vars(cls)["_act"] for cls in (SimpleCoder, CarefulCoder, Engineer)}
    server = model_server(policy)
    ctx = demo.llm_context(server.base_url, MODEL, "sk-test")
    team = Team(context=ctx)
    team.hire([_role("Writer", [Draft], [UserRequirement], ctx)])
    probe = aegis_probe.instrument(team, tracer_provider=provider, store=tmp_path / "store")
    assert all(vars(cls)["_act"] is not act for cls, act in originals.items())

    class LateCoder(Role):
        async def _act(self) -> Message:
            return Message(content=await self.rc.todo.run(self.get_memories(k=1)), role=self.profile, cause_by=type(self.rc.todo))

    for cls, name in ((SimpleCoder, "Simple"), (CarefulCoder, "Careful"), (LateCoder, "Late")):
        role = cls(name=name, profile=name, goal="code", context=ctx)
        role.set_actions([Polish])
        role._watch([Draft])
        team.hire([role])
    asyncio.run(_run(team, [{"n_round": 2, "idea": "code it"}]))
    spans = ours(exporter)
    steps = {s.attributes[sc.AGENT_NAME]: s for s in spans if sc.STEP_INDEX in s.attributes}
    assert sorted(steps) == ["Careful", "Late", "Simple", "Writer"]
    tools = [s for s in spans if s.attributes[sc.OPERATION] == sc.OP_TOOL]
    for name in ("Simple", "Careful", "Late"):
        (tool,) = [t for t in tools if parent_of(t, spans) is steps[name]]
        assert tool.name == "execute_tool Polish" and tool.attributes[sc.TOOL_CALL_RESULT] == "polished"
        (chat,) = [c for c in spans if c.attributes[sc.OPERATION] == sc.OP_CHAT and parent_of(c, spans) is tool]
        assert chat.attributes[sc.AGENT_NAME] == name
    late = vars(LateCoder)["_act"]
    assert hasattr(late, "__wrapped__")  # wrapped when the run started
    probe.uninstrument()
    assert all(vars(cls)["_act"] is act for cls, act in originals.items())
    assert vars(LateCoder)["_act"] is late.__wrapped__
