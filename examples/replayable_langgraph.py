"""An existing LangGraph app made replayable: what ``blame`` needs from a user's app (docs/replay.md).

A ``solver`` node answers a word problem and a ``checker`` node states the final answer. Making it
replayable took four small functions next to the graph: ``build_app`` (the graph on a given
OpenAI-compatible endpoint), ``run_app`` (one run, the final answer), ``judge`` (did the answer
succeed) and, optionally, ``policy`` (a scripted model that the embedded server on 127.0.0.1
answers with, so replays need no real model). ``fix`` is a fixer for ``blame --method replay``.

The scripted solver errs now and then when sampled (temperature > 0, chosen by the request's
seed), as a real model would: ``python examples/replayable_langgraph.py`` runs the app until a run
fails and prints that run's trace id.
"""

from __future__ import annotations

import random
import re
from typing import Any

from aegis_probe.modelserver import Reply
from aegis_probe.trajectory import Outcome, Trajectory

TASK = "A crate holds 12 bottles. How many bottles are in 7 crates and 5 loose bottles?"
EXPECTED = "89"
AGENTS = ("solver", "checker")
SYSTEM = {"solver": "You are the solver. Work out the arithmetic of the task.",
          "checker": "You are the checker. State the final answer as 'FINAL ANSWER: <number>'."}


def build_app(base_url: str, model: str, api_key: str, temperature: float = 0.0, seed: int = 0) -> Any:
    """The graph, both nodes on the OpenAI-compatible endpoint at ``base_url``."""
    from langchain_core.messages import SystemMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from pydantic import SecretStr

    llm = ChatOpenAI(model=model, base_url=base_url, api_key=SecretStr(api_key), temperature=temperature,
                     seed=seed, max_retries=0)

    def node(name: str) -> Any:
        def act(state: Any) -> dict[str, Any]:
            reply = llm.invoke([SystemMessage(SYSTEM[name]), *state["messages"]])
            reply.name = name
            return {"messages": [reply]}

        return act

    graph = StateGraph(MessagesState)
    graph.add_node("solver", node("solver"))
    graph.add_node("checker", node("checker"))
    graph.add_edge(START, "solver")
    graph.add_edge("solver", "checker")
    graph.add_edge("checker", END)
    return graph.compile(name="bottles")


def run_app(app: Any, task: str) -> str | None:
    """One run of the graph on ``task``: the last message's text."""
    state = app.invoke({"messages": [("user", task)]})
    return str(state["messages"][-1].content) if state.get("messages") else None


def judge(task: str | None, answer: str | None) -> Outcome:
    """Success when the answer's last number is the expected count."""
    numbers = re.findall(r"-?\d+", answer or "")
    return Outcome(success=bool(numbers) and numbers[-1] == EXPECTED, answer=answer, expected=EXPECTED)


def policy(body: dict[str, Any]) -> Reply:
    """The scripted model: ``policy(request body) -> Reply``; each node is told apart by its system
    prompt. Sampled (temperature > 0), the solver forgets the loose bottles 40% of the time."""
    messages = body.get("messages", [])
    system = str(messages[0].get("content")) if messages else ""
    if system.startswith(SYSTEM["solver"]):
        sampled = (body.get("temperature") or 0) > 0
        if sampled and random.Random(body.get("seed")).random() < 0.4:
            return Reply(content="12 * 7 = 84")
        return Reply(content="12 * 7 + 5 = 89")
    numbers = re.findall(r"-?\d+", str(messages[-1].get("content")) if messages else "")
    return Reply(content=f"FINAL ANSWER: {numbers[-1] if numbers else 'unknown'}")


def fix(trajectory: Trajectory, t: int) -> str | None:
    """A fixer: the solver's right arithmetic; the checker only repeats what it was given."""
    return "12 * 7 + 5 = 89" if trajectory.steps[t].agent == "solver" else None


if __name__ == "__main__":
    import aegis_probe
    from aegis_probe.modelserver import ModelServer

    with ModelServer(policy) as server:
        for seed in range(100):  # sampled runs until one fails
            app = build_app(server.base_url, "aegis-scripted", "not-needed", temperature=1.0, seed=seed)
            probe = aegis_probe.instrument(app, judge=judge)
            run_app(app, TASK)
            probe.flush()
            probe.uninstrument()
            if probe.trajectory(probe.last_trace_id).outcome.success is False:
                print(f"failed run: trace {probe.last_trace_id}")
                break
