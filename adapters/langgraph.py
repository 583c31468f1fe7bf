"""LangGraph (langgraph 1.x, langchain-core 1.x) adapter: a compiled graph (``Pregel``) is the app.

Class- and module-level patches, installed once:

- run entry: ``Pregel.stream/astream`` of a registered graph (``invoke``/``ainvoke`` go through
  them): one run per call, ``invoke_workflow {graph.name}``, its conversation id the checkpointer's
  ``thread_id`` when the config names one. A graph invoked inside a run (a subgraph node, a graph
  a node calls) opens no run of its own. A registered graph's ``copy`` (what ``with_config``
  returns) is registered too;
- agent step: ``langgraph.pregel._runner.run_with_retry/arun_with_retry``, one node execution of
  the run's outermost graph -> ``invoke_agent {node}`` (retries of a node are one step). Nodes
  inside a step (a ``create_react_agent`` subgraph's ``agent``/``tools`` nodes) belong to that
  step; ``__start__``-style internal nodes are not steps. The step's input is the state's
  ``messages`` the node has not seen (all on its first step, then those added since its last,
  told by id once messages were removed; on a checkpointer thread, since its last step in any of
  the thread's runs in this process, an interrupted step not counting;
  a state without ``messages``: the state itself), its output the messages the node wrote
  (else its writes); a state or writes as JSON text whatever they hold (:func:`~aegis_probe.capture.jsontext.json_text`);
- LLM call: ``BaseChatModel._generate_with_cache/_agenerate_with_cache`` (every LangChain chat
  model, streaming or not) through :func:`~aegis_probe.capture.interception.call_llm` with
  :class:`LangChainCodec`; a streamed call's chunks are held while interceptors decide, and a new
  answer streamed as chunks (:mod:`~aegis_probe.adapters.langgraph_stream`);
- tool call: ``BaseTool.run/arun`` (what ``ToolNode`` and ``tool.invoke`` call) -> ``execute_tool {tool}``;
  a tool that interrupts (``interrupt()`` asking a human) ends its span without error.

A node that interrupts (``interrupt()``, ``GraphBubbleUp``) ends its step normally; the run ends
when the stream does. A stream the app leaves before its end (closed, dropped, or an ``astream``
dropped after its event loop closed, whose end then never runs) ends its run cancelled: ERROR,
``error.type`` ``CancelledError``.
"""

from __future__ import annotations

import json
import operator
import threading
import weakref
from asyncio import CancelledError
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from aegis_probe.capture import semconv as sc
from aegis_probe.adapters.langgraph_stream import StreamedCall
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher
from aegis_probe.capture.interception import LLMResponse, acall_llm, call_llm
from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import SharedMessage, content_text
from aegis_probe.capture.spans import (
    ChatMessage,
    RunScope,
    StepScope,
    await_in_scope,
    call_in_scope,
    current_run,
    current_step,
    iterate_in_scope,
    iterate_sync_in_scope,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)
from aegis_probe.capture.streaming import WatchedStream, end_once
from aegis_probe.capture.usage import langchain_usage

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}


#: Content parts that are not the message's text: the tool calls its ``tool_calls`` carry already
#: (Anthropic's ``tool_use`` blocks, ...) and a model's reasoning (kept out of its answer, as before,
#: so a replayed answer is the text the app got).
_NOT_TEXT = frozenset({"tool_use", "tool_call", "tool_call_chunk", "function_call", "reasoning", "thinking",
                       "redacted_thinking"})


def _text(content: Any) -> str:
    """Text of a LangChain message content: a string, or a list of parts read by the rule every
    adapter shares (:func:`~aegis_probe.capture.messages.content_text`: one part per line, an image or a
    file as ``[its type]``), leaving out tool-call and reasoning parts."""
    if isinstance(content, list):
        return content_text([p for p in content if not (isinstance(p, dict) and str(p.get("type")) in _NOT_TEXT)])
    return "" if content is None else str(content)


# A graph's state hands the same message objects to every node and model call, so each message is
# converted once per run into a ``SharedMessage`` kept in the run's caches (``RunScope.caches``, let
# go of when it ends): a step's input, its output, the model's answer and every later prompt are the
# same object, encoded once, and ``encode_messages`` extends the last prompt's JSON. A conversion is
# served only while the message's fields equal a copy taken when it was converted (its content parts
# and tool calls copied too; compared in C): a message edited in place (a field set, a part or a tool
# call changed, as a reducer may) is converted anew. Messages are found by identity, else by their id
# (or text, for one without), so an equal copy shares the conversion too. A prompt whose first
# messages are those of the run's last prompt starting with the same message, their fields unchanged,
# converts only the messages after them. (A message a node writes without an id gets one from the
# reducer after its step's output was read: that alone keeps its conversion.)
_NO_FIELDS: dict[str, Any] = {}
_CACHE = "langgraph"
_SHARED_MAX = 4096  # messages per run
_PROMPTS_MAX = 64  # conversations per run
_fields = operator.attrgetter("__dict__")  # a pydantic message's field values
_id_of = operator.attrgetter("id")

_Entry = tuple[Any, dict[str, Any], SharedMessage]  # (message, copy of its fields, its neutral form)


def _copied(value: Any) -> Any:
    """``value`` with every list and dict in it copied (a snapshot that in-place edits leave as it was)."""
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def _same(snapshot: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether a message's ``fields`` still equal ``snapshot`` (a value that cannot be compared: no)."""
    try:
        return bool(snapshot == fields)
    except Exception:
        return False


class _Converted:
    """A run's converted messages: by object, by id or text, and the last prompt per first message."""

    __slots__ = ("objects", "keys", "prompts")

    def __init__(self) -> None:
        self.objects: dict[int, _Entry] = {}  # the entry holds the message: its id is not reused meanwhile
        self.keys: dict[Any, tuple[dict[str, Any], SharedMessage]] = {}
        self.prompts: dict[int, tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]]]] = {}

    def entry(self, msg: Any, fields: dict[str, Any]) -> _Entry:
        """The conversion of ``msg`` (whose field values are ``fields``), made if none is current."""
        entry = self.objects.get(id(msg))
        if entry is not None and entry[0] is msg:
            try:
                if entry[1] == fields:
                    return entry
                if entry[1]["id"] is None and {**fields, "id": None} == entry[1]:  # the reducer gave it its id
                    entry = self.objects[id(msg)] = (msg, _snapshot(fields), entry[2])
                    return entry
            except Exception:  # a value that cannot be compared: converted anew
                pass
        content = fields.get("content")
        key = fields.get("id") or (content if type(content) is str else None)
        known = self.keys.get(key) if key is not None else None
        if known is None or not _same(known[0], fields):
            known = (_snapshot(fields), _convert(fields))
            if key is not None:
                if len(self.keys) >= _SHARED_MAX:
                    self.keys.clear()
                self.keys[key] = known
        if len(self.objects) >= _SHARED_MAX:
            self.objects.clear()
        entry = self.objects[id(msg)] = (msg, *known)
        return entry

    def prompt(self, msgs: list[Any]) -> list[dict[str, Any]]:
        """Neutral messages of a model call's ``msgs``, converting only those after the run's last
        prompt of the same conversation when they start with its messages, unchanged."""
        if not msgs:
            return []
        hit = self.prompts.get(id(msgs[0]))
        done = 0
        if hit is not None and len(hit[0]) <= len(msgs):
            try:
                if list(map(_fields, msgs[: len(hit[0])])) == hit[1]:
                    done = len(hit[0])
            except Exception:  # a message without fields (not a LangChain message), one that cannot be compared
                pass
        snapshots, out = (hit[1][:], hit[2][:]) if done else ([], [])  # type: ignore[index]
        whole = True
        for m in msgs[done:]:
            fields = getattr(m, "__dict__", None)
            if fields is None or "type" not in fields:
                out.append(_plain(m))
                whole = False
                continue
            entry = self.entry(m, fields)
            snapshots.append(entry[1])
            out.append(entry[2])
        if whole:
            if len(self.prompts) >= _PROMPTS_MAX and id(msgs[0]) not in self.prompts:
                self.prompts.clear()
            self.prompts[id(msgs[0])] = (msgs[:], snapshots, out)
        return out[:]


def _run_converted(run: RunScope | None) -> _Converted | None:
    """``run``'s converted messages; None outside runs."""
    if run is None:
        return None
    converted = run.caches.get(_CACHE)
    if converted is None:
        converted = run.caches[_CACHE] = _Converted()
    return converted  # type: ignore[no-any-return]


def _snapshot(fields: dict[str, Any]) -> dict[str, Any]:
    """A copy of a message's fields that its in-place edits leave as it was (content parts and tool calls copied)."""
    snapshot = dict(fields)
    for name in ("content", "tool_calls"):
        value = snapshot.get(name)
        if isinstance(value, (list, dict)):
            snapshot[name] = _copied(value)
    return snapshot


def to_neutral(msg: Any, converted: _Converted | None = None) -> dict[str, Any]:
    """A neutral message from a LangChain ``BaseMessage`` (or a ``(role, text)`` tuple, string or dict);
    the shared conversion of it ``converted`` (a run's) holds, if given."""
    fields = getattr(msg, "__dict__", None)  # fields read from __dict__: pydantic's __getattr__ is slow
    if fields is None or "type" not in fields:
        return _plain(msg)
    return _convert(fields) if converted is None else converted.entry(msg, fields)[2]


def _convert(fields: dict[str, Any]) -> SharedMessage:
    """The neutral form of a LangChain message of field values ``fields``."""
    content, name = fields.get("content"), fields.get("name")
    out = SharedMessage(role=_ROLES.get(fields["type"], "user"), content=_text(content))
    if name:
        out["name"] = name
    calls = fields.get("tool_calls")
    if calls:
        out["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "arguments": json.dumps(c.get("args") or {})}
                             for c in calls]
    elif fields.get("tool_call_id"):
        out["tool_call_id"] = fields["tool_call_id"]
    return out


def _plain(msg: Any) -> dict[str, Any]:
    """A neutral message of the shorthand forms LangGraph accepts as input."""
    if isinstance(msg, tuple) and len(msg) == 2:
        return {"role": {"human": "user", "ai": "assistant"}.get(msg[0], msg[0]), "content": _text(msg[1])}
    if isinstance(msg, dict):
        return {"role": msg.get("role", "user"), "content": _text(msg.get("content"))}
    return {"role": "user", "content": _text(msg)}


def _args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"input": arguments}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def _tool_calls(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """LangChain ``tool_calls`` of neutral tool calls."""
    return [{"id": c.get("id") or f"call_{i}", "name": c.get("name"), "args": _args(c.get("arguments")), "type": "tool_call"}
            for i, c in enumerate(calls)]


def from_neutral(msg: ChatMessage) -> Any:
    """The LangChain message of a neutral one."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    role, content, name = msg.get("role"), msg.get("content") or "", msg.get("name")
    if role == "assistant":
        return AIMessage(content=content, name=name, tool_calls=_tool_calls(msg.get("tool_calls") or ()))
    if role == "system":
        return SystemMessage(content=content, name=name)
    if role == "tool":
        return ToolMessage(content=content, name=name, tool_call_id=msg.get("tool_call_id") or "")
    return HumanMessage(content=content, name=name)


#: ``BaseChatModel._llm_type`` prefixes -> ``gen_ai.provider.name`` (most specific first).
_LLM_TYPES = (("azure-openai", "azure.ai.openai"), ("openai", "openai"), ("anthropic", "anthropic"),
              ("mistral", "mistral_ai"), ("groq", "groq"), ("deepseek", "deepseek"), ("ollama", "ollama"))


class LangChainCodec:
    """``BaseChatModel._generate_with_cache(messages, ...)`` and its ``ChatResult`` <-> neutral form."""

    provider = "langchain"

    # Fields are read from the model's __dict__: a missing one would go through pydantic's slow __getattr__.
    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        fields = getattr(instance, "__dict__", _NO_FIELDS)
        name = fields.get("model_name") or fields.get("model")
        return str(name) if name else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        fields = getattr(instance, "__dict__", _NO_FIELDS)
        url = fields.get("openai_api_base") or fields.get("base_url")
        llm_type = str(getattr(instance, "_llm_type", ""))
        default = next((p for prefix, p in _LLM_TYPES if llm_type.startswith(prefix)), llm_type or self.provider)
        params = {k: fields.get(k) for k in ("temperature", "top_p", "max_tokens", "seed", "n")}
        return {**sc.request_attributes(params), **sc.server_attributes(url), sc.PROVIDER: sc.provider_name(url, default)}

    @staticmethod
    def _messages(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return list(kwargs["messages"] if "messages" in kwargs else args[0])

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        messages = self._messages(args, kwargs)
        converted = _run_converted(current_run())
        return [to_neutral(m) for m in messages] if converted is None else converted.prompt(messages)

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        new = [from_neutral(m) for m in messages]
        if "messages" in kwargs:
            return args, {**kwargs, "messages": new}
        return (new, *args[1:]), kwargs

    def response(self, raw: Any) -> LLMResponse:
        message = raw.generations[0].message
        usage = getattr(message, "usage_metadata", None) or {}
        meta = getattr(message, "response_metadata", None) or {}
        neutral = to_neutral(message, _run_converted(current_run()))
        calls = neutral.get("tool_calls")
        return LLMResponse(
            content=neutral["content"] or None,
            tool_calls=[dict(c) for c in calls] if calls else [],  # copies: interceptors may edit them
            **langchain_usage(usage),
            model=meta.get("model_name"),
            finish_reason=meta.get("finish_reason"),
            id=meta.get("id") or getattr(message, "id", None),
            message=neutral,
        )

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        meta = {"model_name": response.model or "aegis",
                "finish_reason": response.finish_reason or ("tool_calls" if response.tool_calls else "stop")}
        usage: dict[str, Any] | None = None
        if response.input_tokens is not None or response.output_tokens is not None:
            i, o = response.input_tokens or 0, response.output_tokens or 0
            usage = {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}
            cached = {"cache_read": response.cache_read_input_tokens, "cache_creation": response.cache_creation_input_tokens}
            if any(v is not None for v in cached.values()):
                usage["input_token_details"] = {k: v for k, v in cached.items() if v is not None}
            if response.reasoning_output_tokens is not None:
                usage["output_token_details"] = {"reasoning": response.reasoning_output_tokens}
        old = raw.generations[0].message if raw is not None and raw.generations else None
        message = AIMessage(content=response.content or "", tool_calls=_tool_calls(response.tool_calls),
                            usage_metadata=usage, response_metadata=meta,
                            name=getattr(old, "name", None), id=getattr(old, "id", None))
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output=getattr(raw, "llm_output", None))


def _streamed(probe: "Probe", instance: Any, args: tuple, kwargs: dict, is_async: bool) -> StreamedCall | None:
    """A streamed model call under interceptors, its chunks to be held while they decide (else None)."""
    if not probe.interceptors:
        return None
    try:
        return StreamedCall.of(instance, args, kwargs, is_async)
    except Exception:
        log_hook_error("llm stream start")
        return None


def _parsed(result: Any, probe: "Probe", kwargs: dict) -> Any:
    """``result``, its message given the ``parsed`` answer ``langchain-openai``'s structured output
    reads (``with_structured_output``: a ``response_format`` in the call) when a rebuilt (replayed,
    injected) answer lacks it: the JSON object its text holds; text that is not one is left to fail
    the parser as the provider's would."""
    if not probe.interceptors or kwargs.get("response_format") is None:
        return result
    try:
        message = result.generations[0].message
        if message.additional_kwargs.get("parsed") is None and isinstance(message.content, str) and not message.tool_calls:
            parsed = json.loads(message.content)
            if isinstance(parsed, dict):
                message.additional_kwargs["parsed"] = parsed
    except ValueError:
        pass
    except Exception:
        log_hook_error("structured output")
    return result


def _stream_args(args: tuple, kwargs: dict) -> tuple[Any, dict[str, Any]]:
    """``(input, config)`` of a ``Pregel.stream/astream`` call."""
    graph_input = kwargs["input"] if "input" in kwargs else args[0] if args else None
    config = kwargs["config"] if "config" in kwargs else args[1] if len(args) > 1 else None
    return graph_input, config or {}


def _messages_of(state: Any) -> list[Any] | None:
    """The ``messages`` of a graph state (a dict or an object), if it has any."""
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    if messages is None:
        return None
    return list(messages) if isinstance(messages, (list, tuple)) else [messages]


def _task_text(graph_input: Any) -> str | None:
    """The task of a run: the last user message of the input state (which may carry the conversation
    so far), else the input as text. A ``Command`` (resuming an interrupted thread) has one only if
    its ``update`` adds a user message: a resume value is a human's answer, not a task."""
    from langgraph.types import Command

    command = isinstance(graph_input, Command)
    messages = _messages_of(graph_input.update if command else graph_input)
    if messages:
        last = next((m for m in map(to_neutral, reversed(messages)) if m["role"] == "user"), None)
        if last is not None:
            return last["content"]
    return None if graph_input is None or command else str(graph_input)


def _step_output(task: Any, seen: set[str], converted: _Converted | None) -> tuple[list[dict[str, Any]], list[Any]]:
    """What a node wrote: its new messages (neutral, ``converted``'s shared forms, else its other
    writes as one message) and the message objects it wrote."""
    messages, written, other = [], [], {}
    for channel, value in list(task.writes):
        if channel == "messages":
            for m in value if isinstance(value, (list, tuple)) else [value]:
                written.append(m)
                if getattr(m, "id", None) is None or m.id not in seen:
                    messages.append(to_neutral(m, converted))
        elif not channel.startswith(("branch:", "__")):
            other[channel] = value
    if messages or not other:
        return messages, written
    return [{"role": "assistant", "content": json_text(other)}], written


@dataclass
class _Seen:
    """What a node had seen when its last step ended: the number and ids of the state's messages
    at its start, and the messages it wrote: held weakly (a thread's memory outlives its app) until
    the run ends, when the state's reducer has given them their ids, then by those ids."""

    count: int
    ids: set[str]
    written: list["weakref.ref[Any]"]
    written_ids: set[str] = field(default_factory=set)

    def known(self) -> set[str]:
        """The ids of the messages the node had seen or wrote."""
        alive = {getattr(ref(), "id", None) for ref in self.written}
        return self.ids | self.written_ids | {i for i in alive if isinstance(i, str)}

    def settle(self) -> None:
        """At the run's end: keep the written messages' ids, not the messages."""
        self.written_ids = self.known() - self.ids
        self.written = []


def _weakly(messages: list[Any]) -> list["weakref.ref[Any]"]:
    """Weak references to ``messages``; shorthand forms (tuples, dicts, strings), which the reducer
    replaces by new message objects, left out."""
    refs = []
    for m in messages:
        try:
            refs.append(weakref.ref(m))
        except TypeError:
            continue
    return refs


def _unseen(messages: list[Any], ids: list[Any], seen: _Seen | None) -> list[Any]:
    """The state's ``messages`` (with their ``ids``) a node has not seen: those after the number it
    had seen; by id when messages it had seen are gone (``RemoveMessage``, trimming), which would
    make that number skip new ones."""
    if seen is None:
        return messages
    if all(ids) and not seen.ids.issubset(ids):
        known = seen.known()
        return [m for m, i in zip(messages, ids) if i not in known]
    return messages[seen.count:]


@dataclass
class _NodeStep:
    """An open node step: its span, the task, the ids of the state's messages and their number."""

    step: StepScope
    task: Any
    ids: set[str]
    count: int


def _end_abandoned(done: Callable[[BaseException | None], None]) -> None:
    """End a run whose stream went with its end never run: never iterated, or an ``astream`` dropped
    unfinished after its event loop closed (the loop no longer closes it)."""
    try:
        done(CancelledError("the graph's stream was dropped before its end ran"))
    except Exception:
        log_hook_error("langgraph run end")


def _ending(stream: Any, done: Callable[[BaseException | None], None]) -> Any:
    """``stream``, its run ended by ``done`` (once) when it is garbage-collected with its end never run."""
    weakref.finalize(stream, _end_abandoned, done).atexit = False
    return stream


class LangGraphAdapter(Adapter):
    """Traces compiled LangGraph graphs: one step per node execution."""

    name = "langgraph"

    #: checkpointer threads whose nodes' memory is kept (the least recently run ones are forgotten)
    THREADS_KEPT = 256

    def __init__(self) -> None:
        super().__init__()
        self.codec = LangChainCodec()
        #: run id -> node -> how many of the state's messages the node has seen (its step input is the rest)
        self._seen: dict[str, dict[str, _Seen]] = {}
        #: (checkpointer, thread id, namespace) -> that map, kept after the run: a thread's next run
        #: continues its state, so each node's first step there has as input only what it has not seen
        self._threads: dict[tuple[int, str, str], dict[str, _Seen]] = {}
        self._threads_lock = threading.Lock()
        #: ``langgraph.errors.GraphBubbleUp`` (an interrupt, a command to the parent graph), set on install
        self._bubble_up: type[BaseException] = BaseException

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        from langgraph.pregel import Pregel

        return isinstance(app, Pregel)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        self.registry.add(app, probe)
        nodes = tuple(n for n in getattr(app, "nodes", {}) if not n.startswith("__"))
        return AppInfo(name=app.name, lone_agent=False, agents=nodes)

    def _instrument(self, patcher: Patcher) -> None:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.tools import BaseTool
        from langgraph.errors import GraphBubbleUp
        from langgraph.pregel import Pregel, _runner

        self._bubble_up = GraphBubbleUp
        patcher.wrap(Pregel, "stream", self._stream)
        patcher.wrap(Pregel, "astream", self._astream)
        patcher.wrap(Pregel, "copy", self.register_copy)
        patcher.wrap(_runner, "run_with_retry", self._node)
        patcher.wrap(_runner, "arun_with_retry", self._anode)
        patcher.wrap(BaseChatModel, "_generate_with_cache", self._llm)
        patcher.wrap(BaseChatModel, "_agenerate_with_cache", self._allm)
        patcher.wrap(BaseTool, "run", self._tool)
        patcher.wrap(BaseTool, "arun", self._atool)

    # -- runs ------------------------------------------------------------------------------
    def _start(self, graph: Any, args: tuple, kwargs: dict) -> RunScope | None:
        probe = self.run_probe(graph)
        if probe is None or current_run() is not None:
            return None
        try:
            graph_input, config = _stream_args(args, kwargs)
            configurable = config.get("configurable") or {}
            thread = configurable.get("thread_id")
            run = start_run(probe, graph.name, framework=self.name, task=_task_text(graph_input),
                            conversation_id=str(thread) if thread is not None else None)
        except Exception:
            log_hook_error("langgraph run start")
            return None
        try:
            checkpointer = graph.checkpointer or configurable.get("__pregel_checkpointer")
            if thread is not None and checkpointer not in (None, False, True):
                self._seen[run.run_id] = self._thread_memory(
                    (id(checkpointer), str(thread), str(configurable.get("checkpoint_ns") or "")))
        except Exception:
            log_hook_error("langgraph thread memory")
        return run

    def _thread_memory(self, key: tuple[int, str, str]) -> dict[str, _Seen]:
        """What the nodes of checkpointer thread ``key`` have seen, kept across its runs."""
        with self._threads_lock:
            memory = self._threads.pop(key, None) or {}
            self._threads[key] = memory  # now the most recently run
            while len(self._threads) > self.THREADS_KEPT:
                del self._threads[next(iter(self._threads))]
            return memory

    def _ender(self, run: RunScope, stream: WatchedStream | None = None) -> Callable[[BaseException | None], None]:
        """End ``run`` once: with the app's exception, else cancelled where ``stream`` was left before its end."""
        return end_once(partial(self._end_run, run), stream, "the graph's stream")

    def _end_run(self, run: RunScope, exc: BaseException | None) -> None:
        try:
            for seen in self._seen.pop(run.run_id, {}).values():
                seen.settle()
        except Exception:
            log_hook_error("langgraph thread memory")
        run.finish(exc)

    def _stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start(instance, args, kwargs)
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            items = WatchedStream(iter(wrapped(*args, **kwargs)))
        except BaseException as exc:
            self._ender(run)(exc)
            raise
        done = self._ender(run, items)
        return _ending(iterate_sync_in_scope(items, run, on_done=done), done)

    def _astream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start(instance, args, kwargs)
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            items = WatchedStream(wrapped(*args, **kwargs).__aiter__())
        except BaseException as exc:
            self._ender(run)(exc)
            raise
        done = self._ender(run, items)
        return _ending(iterate_in_scope(items, run, on_done=done), done)

    # -- steps (node executions) -----------------------------------------------------------
    def _open_step(self, args: tuple, kwargs: dict) -> _NodeStep | None:
        run = current_run()
        if run is None or run.framework != self.name or current_step() is not None:
            return None
        task = kwargs["task"] if "task" in kwargs else args[0]
        if task.name.startswith("__"):
            return None
        try:
            messages = _messages_of(task.input)
            if messages is None:
                shown = [{"role": "user", "content": json_text(task.input)}]
                return _NodeStep(start_step(run.probe, task.name, run=run, input_messages=shown), task, set(), 0)
            try:
                ids = list(map(_id_of, messages))  # in C: no Python call per message
            except AttributeError:  # a shorthand form (a tuple, a dict) among them
                ids = [getattr(m, "id", None) for m in messages]
            seen = self._seen.setdefault(run.run_id, {}).get(task.name)
            converted = _run_converted(run)
            new = [to_neutral(m, converted) for m in _unseen(messages, ids, seen)]
            step = start_step(run.probe, task.name, run=run, input_messages=new)
            return _NodeStep(step, task, set(filter(None, ids)), len(messages))
        except Exception:
            log_hook_error("langgraph step start")
            return None

    def _close_step(self, opened: _NodeStep, exc: BaseException | None) -> None:
        """End a node's step: failed by the app's error; an interrupt (``GraphBubbleUp``) ends it normally."""
        from langgraph.errors import GraphBubbleUp

        step = opened.step
        try:
            if exc is not None and not isinstance(exc, GraphBubbleUp):
                step.fail(exc)
                return
            output, written = _step_output(opened.task, opened.ids, _run_converted(step.run))
            said = [m["content"] for m in output if m["role"] == "assistant" and m["content"]]
            if step.run is not None:
                if said:
                    step.run.answer = said[-1]
                if exc is None:  # an interrupted node runs again on resume, on the same input
                    self._seen.setdefault(step.run.run_id, {})[opened.task.name] = _Seen(
                        opened.count + len(output), opened.ids, _weakly(written))
            step.finish(output)
        except Exception:
            log_hook_error("langgraph step end")
            step.end()

    def _node(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        opened = self._open_step(args, kwargs)
        if opened is None:
            return wrapped(*args, **kwargs)
        token = opened.step.attach()
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            self._close_step(opened, exc)
            raise
        finally:
            opened.step.detach(token)
        self._close_step(opened, None)
        return result

    async def _anode(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        opened = self._open_step(args, kwargs)
        if opened is None:
            return await wrapped(*args, **kwargs)
        token = opened.step.attach()
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            self._close_step(opened, exc)
            raise
        finally:
            opened.step.detach(token)
        self._close_step(opened, None)
        return result

    # -- model calls -----------------------------------------------------------------------
    @staticmethod
    def _probe() -> "Probe | None":
        run = current_run()
        return run.probe if run is not None and run.framework == LangGraphAdapter.name and run.probe.active else None

    def _llm(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return wrapped(*args, **kwargs)
        streamed = _streamed(probe, instance, args, kwargs, is_async=False)
        if streamed is None:
            return _parsed(call_llm(probe, self.codec, wrapped, instance, args, kwargs), probe, kwargs)
        result = call_llm(probe, self.codec, streamed.live(wrapped), instance, streamed.args, streamed.kwargs)
        try:
            streamed.send(result)
        except Exception:
            log_hook_error("llm stream hand-on")
        return _parsed(result, probe, kwargs)

    async def _allm(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        streamed = _streamed(probe, instance, args, kwargs, is_async=True)
        if streamed is None:
            return _parsed(await acall_llm(probe, self.codec, wrapped, instance, args, kwargs), probe, kwargs)
        result = await acall_llm(probe, self.codec, streamed.live(wrapped), instance, streamed.args, streamed.kwargs)
        try:
            await streamed.asend(result)
        except Exception:
            log_hook_error("llm stream hand-on")
        return _parsed(result, probe, kwargs)

    # -- tools -----------------------------------------------------------------------------
    def _open_tool(self, tool: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return None
        try:
            tool_input = kwargs["tool_input"] if "tool_input" in kwargs else args[0]
            return start_tool(probe, tool.name, call_id=kwargs.get("tool_call_id"), arguments=tool_input,
                              description=tool.description, tool_type="function")
        except Exception:
            log_hook_error("langgraph tool start")
            return None

    def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = self._open_tool(instance, args, kwargs)
        if scope is None:
            return wrapped(*args, **kwargs)

        def call() -> Any:
            try:
                return wrapped(*args, **kwargs)
            except self._bubble_up:
                scope.end()  # an interrupt pauses the tool (it runs again on resume): not its failure
                raise

        return call_in_scope(scope, call, self._tool_finisher(scope), "langgraph tool")

    async def _atool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = self._open_tool(instance, args, kwargs)
        if scope is None:
            return await wrapped(*args, **kwargs)

        async def call() -> Any:
            try:
                return await wrapped(*args, **kwargs)
            except self._bubble_up:
                scope.end()  # as in _tool
                raise

        return await await_in_scope(scope, call, self._tool_finisher(scope), "langgraph tool")

    @staticmethod
    def _tool_finisher(scope: Any) -> Callable[[Any], None]:
        def finish(result: Any) -> None:
            is_error = getattr(result, "status", None) == "error"
            scope.finish(_text(getattr(result, "content", result)), is_error=is_error)

        return finish
