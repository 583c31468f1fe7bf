"""MetaGPT in real use, through real ``Team``s of ``Role``s with ``Action``s (react modes by order,
react with the model choosing the action, a single action) and metagpt's openai LLM against the
loopback model server: a run of 300 role steps, odd bytes in the model's replies, an action's
result and the user's idea (NUL, lone surrogates, right-to-left text and emoji, control
characters, a 1 MiB turn), teams at once in two threads and in two asyncio tasks, a team
cancelled beside another, and a team let go."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from typing import Any

import pytest

demo = pytest.importorskip("aegis_probe.demos.metagpt")

from metagpt.actions import Action, UserRequirement  # noqa: E402
from metagpt.roles import Role  # noqa: E402
from metagpt.roles.role import RoleReactMode  # noqa: E402
from metagpt.team import Team  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.modelserver import Reply  # noqa: E402
from aegis_probe.storage.store import TraceStore  # noqa: E402
from framework_checks import (  # noqa: E402
    AT_ONCE, LONE, MEGA, ODD, SlowOrFast, all_in_flight, cancel_one_beside_another, cancelled_beside_whole, escaped,
    long_run_is_whole, memory_held_after, no_hook_errors, runs_stay_apart, run_at_once, store_lines_are_valid)

pytestmark = pytest.mark.metagpt

STEPS = 300
MODEL = "aegis-scripted"
FILES = "files: " + os.fsdecode(b"caf\xe9-\xff.txt")  # a file name that is not UTF-8, as os.listdir gives it
LISTED = "files: " + ODD
CHOOSE = "Just answer a number between"  # metagpt's prompt for the model to choose a react-mode role's action


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes workspace/ and logs/ in the working directory


class Say(Action):
    """Ask the model to answer the last message."""

    name: str = "Say"

    async def run(self, history: list[Any]) -> str:
        return await self._aask(f"Answer this: {history[-1].content if history else ''}")


class Open(Say):
    name: str = "Open"


class Follow(Say):
    name: str = "Follow"


class Think(Say):
    name: str = "Think"


class Respond(Say):
    name: str = "Respond"


class Close(Say):
    name: str = "Close"


class ListFiles(Action):
    """The model's answer, then a file listing (what a tool gave the action)."""

    name: str = "ListFiles"
    listing: str = LISTED

    async def run(self, history: list[Any]) -> str:
        return await self._aask(f"Answer this: {history[-1].content}") + " | " + self.listing


def _role(name: str, actions: list[Any], watch: list[type[Action]], ctx: Any,
          mode: RoleReactMode = RoleReactMode.REACT) -> Role:
    role = Role(name=name, profile=name, goal="talk", context=ctx)
    role.set_actions(actions)
    role._watch(watch)
    role._set_react_mode(mode)
    return role


def _team(base_url: str) -> Team:
    """Ann (two actions, by order), Bob (two actions, the model chooses one) and Cid (one action) in a
    ring: each acts on the one before, Ann on the user's idea and on Cid."""
    ctx = demo.llm_context(base_url, MODEL, "sk-test")
    team = Team(context=ctx)
    team.hire([_role("Ann", [Open, Follow], [UserRequirement, Close], ctx, RoleReactMode.BY_ORDER),
               _role("Bob", [Think, Respond], [Follow], ctx),
               _role("Cid", [Close], [Respond], ctx)])
    return team


async def _run(team: Team, idea: str, rounds: int) -> str:
    """Run the team, then close its LLM clients in the same loop; the team's history."""
    try:
        return await team.run(n_round=rounds, idea=idea)
    finally:
        for client in {id(c): c for c in (getattr(r.llm, "aclient", None) for r in team.env.roles.values())
                       if c is not None}.values():
            await client.close()


def test_a_team_of_300_steps_is_whole(model_server, tmp_path, caplog):
    """300 rounds, one role acting in each: Ann's steps make two model calls (one per action), Bob's
    two (choosing the action, then doing it), Cid's one; every step and call is in the one trace."""
    counter = itertools.count()

    def policy(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        if CHOOSE in prompt:
            return Reply("1")  # Bob's Respond action
        return Reply(f"{demo._agent(body)} says {next(counter)}")

    server = model_server(policy)
    team = _team(server.base_url)
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    asyncio.run(_run(team, "Count together.", STEPS))
    agents = ["Ann", "Bob", "Cid"] * (STEPS // 3)
    said = [m.content for m in team.env.roles["Cid"].rc.memory.get()]  # Cid hears everyone, itself too
    assert len(server.requests) == STEPS // 3 * 5
    traj = long_run_is_whole(probe, tmp_path / "store", agents, [s.output for s in probe.trajectory().steps],
                             len(server.requests))
    assert traj.task == "Count together."
    texts = [s.output for s in traj.steps]
    assert all(re.fullmatch(f"{agent} says \\d+", text) for agent, text in zip(agents, texts))
    assert [int(t.split()[-1]) for t in texts] == sorted(int(t.split()[-1]) for t in texts)  # nothing dropped, in order
    assert set(texts) <= set(said)
    assert [t.name for t in traj.steps[0].tool_calls] == ["Open", "Follow"] and [t.name for t in traj.steps[1].tool_calls] == ["Respond"]
    assert [len(s.llm_calls) for s in traj.steps[:3]] == [2, 2, 1]
    no_hook_errors(caplog.records)


def _pair(base_url: str, listing: str = LISTED) -> Team:
    """Ann answers the idea; Bob answers Ann, adding a file listing (``listing``) to the model's answer."""
    ctx = demo.llm_context(base_url, MODEL, "sk-test")
    team = Team(context=ctx)
    team.hire([_role("Ann", [Say], [UserRequirement], ctx), _role("Bob", [ListFiles(listing=listing)], [Say], ctx)])
    return team


def _said(team: Team) -> str:
    """Bob's last answer."""
    return team.env.roles["Bob"].rc.memory.get_by_action(ListFiles)[-1].content


@pytest.mark.parametrize("idea, reply", [(ODD, ODD), (MEGA, MEGA)], ids=["odd", "1MiB"])
def test_odd_bytes_pass_unchanged_and_are_recorded(idea, reply, model_server, tmp_path, caplog):
    """The team's history is the uninstrumented one; the store's line is valid UTF-8 JSON; the
    trajectory holds the idea, the replies and the action's result as they were."""
    def policy(body: dict[str, Any]) -> Reply:
        return Reply(ODD if demo._agent(body) == "Ann" else reply)

    bare = asyncio.run(_run(_pair(model_server(policy).base_url), idea, 3))
    team = _pair(model_server(policy).base_url)
    answer = f"{reply} | {LISTED}"
    probe = aegis_probe.instrument(team, store=tmp_path / "store", judge=lambda t, a: t == idea and a == answer)
    assert asyncio.run(_run(team, idea, 3)) == bare
    assert _said(team) == answer
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == idea and [m.content for m in traj.steps[0].input_messages] == [idea]
    assert [(s.agent, s.output) for s in traj.steps] == [("Ann", ODD), ("Bob", answer)]
    assert [m.content for m in traj.steps[1].input_messages] == [ODD]
    (call,) = traj.steps[1].llm_calls
    (tool,) = traj.steps[1].tool_calls
    assert call.output == reply and tool.result == answer
    assert traj.outcome.success and traj.outcome.answer == answer
    no_hook_errors(caplog.records)


def _ends(run: Any) -> tuple[Any, str]:
    """What ``asyncio.run(run)`` gives the app: its result, or its exception's type and text."""
    try:
        return "returned", asyncio.run(run)
    except Exception as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("where", ["idea", "reply", "action"])
def test_lone_surrogates_fail_the_team_as_uninstrumented(where, model_server, tmp_path, caplog):
    """Lone surrogates in the idea, a model's reply or an action's result (a file name that is not
    UTF-8): metagpt cannot publish (or serialize) such a message, nor the openai client send it; the
    app gets what it gets uninstrumented, and the failed run is stored with the text escaped."""
    idea = LONE if where == "idea" else "Say hi."
    listing = FILES if where == "action" else LISTED

    def policy(body: dict[str, Any]) -> Reply:
        return Reply(ODD + LONE if where == "reply" and demo._agent(body) == "Bob" else "hi")

    bare = _ends(_run(_pair(model_server(policy).base_url, listing), idea, 3))
    server = model_server(policy)
    team = _pair(server.base_url, listing)
    probe = aegis_probe.instrument(team, store=tmp_path / "store")
    got = _ends(_run(team, idea, 3))
    assert got == bare and got[0] != "returned"
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == escaped(idea) and traj.error and traj.outcome.success is not True
    assert [s.agent for s in traj.steps] == ([] if where == "idea" else ["Ann", "Bob"])  # the idea is never published
    if where == "reply":
        assert traj.steps[1].llm_calls[0].output == escaped(ODD + LONE)
    if where == "action":
        assert traj.steps[1].tool_calls[0].result == escaped(f"hi | {FILES}")
    no_hook_errors(caplog.records)


def test_a_lone_role_on_lone_surrogates_fails_as_uninstrumented(model_server, tmp_path, caplog):
    """A lone role's error reaches the app as metagpt raises it; the failed run is stored with its task escaped."""
    server = model_server(lambda body: Reply("never"))

    def role() -> Role:
        return _role("Ann", [Say], [UserRequirement], demo.llm_context(server.base_url, MODEL, "sk-test"))

    with pytest.raises(Exception) as bare:
        asyncio.run(role().run(LONE))
    app = role()
    probe = aegis_probe.instrument(app, store=tmp_path / "store")
    with pytest.raises(Exception) as instrumented:
        asyncio.run(app.run(LONE))
    assert type(instrumented.value) is type(bare.value) and "UnicodeEncodeError" in str(instrumented.value)
    assert not server.requests
    probe.flush()
    store_lines_are_valid(tmp_path / "store")
    traj = probe.trajectory()
    assert traj.task == escaped(LONE) and traj.error and [s.agent for s in traj.steps] == ["Ann"]
    no_hook_errors(caplog.records)


def test_teams_at_once_in_threads_and_tasks_stay_apart(model_server, tmp_path, caplog):
    """Four teams, one per run, each instrumented into one store: two run in two threads (an event
    loop each) and two as tasks of one loop, all at once. Each run's spans and outcome label are its
    own trace's."""
    def key_of(body: dict[str, Any]) -> str:
        return "".join(re.findall(r"idea of (\S+?)\.|(\S+) Ann says", json.dumps(body["messages"]))[0])

    server = model_server(all_in_flight(4, key_of, lambda key, body: Reply(f"{key} {demo._agent(body)} says")))
    store = TraceStore(tmp_path / "store")
    tasks = {key: f"idea of {key}." for key in AT_ONCE}
    teams = {key: _pair(server.base_url) for key in tasks}
    probes = {key: aegis_probe.instrument(team, store=store) for key, team in teams.items()}

    async def one_async(key: str) -> str:
        await _run(teams[key], tasks[key], 3)
        probes[key].set_outcome(key.endswith("ok"), answer=key)  # the caller's own run
        return _said(teams[key])

    def one(key: str) -> str:
        return asyncio.run(one_async(key))

    answers = run_at_once(one, one_async)
    assert answers == [f"{key} Bob says | {LISTED}" for key in AT_ONCE]
    for probe in probes.values():
        probe.flush()
    runs = runs_stay_apart(tmp_path / "store", tasks, {k: k for k in tasks})
    for key, traj in runs.items():
        assert [s.agent for s in traj.steps] == ["Ann", "Bob"], key
    no_hook_errors(caplog.records)


def test_a_team_cancelled_beside_another_ends_alone(model_server, tmp_path, caplog):
    """Two teams' runs as two asyncio tasks; the app cancels one mid-call (a timeout): it ends
    cancelled in its own trace, the other is whole."""
    policy = SlowOrFast()
    base_url = model_server(policy).base_url
    store = TraceStore(tmp_path / "store")
    probes, teams = [], []

    def run(task: str) -> Any:
        team = _pair(base_url)
        teams.append(team)
        probes.append(aegis_probe.instrument(team, store=store))
        return team.run(n_round=3, idea=task)

    history = asyncio.run(cancel_one_beside_another(policy, run))
    assert "done fast" in history
    for probe in probes[1:]:
        probe.flush()
    cancelled_beside_whole(probes[0], tmp_path / "store")
    no_hook_errors(caplog.records)


def test_a_dropped_team_leaves_no_memory_behind(model_server, tmp_path):
    """A server-style app: teams whose roles get 1 MiB replies, each built, instrumented and let go.
    Nothing of them stays allocated."""
    def policy(body: dict[str, Any]) -> Reply:
        return Reply("1" if CHOOSE in body["messages"][-1]["content"] else "y" * (1 << 20) + demo._agent(body))

    server = model_server(policy)

    def run() -> None:
        team = _team(server.base_url)
        probe = aegis_probe.instrument(team, store=tmp_path / "store")
        asyncio.run(_run(team, "Count together.", 3))
        assert len(server.requests) == 5
        probe.flush()
        probe.uninstrument()
        server.requests.clear()

    assert memory_held_after(run) < 1.0
