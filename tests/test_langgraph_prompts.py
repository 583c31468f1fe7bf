"""LangGraph's model-call prompts converted incrementally: each state message is converted once per
run into the ``SharedMessage`` every later prompt, step input and step output share, the model's
answer is encoded once, and a message edited in place or replaced is read anew (the real langgraph
and langchain-core, a chat model class answering in process, the OTel SDK)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402

import aegis_probe  # noqa: E402
from aegis_probe.adapters import langgraph as adapter  # noqa: E402
from aegis_probe.capture import messages as message_json  # noqa: E402
from aegis_probe.capture import semconv as sc  # noqa: E402
from aegis_probe.capture.messages import SharedMessage  # noqa: E402
from aegis_probe.capture.spans import current_run  # noqa: E402

_fresh = adapter._convert  # a conversion of a message's fields, no cache


class CountingModel(BaseChatModel):
    """Answers at once: every third answer a tool call, else a numbered text (finish reason ``stop``)."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "counting"

    def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        if self.calls % 3 == 0:
            message = AIMessage(content="", tool_calls=[{"name": "add", "args": {"x": self.calls}, "id": f"c{self.calls}"}],
                                response_metadata={"finish_reason": "tool_calls"})
        else:
            message = AIMessage(content=f"answer {self.calls} of {len(messages)}", response_metadata={"finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=message)])


def _spied_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]], Any]]:
    """Each model call's neutral prompt, a fresh conversion of its messages then, and its run."""
    seen: list[tuple[list[dict[str, Any]], list[dict[str, Any]], Any]] = []
    request = adapter.LangChainCodec.request

    def spy(self: Any, args: tuple, kwargs: dict) -> list[dict[str, Any]]:
        out = request(self, args, kwargs)
        seen.append((out, [_fresh(m.__dict__) for m in self._messages(args, kwargs)], current_run()))
        return out

    monkeypatch.setattr(adapter.LangChainCodec, "request", spy)
    return seen


def _turns(llm: CountingModel, steps: int) -> Any:
    """Two nodes taking turns on the conversation; a tool call is answered by the node that got it."""
    def speaker(state: Any) -> dict[str, Any]:
        answer = llm.invoke(state["messages"])
        replies = [ToolMessage(content=str(c["args"]["x"] * 2), tool_call_id=c["id"]) for c in answer.tool_calls]
        return {"messages": [answer, *replies]}

    graph = StateGraph(MessagesState)
    graph.add_node("alice", speaker)
    graph.add_node("bob", speaker)
    graph.add_edge(START, "alice")
    graph.add_conditional_edges("alice", lambda s: END if llm.calls >= steps else "bob", ["bob", END])
    graph.add_conditional_edges("bob", lambda s: END if llm.calls >= steps else "alice", ["alice", END])
    return graph.compile()


def test_each_message_is_converted_once_per_run_and_prompts_share_them(provider, exporter, tmp_path, monkeypatch):
    """Every prompt equals a fresh conversion; each message of the run (task, answers, tool calls and
    results) is converted once and is the same ``SharedMessage`` in every later prompt; each answer
    but the last is encoded once for its chat's output, its step's output and the next prompt (the
    chat's output keeping its finish reason); the run's caches go when it ends."""
    seen = _spied_requests(monkeypatch)
    converted: list[Any] = []
    convert = adapter._convert
    monkeypatch.setattr(adapter, "_convert", lambda fields: converted.append(fields.get("content")) or convert(fields))
    encoded: Counter[str] = Counter()
    fragment = message_json._fragment

    def counted(m: Any, redact: Any) -> str:
        encoded[str(m.get("content")) + json.dumps(m.get("tool_calls"))] += 1
        return fragment(m, redact)

    monkeypatch.setattr(message_json, "_fragment", counted)
    llm = CountingModel()
    graph = _turns(llm, steps=9)
    probe = aegis_probe.instrument(graph, tracer_provider=provider, store=tmp_path / "store")
    try:
        state = graph.invoke({"messages": [HumanMessage("Add the numbers, twice each.")]}, {"recursion_limit": 30})
    finally:
        probe.uninstrument()

    final = state["messages"]
    assert len(seen) == 9 and len(final) == 1 + 9 + 3  # the task, 9 answers, 3 tool results
    assert all(out == fresh for out, fresh, _ in seen)
    assert all(type(m) is SharedMessage for out, _, _ in seen for m in out)
    for (before, _, _), (after, _, _) in zip(seen, seen[1:]):  # a later prompt holds the earlier one's objects
        assert len(after) > len(before) and all(a is b for a, b in zip(before, after))
    # each message once (task, answers, tool results), and the task once more for the run's task (before the run)
    assert len(converted) == len(final) + 1, converted
    answers = [m for m in final if isinstance(m, AIMessage)]
    for answer in answers[:-1]:
        key = str(adapter.to_neutral(answer)["content"]) + json.dumps(adapter.to_neutral(answer).get("tool_calls"))
        assert encoded[key] == 1, (key, encoded)
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    outputs = [json.loads(s.attributes[sc.OUTPUT_MESSAGES])[0] for s in chats]
    assert [o["finish_reason"] for o in outputs] == ["stop", "stop", "tool_calls"] * 3
    assert outputs[0]["parts"] == [{"type": "text", "content": "answer 1 of 1"}]
    assert outputs[2]["parts"] == [{"type": "tool_call", "id": "c3", "name": "add", "arguments": '{"x": 3}'}]
    assert json.loads(chats[-1].attributes[sc.INPUT_MESSAGES]) == json.loads(message_json.encode_messages(
        [adapter.to_neutral(m) for m in final[:-2]], probe.redact))  # the last answer a tool call
    run = seen[-1][2]
    assert run is not None and all(r is run for _, _, r in seen) and not run.caches  # let go when the run ended


def test_a_message_edited_in_place_or_replaced_between_calls_is_read_anew(provider, exporter, tmp_path, monkeypatch):
    """A node between two model calls edits state messages in place (a text set, a content part and a
    tool call's arguments changed inside their lists) and has the reducer replace one by id: the next
    prompt, and its chat span's input, read every change; nothing stale is served."""
    seen = _spied_requests(monkeypatch)
    llm = CountingModel()

    def ask(state: Any) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    def edit(state: Any) -> dict[str, Any]:
        task, call, _, parts, note = state["messages"][:5]
        task.content = "The edited task."
        call.tool_calls[0]["args"]["x"] = 99
        parts.content[0]["text"] = "an edited part"
        return {"messages": [HumanMessage("A replaced note.", id=note.id)]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_node("edit", edit)
    graph.add_node("ask_again", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "edit")
    graph.add_edge("edit", "ask_again")
    graph.add_edge("ask_again", END)
    app = graph.compile()
    history = [
        HumanMessage("The original task."),
        AIMessage(content="", tool_calls=[{"name": "add", "args": {"x": 1}, "id": "c1"}]),
        ToolMessage(content="2", tool_call_id="c1"),
        HumanMessage(content=[{"type": "text", "text": "an original part"}]),
        HumanMessage("An original note."),
    ] + [HumanMessage(f"filler {i}") for i in range(6)]  # long enough for the prompt JSON to be extended
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    try:
        app.invoke({"messages": history})
    finally:
        probe.uninstrument()

    assert len(seen) == 2 and all(out == fresh for out, fresh, _ in seen)
    first, again = seen[0][0], seen[1][0]
    assert [m["content"] for m in again[:5:3]] == ["The edited task.", "an edited part"]
    assert json.loads(again[1]["tool_calls"][0]["arguments"]) == {"x": 99} and again[4]["content"] == "A replaced note."
    assert first[2] is again[2] and first[5] is again[5]  # the messages left as they were stay shared
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    recorded = chats[-1].attributes[sc.INPUT_MESSAGES]
    assert all(text in recorded for text in ("The edited task.", "an edited part", '\\"x\\": 99', "A replaced note."))
    assert not any(text in recorded for text in ("original", '\\"x\\": 1}'))
    assert json.loads(recorded) == json.loads(message_json.encode_messages([dict(m) for m in again], probe.redact))
