"""CAMEL (camel-ai 0.2.90) adapter: ``RolePlaying``, ``Workforce`` and a lone ``ChatAgent``.

Class-level patches, installed once:

- run entry: a ``RolePlaying``'s conversation is one run, joined by the steps of its agents (known
  from ``instrument``, the society's construction and ``init_chat/ainit_chat``): it opens at the first step outside any run and
  ends after the step whose response is ``terminated``, after the assistant's step of the round in
  which the user agent said ``CAMEL_TASK_DONE`` (with a critic in the loop, once the critic has
  chosen among the assistant's messages, its steps included), at an agent's error, when ``init_chat`` starts a
  new conversation, when the probe is released (after the step in flight, if any), or when the
  society is garbage-collected with its conversation open (an app that stops at a turn limit and
  drops it; wrap the loop in ``with probe.run(task):`` for explicit bounds); ``Workforce.process_task/process_task_async`` (one run per task), and
  ``ChatAgent.step/astep`` of a lone agent (one run per call);
- agent step: ``ChatAgent.step/astep`` -> ``invoke_agent {role_name}``. Workforce clones its
  agents, so any ``ChatAgent`` stepping inside a current run counts as part of it; a workforce
  agent whose role name camel calls generic (``System``, what ``ChatAgent("...")`` gets) is named as
  camel tells them apart: a worker (and the clones ``SingleAgentWorker._get_worker_agent`` hands
  out) by its description, the coordinator and task planner ``Workforce Manager``/``Task Planner``;
- LLM call: ``ModelManager.run/arun`` through :func:`~aegis_probe.capture.interception.call_llm`;
- tool call: ``ChatAgent._execute_tool/_aexecute_tool`` -> ``execute_tool {tool}``.

``step_timeout`` runs ``ChatAgent._step_impl`` in a pool thread that does not inherit the
caller's context: ``step`` hands its step scope over, keyed by the agent and the input message the
pool thread is given (so steps of one agent in several threads at once each find their own), and
the ``_step_impl`` wrapper attaches it there (switched off while no step is handed over, so that it adds no frame
to the stack camel walks with ``inspect.stack()`` on every step). ``Workforce.process_task``
without a running loop uses ``asyncio.run``, whose task copies the context. (Called inside a
running loop, camel 0.2.90's ``process_task`` deadlocks by itself: ``reset()`` waits on a
coroutine scheduled on the blocked outer loop; so that thread is not handled here.)

``ChatAgent._step_impl`` walks the whole stack with ``inspect.stack()`` on every step, which costs
~20 us per Python frame on it. So ``RolePlaying.step`` is not wrapped (the conversation's run is
attached by the step wrapper itself), and the step wrappers (``_step``/``_astep``) and
``_process_task`` keep their attach/call/finish inline instead of using ``spans.call_in_scope``
(the step wrappers make their call first thing: inspect finds a frame's line by counting its
instructions up to the current one):
``_step`` is aegis's only frame under camel's stack walk (a workforce's steps add ``_process_task``:
``process_task_async`` inside a run, as ``process_task`` runs it, is not entered). And it takes the
place of ``ChatAgent.step``'s own frame: for a step that neither streams nor has a ``step_timeout``,
camel 0.2.90's undecorated ``step`` only calls ``_step_impl`` (``astep``: sets the agent's logging
context, which ``_astep_non_streaming_task`` sets again first, and awaits that), so the wrapper
calls it itself (after the same checks, in the same order) and the walk is as deep as without aegis
(with Langfuse's or TraceRoot's ``observe`` on ``step``, or another camel version, it calls ``step``).

Streaming (``stream=True`` in the model config): ``step``/``astep`` return a lazy
``(Async)StreamingChatAgentResponse``; it is handed back wrapped, so the step span (and a lone
agent's run) stays open until the app has consumed the stream, the step current while each partial
response is produced; the step's output is the whole streamed text. A stream the app leaves before
its end (closed, dropped, or dropped unread) ends the step, and a lone agent's run or the
conversation's, cancelled (ERROR, ``error.type`` ``CancelledError``), its output what was streamed. ``ModelManager.run/arun`` then
return a chunk stream, traced by :func:`~aegis_probe.capture.interception.call_llm_chunks` (content, tool
calls, usage of the last chunk, finish reason); replayed and injected responses reach camel as
chunks too. Tools camel runs while streaming: ``_execute_tool_from_stream_data`` (in the pool
threads of ``_execute_tools_sync_with_status_accumulator``, which hands them the step like
``step_timeout`` does, keyed by each tool call's data) and ``_aexecute_tool_from_stream_data``. Not covered: structured output
(``response_format``) streams get a ``chat`` span without content; a streaming step whose response
the app keeps unread stays open until the response is dropped (and holds its conversation's run
open past ``uninstrument()``).
"""

from __future__ import annotations

import copy
import dataclasses
from asyncio import CancelledError
import threading
import time
import weakref
from contextlib import contextmanager
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence
from weakref import WeakKeyDictionary, WeakSet

from opentelemetry.trace import Status, StatusCode

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher
from aegis_probe.capture.interception import LLMResponse, acall_llm, acall_llm_chunks, call_llm, call_llm_chunks, text_pieces
from aegis_probe.capture.messages import SharedMessage, content_text
from aegis_probe.capture.openai_shape import completion_usage, openai_messages, openai_tool_calls
from aegis_probe.capture.spans import (
    ChatMessage,
    RunScope,
    StepScope,
    attached,
    iterate_in_scope,
    iterate_sync_in_scope,
    await_in_scope,
    call_in_scope,
    current_run,
    current_step,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
    when_no_run_is_open,
)
from aegis_probe.capture.streaming import WatchedStream, end_once
from aegis_probe.capture.usage import openai_usage

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

TASK_DONE = "CAMEL_TASK_DONE"  # RolePlaying's convention for "the user agent is satisfied"
_COORDINATOR, _PLANNER = "Workforce Manager", "Task Planner"  # camel's names for a Workforce's own agents
_TOOL_FAILED = "Tool execution failed"  # how ChatAgent reports a tool error as its result


def _tool_failed(result: Any) -> bool:
    """Whether a tool call's result is camel's report of its error (``{"error": ...}`` when streaming)."""
    if isinstance(result, str):
        return result.startswith(_TOOL_FAILED)
    return isinstance(result, dict) and list(result) == ["error"]


def _message(msg: Any, role: str) -> dict[str, Any]:
    """A neutral message from a camel ``BaseMessage`` (or a plain string)."""
    if isinstance(msg, str):
        return {"role": role, "content": msg}
    out = {"role": role, "content": content_text(getattr(msg, "content", None))}
    if getattr(msg, "role_name", None):
        out["name"] = msg.role_name
    return out


#: Model backend class-name prefixes -> ``gen_ai.provider.name`` (most specific first).
_BACKEND_PROVIDERS = (("AzureOpenAI", "azure.ai.openai"), ("OpenAI", "openai"), ("Anthropic", "anthropic"),
                      ("Gemini", "gcp.gemini"), ("Mistral", "mistral_ai"), ("DeepSeek", "deepseek"), ("Groq", "groq"),
                      ("Cohere", "cohere"), ("AWSBedrock", "aws.bedrock"), ("Watsonx", "ibm.watsonx.ai"))


def provider_of(backend: type) -> str:
    """``gen_ai.provider.name`` of a camel model backend class (else its name without ``Model``)."""
    return _provider_of(backend.__name__)


@lru_cache(maxsize=64)
def _provider_of(name: str) -> str:
    return next((p for prefix, p in _BACKEND_PROVIDERS if name.startswith(prefix)),
                name.removesuffix("Model").lower() or name.lower())


# camel builds a prompt's OpenAI message dicts anew for every call (equal dicts, new objects). The
# last prompt of each conversation (keyed by its first message) is kept, as snapshots, with its
# neutral form: a prompt that extends it (compared in C) converts only its new messages, and the
# plain ones are shared (their JSON encoded once: messages.py). They are kept per run (in its
# RunScope.caches, let go of when it ends), a call outside runs in a table of its own.
_Prompts = dict[tuple[int, str], tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]]
_PROMPTS: _Prompts = {}
_PROMPTS_MAX = 64
_KEY_CHARS = slice(0, 100)
when_no_run_is_open(_PROMPTS.clear)


def _neutral(m: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenAI-format message in neutral form; a :class:`SharedMessage` when all its values are strings."""
    content = m.get("content")
    if type(content) is not str:  # a part list, or a str subclass (camel's TextPrompt): plain text
        content = str.__str__(content) if isinstance(content, str) else content_text(content)
    msg: dict[str, Any] = {"role": m.get("role", "user"), "content": content}
    name, call_id, calls = m.get("name"), m.get("tool_call_id"), m.get("tool_calls")
    if name:
        msg["name"] = name
    if call_id:
        msg["tool_call_id"] = call_id
    if calls:
        msg["tool_calls"] = [
            {"id": c.get("id"), "name": c.get("function", {}).get("name"), "arguments": c.get("function", {}).get("arguments")}
            for c in calls
        ]
        return msg
    plain = type(msg["role"]) is str and (not name or type(name) is str) and (not call_id or type(call_id) is str)
    return SharedMessage(msg) if plain else msg


def _snapshot(m: Mapping[str, Any]) -> dict[str, Any]:
    """``m`` as it is now, for comparing later prompts with (nested values copied too)."""
    for v in m.values():
        if v is not None and not isinstance(v, (str, int, float)):
            return copy.deepcopy(dict(m))
    return dict(m)


class CamelCodec:
    """OpenAI-format message dicts and ``ChatCompletion`` <-> neutral messages and ``LLMResponse``."""

    provider = "openai"

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The current backend's model config, its endpoint, and the provider behind both."""
        backend = instance.current_model
        url = getattr(backend, "_url", None)
        return {**sc.request_attributes(getattr(backend, "model_config_dict", None) or {}), **sc.server_attributes(url),
                sc.PROVIDER: sc.provider_name(url, provider_of(type(backend)))}

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        model_type = instance.model_type
        if isinstance(model_type, str):  # camel's ModelType (a str enum) or UnifiedModelType: their text, as a plain str
            return str.__str__(model_type)
        return str(getattr(model_type, "value", model_type))

    @staticmethod
    def _messages(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        return list(kwargs["messages"] if "messages" in kwargs else args[0])

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """The prompt in neutral form, converting only what extends its conversation's last prompt."""
        msgs = self._messages(args, kwargs)
        first = msgs[0].get("content") if msgs else None
        # The first message (the agent's system prompt) by its length and first characters: cheap to
        # hash, and str's own methods (camel's TextPrompt wraps them all); the comparison decides.
        key = (str.__len__(first), str.__getitem__(first, _KEY_CHARS)) if isinstance(first, str) else None
        run = current_run()  # the calling run's table (inline: once per model call)
        prompts: _Prompts = _PROMPTS if run is None else run.caches.get("camel.prompts") or run.caches.setdefault("camel.prompts", {})
        hit = prompts.get(key) if key is not None else None
        done = 0
        if hit is not None and len(hit[0]) <= len(msgs) and msgs[: len(hit[0])] == hit[0]:
            done = len(hit[0])
        out = hit[1][:] if done else []  # type: ignore[index]
        fresh = hit[2] if done else []  # type: ignore[index]
        for i in fresh:  # not shared: made anew for each call, as interceptors may edit them
            out[i] = _neutral(msgs[i])
        tail = msgs[done:]
        for m in tail:
            out.append(msg := _neutral(m))
            if type(msg) is not SharedMessage:
                fresh = [*fresh, len(out) - 1]
        if key is not None:
            if len(prompts) >= _PROMPTS_MAX and key not in prompts:
                prompts.clear()
            prompts[key] = ((hit[0] if done else []) + [_snapshot(m) for m in tail], out[:], fresh)  # type: ignore[index]
        return out

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        out = openai_messages(messages)
        if "messages" in kwargs:
            return args, {**kwargs, "messages": out}
        return (out, *args[1:]), kwargs

    def response(self, raw: Any) -> LLMResponse:
        from openai.types.chat import ChatCompletion

        if not isinstance(raw, ChatCompletion) or not raw.choices:
            return LLMResponse()  # a stream: not read here (see module docstring)
        choice = raw.choices[0]
        usage = raw.usage
        return LLMResponse(
            content=choice.message.content,
            tool_calls=[
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}  # type: ignore[union-attr]
                for c in choice.message.tool_calls or ()
                if getattr(c, "function", None) is not None
            ],
            **openai_usage(usage),
            model=raw.model,
            finish_reason=choice.finish_reason,
            id=raw.id,
            refusal=choice.message.refusal,
        )

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        from openai.types.chat import ChatCompletion

        tool_calls = openai_tool_calls(response.tool_calls)
        message: dict[str, Any] = {"role": "assistant", "content": response.content}
        if response.refusal:
            message["refusal"] = response.refusal
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish = response.finish_reason or ("tool_calls" if tool_calls else "stop")
        base = raw.model_dump() if isinstance(raw, ChatCompletion) else {
            "id": "aegis-replayed", "object": "chat.completion", "created": int(time.time()),
            "model": response.model or "aegis"}
        base.update(choices=[{"index": 0, "message": message, "finish_reason": finish}], usage=completion_usage(response))
        return ChatCompletion.model_validate(base)

    def from_chunks(self, chunks: Sequence[Any]) -> LLMResponse:
        """The response a ``stream=True`` call's ``ChatCompletionChunk``s carry together."""
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        model = finish = usage = None
        for chunk in chunks:
            model = model or getattr(chunk, "model", None)
            usage = getattr(chunk, "usage", None) or usage
            for choice in (getattr(chunk, "choices", None) or ())[:1]:
                delta = choice.delta
                if delta is not None and delta.content:
                    text.append(delta.content)
                if delta is not None and delta.refusal:
                    refusal.append(delta.refusal)
                for part in (delta.tool_calls if delta is not None else None) or ():
                    call = calls.setdefault(part.index, {"id": None, "name": None, "arguments": ""})
                    call["id"] = part.id or call["id"]
                    if part.function is not None:
                        call["name"] = part.function.name or call["name"]
                        call["arguments"] += part.function.arguments or ""
                finish = choice.finish_reason or finish
        return LLMResponse(
            content="".join(text) or None,
            tool_calls=[calls[i] for i in sorted(calls)],
            **openai_usage(usage),
            model=model,
            finish_reason=finish,
            refusal="".join(refusal) or None,
        )

    @staticmethod
    def is_last(chunk: Any) -> bool:
        """The usage chunk ends an OpenAI stream (camel stops reading there)."""
        return getattr(chunk, "usage", None) is not None

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        """``ChatCompletionChunk``s carrying ``response`` as OpenAI streams it: its text (or refusal)
        word by word, each tool call's id and name then its argument deltas, the finish reason, and
        the usage in a chunk of its own (no choices) last."""
        from openai.types.chat import ChatCompletionChunk

        base = {"id": "aegis-replayed", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": response.model or "aegis"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if response.refusal:  # as OpenAI streams one: no text, the refusal in deltas of its own
            deltas = [{"role": "assistant", "content": response.content}]
            deltas += [{"refusal": piece} for piece in text_pieces(response.refusal)]
        else:
            deltas += [{"content": piece} for piece in text_pieces(response.content)]
        for i, call in enumerate(openai_tool_calls(response.tool_calls)):
            function = call["function"]
            deltas.append({"tool_calls": [{**call, "index": i, "function": {"name": function["name"], "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
                       for piece in text_pieces(function["arguments"])]
        events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        finish = response.finish_reason or ("tool_calls" if response.tool_calls else "stop")
        events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        usage = completion_usage(response)
        if usage is not None:
            events.append({**base, "choices": [], "usage": usage})
        return [ChatCompletionChunk.model_validate(e) for e in events]


class _StreamedOutput:
    """What a streaming step said, from the partial responses camel yields: each new piece once
    (its default delta mode, with an empty last message) or the text so far (``stream_accumulate``)."""

    __slots__ = ("accumulate", "last", "pieces")

    def __init__(self, agent: Any) -> None:
        self.accumulate = bool(getattr(agent, "stream_accumulate", False))
        self.last: Any = None
        self.pieces: list[str] = []

    def add(self, response: Any) -> None:
        self.last = response
        if not self.accumulate:
            self.pieces.extend(content_text(m.content) for m in response.msgs)

    @property
    def msgs(self) -> list[Any]:
        """The last response's messages, the last one carrying the whole streamed text."""
        msgs = list(self.last.msgs) if self.last is not None else []
        if self.accumulate or not msgs:
            return msgs
        return [*msgs[:-1], dataclasses.replace(msgs[-1], content="".join(self.pieces))]


def _end_dropped(end: Callable[..., None], *args: Any) -> None:
    """``end(*args)`` for an object garbage-collected with its run or step open (hook errors logged)."""
    try:
        end(*args)
    except Exception:
        log_hook_error("camel run end")


def _end_unread(items: WatchedStream, done: Callable[[BaseException | None], None]) -> None:
    """End the step of a streamed response dropped unread (its generator never started, so its end
    never runs); one that was read ends when its generator is closed, right after."""
    if not items.started:
        _end_dropped(done, CancelledError("the step's stream was dropped unread"))


class _Opened(NamedTuple):
    """What a step wrapper opened: a lone agent's own run, the step, and the ``RolePlaying`` whose
    conversation's run the step joined (with the stepping agent)."""

    own_run: RunScope | None
    step: StepScope
    society: Any
    agent: Any


def _outside_runs() -> bool:
    return current_run() is None


#: ``ChatAgent.step``'s parameters (after ``self``); ``_step_impl`` has the same.
_STEP_PARAMS = ("input_message", "response_format")


def _plain_step(chat_agent: type, step_name: str, impl_name: str) -> bool:
    """Whether ``ChatAgent.step`` (``astep``) is camel 0.2.90's own function, undecorated (no
    Langfuse or TraceRoot ``observe``): a step that neither streams nor has a ``step_timeout`` then
    only calls ``self._step_impl(input_message, response_format)`` (awaits
    ``self._astep_non_streaming_task(...)``, which first sets the agent's logging context as
    ``astep`` did), which the step wrapper can call itself."""
    import inspect

    from camel import __version__

    step, impl = vars(chat_agent).get(step_name), vars(chat_agent).get(impl_name)
    return (__version__ == "0.2.90" and inspect.isfunction(step) and not hasattr(step, "__wrapped__")
            and step.__module__ == "camel.agents.chat_agent" and inspect.isfunction(impl)
            and step.__code__.co_varnames[1:3] == impl.__code__.co_varnames[1:3] == _STEP_PARAMS)


def _binds(args: tuple, kwargs: dict) -> bool:
    """Whether ``step(*args, **kwargs)`` binds to ``(input_message, response_format=None)``."""
    return len(args) <= 2 and all(k in _STEP_PARAMS[len(args):] for k in kwargs) and (bool(args) or _STEP_PARAMS[0] in kwargs)


def _society_name(society: Any) -> str:
    """A ``RolePlaying``'s app name: its two roles."""
    return f"{society.assistant_agent.role_name} & {society.user_agent.role_name}"


class CamelAdapter(Adapter):
    """Traces CAMEL societies, workforces and agents."""

    name = "camel"

    def __init__(self) -> None:
        super().__init__()
        self.codec = CamelCodec()
        self._lone: "WeakSet[Any]" = WeakSet()
        self._sessions: "WeakKeyDictionary[Any, RunScope]" = WeakKeyDictionary()  # open RolePlaying runs
        # society -> what ends its open run if the society is garbage-collected first
        self._dropping: "WeakKeyDictionary[Any, weakref.finalize]" = WeakKeyDictionary()
        self._societies: "WeakKeyDictionary[Any, weakref.ref[Any]]" = WeakKeyDictionary()  # agent -> its RolePlaying
        self._said_done: "WeakSet[Any]" = WeakSet()  # societies whose run ends with this round's assistant step
        self._ending: "WeakSet[Any]" = WeakSet()  # societies whose run ends when their critic has chosen
        self._stepping: "WeakKeyDictionary[Any, StepScope]" = WeakKeyDictionary()  # society -> its step in flight
        self._released: "WeakSet[Any]" = WeakSet()  # societies whose run ends with the step in flight
        # (id(agent), id(what a pool thread is handed)) -> the steps waiting for it (step_timeout, streamed tools)
        self._handoff: dict[tuple[int, int], list[StepScope]] = {}
        self._handoff_lock = threading.Lock()
        # workforce agents whose role name is generic ("System" for a str system message) -> the step name
        self._names: "WeakKeyDictionary[Any, str]" = WeakKeyDictionary()
        # Whether the step wrappers may call _step_impl / _astep_non_streaming_task themselves (set at install).
        self._direct_step = self._direct_astep = False

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        from camel.agents import ChatAgent
        from camel.societies import RolePlaying
        from camel.societies.workforce import Workforce

        return isinstance(app, (RolePlaying, Workforce, ChatAgent))

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        from camel.agents import ChatAgent
        from camel.societies import RolePlaying

        self.registry.add(app, probe)
        if isinstance(app, ChatAgent):
            self._lone.add(app)
            return AppInfo(name=app.role_name, lone_agent=True, agents=(app.role_name,))
        if isinstance(app, RolePlaying):
            agents = self._adopt(app)
            name = _society_name(app)
        else:
            agents = self._workforce_agents(app)
            self._try_naming(app)
            name = app.description
        for agent in agents:
            self.registry.add(agent, probe)
        return AppInfo(name=name, lone_agent=False, agents=tuple(dict.fromkeys(self._names.get(a) or a.role_name for a in agents)))

    @staticmethod
    def _workforce_agents(workforce: Any) -> list[Any]:
        from camel.agents import ChatAgent

        agents = [workforce.coordinator_agent, workforce.task_agent]
        for child in workforce._children:
            for attr in ("worker", "assistant_agent", "user_agent"):
                agent = getattr(child, attr, None)
                if isinstance(agent, ChatAgent):
                    agents.append(agent)
            if hasattr(child, "_children"):
                agents.extend(CamelAdapter._workforce_agents(child))
        return [a for a in agents if isinstance(a, ChatAgent)]

    def _instrument(self, patcher: Patcher) -> None:
        from camel.agents import ChatAgent
        from camel.agents.chat_agent import AsyncStreamingChatAgentResponse, StreamingChatAgentResponse
        from camel.models import ModelManager
        from camel.societies import RolePlaying
        from camel.societies.workforce import SingleAgentWorker, Workforce

        patcher.wrap(RolePlaying, "__init__", self._new_society)
        patcher.wrap(RolePlaying, "init_chat", self._new_conversation)
        patcher.wrap(RolePlaying, "ainit_chat", self._new_conversation)
        patcher.wrap(RolePlaying, "_reduce_message_options", self._critic_chose, enabled=self._ending.__len__)
        # Inside a run they pass straight through: no frame (``process_task`` runs ``process_task_async``).
        patcher.wrap(Workforce, "process_task", self._process_task, enabled=_outside_runs)
        patcher.wrap(Workforce, "process_task_async", self._aprocess_task, enabled=_outside_runs)
        patcher.wrap(SingleAgentWorker, "_get_worker_agent", self._worker_agent)
        self._direct_step = _plain_step(ChatAgent, "step", "_step_impl")  # before wrapping them
        self._direct_astep = _plain_step(ChatAgent, "astep", "_astep_non_streaming_task")
        patcher.wrap(ChatAgent, "step", self._step)
        patcher.wrap(ChatAgent, "astep", self._astep)
        patcher.wrap(ChatAgent, "_step_impl", self._step_in_thread, enabled=self._handoff.__len__)
        patcher.wrap(ChatAgent, "_execute_tool", self._tool)
        patcher.wrap(ChatAgent, "_aexecute_tool", self._atool)
        patcher.wrap(ChatAgent, "_execute_tools_sync_with_status_accumulator", self._stream_tools)
        patcher.wrap(ChatAgent, "_execute_tool_from_stream_data", self._stream_tool)
        patcher.wrap(ChatAgent, "_aexecute_tool_from_stream_data", self._astream_tool)
        patcher.wrap(ModelManager, "run", self._llm)
        patcher.wrap(ModelManager, "arun", self._allm)
        self._streaming = (StreamingChatAgentResponse, AsyncStreamingChatAgentResponse)

    def release(self, probe: "Probe") -> None:
        """End ``probe``'s open conversations (one with a step in flight when that step ends), then
        forget its objects."""
        for society, run in list(self._sessions.items()):
            if run.probe is probe:
                if society in self._stepping:
                    self._released.add(society)
                    if society in self._stepping:  # else its step ended meanwhile: end the run here
                        continue
                self._end_session(society, run)
        super().release(probe)

    # -- helpers ---------------------------------------------------------------------------
    def _probe(self, obj: Any) -> "Probe | None":
        probe = self.registry.get(obj)
        return probe if probe is not None and probe.active else None

    @staticmethod
    def _ambient_probe() -> "Probe | None":
        scope = current_step() or current_run()
        return scope.probe if scope is not None and scope.probe.active else None

    @staticmethod
    def _safe_finish(run: RunScope, exc: BaseException | None = None) -> None:
        try:
            run.finish(exc)
        except Exception:
            log_hook_error("camel run end")

    @contextmanager
    def _handed_over(self, agent: Any, handed: Iterable[Any], step: StepScope) -> Iterator[None]:
        """Make ``step`` available to the pool threads camel runs ``agent``'s work in, keyed by the
        object each thread is handed (the step's input message, a tool call's data)."""
        keys = [(id(agent), id(obj)) for obj in handed]
        with self._handoff_lock:
            for key in keys:
                self._handoff.setdefault(key, []).append(step)
        try:
            yield
        finally:
            with self._handoff_lock:
                for key in keys:
                    waiting = self._handoff.get(key, [])
                    if any(s is step for s in waiting):
                        waiting.remove(step)
                    if not waiting:
                        self._handoff.pop(key, None)

    def _claim(self, agent: Any, obj: Any) -> StepScope | None:
        """The step handed over with ``obj`` for ``agent``, taken (the first, if several steps
        were handed the same object)."""
        with self._handoff_lock:
            waiting = self._handoff.get((id(agent), id(obj)))
            return waiting.pop(0) if waiting else None

    # -- RolePlaying -----------------------------------------------------------------------
    def _adopt(self, society: Any) -> list[Any]:
        """Remember ``society``'s agents (their steps join its conversation's run); returns them."""
        from camel.agents import ChatAgent

        agents = [a for a in (society.assistant_agent, society.user_agent, society.critic) if isinstance(a, ChatAgent)]
        for agent in agents:
            self._societies[agent] = weakref.ref(society)
        return agents

    def _new_society(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> None:
        """``RolePlaying.__init__``: its agents' steps join its conversations (trace-every-app mode
        has no ``instrument(app)``, and an app may step the society without ``init_chat``)."""
        wrapped(*args, **kwargs)
        try:
            self._adopt(instance)
        except Exception:
            log_hook_error("camel society start")

    def _new_conversation(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._sessions.get(instance)
        if run is not None:
            self._end_session(instance, run)
        result = wrapped(*args, **kwargs)
        try:
            self._adopt(instance)  # agents made or replaced since instrument(), or a trace-every-app society
        except Exception:
            log_hook_error("camel conversation start")
        return result

    def _society_of(self, agent: Any) -> Any:
        ref = self._societies.get(agent)
        return ref() if ref is not None else None

    def _session(self, society: Any) -> RunScope | None:
        """The open run of ``society``'s conversation, opened by its first step (outside any run)."""
        probe = self.run_probe(society)
        if probe is None:
            return None
        try:
            run = self._sessions.get(society)
            if run is None:
                task = society.specified_task_prompt or society.task_prompt
                run = start_run(probe, _society_name(society), framework=self.name, task=str(task) if task else None)
                self._sessions[society] = run
                ending = self._dropping[society] = weakref.finalize(society, _end_dropped, run.finish)
                ending.atexit = False
            return run
        except Exception:
            log_hook_error("camel run start")
            return None

    def _end_session(self, society: Any, run: RunScope, exc: BaseException | None = None) -> None:
        if self._sessions.get(society) is run:
            self._sessions.pop(society, None)
            ending = self._dropping.pop(society, None)
            if ending is not None:
                ending.detach()
        self._said_done.discard(society)
        self._ending.discard(society)
        self._released.discard(society)
        self._safe_finish(run, exc)

    def _session_step_done(self, society: Any, run: RunScope, agent: Any, result: Any, exc: BaseException | None) -> None:
        """End ``society``'s run where a round of ``RolePlaying.step`` ends the conversation."""
        try:
            if exc is not None or society in self._released:
                self._end_session(society, run, exc)
                return
            msgs = getattr(result, "msgs", None) or ()
            ended = bool(getattr(result, "terminated", False))
            if agent is society.user_agent:
                if any(TASK_DONE in content_text(m.content) for m in msgs):
                    self._said_done.add(society)  # the round's assistant step still follows
            elif agent is society.assistant_agent:
                if msgs and not ended:
                    run.answer = content_text(msgs[-1].content)
                if not ended and society in self._said_done and society.with_critic_in_the_loop \
                        and society.critic is not None and getattr(result, "msgs", None) is not None:
                    self._ending.add(society)  # the round's critic still chooses among its messages
                    return
                ended = ended or society in self._said_done
            if ended:
                self._end_session(society, run)
        except Exception:
            log_hook_error("camel round end")

    def _critic_chose(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``RolePlaying._reduce_message_options`` (only while a conversation waits for its critic):
        the conversation's run ends once the critic has chosen among the last round's messages."""
        if instance not in self._ending:
            return wrapped(*args, **kwargs)
        exc: BaseException | None = None
        try:
            return wrapped(*args, **kwargs)
        except BaseException as error:
            exc = error
            raise
        finally:
            run = self._sessions.get(instance)
            self._ending.discard(instance)
            if run is not None:
                self._end_session(instance, run, exc)

    # -- Workforce -------------------------------------------------------------------------
    def _name_workforce(self, workforce: Any) -> None:
        """Name the workforce's agents whose role name camel calls generic (``System``, what a
        ``ChatAgent("...")`` gets; ``assistant``, ...) as camel does where it needs them apart: a
        worker by its description, the coordinator and task planner by camel's own default names."""
        from camel.societies.workforce.utils import is_generic_role_name

        for agent, name in ((workforce.coordinator_agent, _COORDINATOR), (workforce.task_agent, _PLANNER)):
            if is_generic_role_name(agent.role_name):
                self._names[agent] = name
        for child in workforce._children:
            worker = getattr(child, "worker", None)
            if worker is not None and is_generic_role_name(worker.role_name) and child.description:
                self._names[worker] = child.description
            if hasattr(child, "_children"):
                self._name_workforce(child)

    async def _worker_agent(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``SingleAgentWorker._get_worker_agent``: the agent from its pool (a clone of its worker)
        gets the worker's step name."""
        agent = await wrapped(*args, **kwargs)
        try:
            name = self._names.get(instance.worker)
            if name is not None:
                self._names[agent] = name
        except Exception:
            log_hook_error("camel worker name")
        return agent

    def _try_naming(self, workforce: Any) -> None:
        """:meth:`_name_workforce`, its errors logged (a camel that changed keeps its role names)."""
        try:
            self._name_workforce(workforce)
        except Exception:
            log_hook_error("camel worker names")

    def _start_workforce_run(self, workforce: Any, args: tuple, kwargs: dict) -> RunScope | None:
        probe = self.run_probe(workforce)
        if probe is None or current_run() is not None:
            return None
        self._try_naming(workforce)  # trace-every-app mode registers none
        try:
            task = kwargs["task"] if "task" in kwargs else args[0]
            return start_run(probe, workforce.description, framework=self.name, task=getattr(task, "content", None))
        except Exception:
            log_hook_error("camel run start")
            return None

    @staticmethod
    def _task_done(run: RunScope, result: Any) -> None:
        """The run's answer; a task camel gave up on (returned ``TaskState.FAILED``, e.g. a subtask
        that failed on every retry) fails the run, its outcome preset to failed (a judge's verdict wins)."""
        try:
            run.answer = getattr(result, "result", None)
            if getattr(getattr(result, "state", None), "value", None) == "FAILED":
                run.span.set_attributes({sc.OUTCOME_SUCCESS: False, sc.ERROR_TYPE: "TaskFailed"})
                run.span.set_status(Status(StatusCode.ERROR, "the workforce's task failed (TaskState.FAILED)"))
        except Exception:
            log_hook_error("camel run answer")

    def _process_task(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start_workforce_run(instance, args, kwargs)
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            with attached(run):
                result = wrapped(*args, **kwargs)
        except BaseException as exc:
            self._safe_finish(run, exc)
            raise
        self._task_done(run, result)
        self._safe_finish(run)
        return result

    async def _aprocess_task(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start_workforce_run(instance, args, kwargs)
        if run is None:
            return await wrapped(*args, **kwargs)
        try:
            with attached(run):
                result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            self._safe_finish(run, exc)
            raise
        self._task_done(run, result)
        self._safe_finish(run)
        return result

    # -- ChatAgent steps -------------------------------------------------------------------
    def _open_step(self, agent: Any, args: tuple, kwargs: dict) -> _Opened | None:
        """Open the step span (and a run for a lone agent or a conversation's first step); None to
        pass straight through."""
        run = current_run()
        own_run = society = None
        lone = False
        if run is not None:
            probe = run.probe if run.probe.active else None
        else:
            society = self._society_of(agent)
            run = self._session(society) if society is not None else None
            if run is not None:
                probe = run.probe
            else:
                society = None
                probe = self._probe(agent) or self._ambient_probe()
                # A run of its own: a registered lone agent, or any agent outside runs in trace-every-app mode.
                lone = agent in self._lone or probe is None
                if lone:
                    probe = self.run_probe(agent)
        if probe is None:
            return None
        try:
            message = kwargs["input_message"] if "input_message" in kwargs else args[0]
            if lone:
                task = content_text(getattr(message, "content", message))
                own_run = run = start_run(probe, agent.role_name, framework=self.name, task=task, lone_agent=True)
            role = getattr(getattr(agent, "role_type", None), "value", None)
            parent = run if society is not None else own_run  # None: the current run is the parent
            token = parent.attach() if parent is not None else None
            try:
                step = start_step(probe, self._names.get(agent) or agent.role_name, run=run, agent_id=agent.agent_id, role=role,
                                  input_messages=lambda: [_message(message, "user")])  # only if it records
            finally:
                if token is not None:
                    parent.detach(token)  # type: ignore[union-attr]
            if society is not None:
                self._stepping[society] = step
            return _Opened(own_run, step, society, agent)
        except Exception:
            log_hook_error("camel step start")
            if own_run is not None:
                self._safe_finish(own_run)
            return None

    def _close_step(self, opened: _Opened, result: Any, exc: BaseException | None) -> None:
        own_run, step, society, agent = opened
        try:
            if exc is not None:
                if result is not None:  # a stream left before its end: what it said until then
                    step.content(sc.OUTPUT_MESSAGES, lambda: [_message(m, "assistant") for m in result.msgs])
                step.fail(exc)
            else:
                said = getattr(result, "msgs", None) or ()
                if own_run is not None and said:
                    own_run.answer = _message(said[-1], "assistant")["content"]
                step.finish(lambda: [_message(m, "assistant") for m in said])  # converted only if the span records
        except Exception:
            log_hook_error("camel step end")
            step.end()
        if own_run is not None:
            self._safe_finish(own_run, exc)
        if society is not None:
            if self._stepping.get(society) is step:
                self._stepping.pop(society, None)
            self._session_step_done(society, step.run, agent, result, exc)  # type: ignore[arg-type]

    def _step_call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict, sync: bool) -> tuple[Any, _Opened | None, object]:
        """What a step wrapper calls, the step it opened (None: it passes straight through) and the
        token of the step's attach: ``_step_impl`` (``_astep_non_streaming_task``) in place of
        ``step`` (``astep``) where that is all it would do, else ``step`` itself (handing the step
        over to ``step_timeout``'s pool thread)."""
        opened = self._open_step(instance, args, kwargs)
        if opened is None:
            return wrapped, None, None
        step = opened[1]
        token = step.attach()
        try:
            # ChatAgent.step's (astep's) own checks, in its order.
            if (self._direct_step if sync else self._direct_astep) and (0 < len(args) <= 2 and not kwargs or _binds(args, kwargs)) \
                    and not instance.model_backend.model_config_dict.get("stream", False) and instance.step_timeout is None:
                return (instance._step_impl if sync else instance._astep_non_streaming_task), opened, token
            if not sync or getattr(instance, "step_timeout", None) is None:  # _step_impl runs in the wrapper's thread
                return wrapped, opened, token
            return partial(self._handing_step_over, wrapped, instance, step), opened, token
        except BaseException as exc:
            step.detach(token)
            self._close_step(opened, None, exc)
            raise

    def _handing_step_over(self, wrapped: Any, agent: Any, step: StepScope, /, *args: Any, **kwargs: Any) -> Any:
        message = kwargs["input_message"] if "input_message" in kwargs else args[0]
        with self._handed_over(agent, (message,), step):
            return wrapped(*args, **kwargs)

    # The step wrappers' frames are on camel's stack walk, which reads every frame's position by
    # counting its instructions: the call comes first (its cost grows with the call's offset).
    def _step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call, opened, token = self._step_call(wrapped, instance, args, kwargs, True)
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            if opened is not None:
                self._step_failed(opened, token, exc)
            raise
        if opened is None:
            return result
        return self._step_returned(opened, token, instance, result, self._streaming[0])

    async def _astep(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        call, opened, token = self._step_call(wrapped, instance, args, kwargs, False)
        try:
            result = await call(*args, **kwargs)
        except BaseException as exc:
            if opened is not None:
                self._step_failed(opened, token, exc)
            raise
        if opened is None:
            return result
        return self._step_returned(opened, token, instance, result, self._streaming[1])

    def _step_failed(self, opened: _Opened, token: object, exc: BaseException) -> None:
        opened[1].detach(token)
        self._close_step(opened, None, exc)

    def _step_returned(self, opened: _Opened, token: object, agent: Any, result: Any, streaming: type) -> Any:
        opened[1].detach(token)
        if isinstance(result, streaming):
            return self._streamed(opened, agent, result)
        self._close_step(opened, result, None)
        return result

    def _streamed(self, opened: _Opened, agent: Any, result: Any) -> Any:
        """A streaming step's response, rebuilt over the same stream: the step (and a lone agent's
        run) ends when the app has consumed it; the step is current while each item is produced. A
        stream left before its end (closed, dropped, or never read) ends them cancelled."""
        output = _StreamedOutput(agent)
        sync = isinstance(result, self._streaming[0])
        items = WatchedStream(iter(result) if sync else result.__aiter__())
        done = end_once(partial(self._close_step, opened, output), items, "the step's stream")

        if sync:
            response = type(result)(iterate_sync_in_scope(items, opened[1], on_item=output.add, on_done=done))
        else:
            response = type(result)(iterate_in_scope(items, opened[1], on_item=output.add, on_done=done))
        weakref.finalize(response, _end_unread, items, done).atexit = False
        return response

    def _step_in_thread(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_step_impl`` in ``step_timeout``'s pool thread: attach the step handed over by ``step``."""
        handed = self._claim(instance, kwargs.get("input_message", args[0] if args else None))
        if handed is None:
            return wrapped(*args, **kwargs)
        with attached(handed):
            return wrapped(*args, **kwargs)

    # -- tools -----------------------------------------------------------------------------
    def _open_tool(self, agent: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._ambient_probe() or self._probe(agent)
        if probe is None:
            return None
        try:
            request = kwargs["tool_call_request"] if "tool_call_request" in kwargs else args[0]
            tool = getattr(agent, "_internal_tools", {}).get(request.tool_name)
            description = tool.get_function_description() if tool is not None else None
            return start_tool(probe, request.tool_name, call_id=request.tool_call_id, arguments=request.args,
                              description=description, tool_type="function")
        except Exception:
            log_hook_error("camel tool start")
            return None

    @staticmethod
    def _tool_finisher(scope: Any) -> Callable[[Any], None]:
        def finish(record: Any) -> None:
            result = getattr(record, "result", None)
            scope.finish(result, is_error=_tool_failed(result))

        return finish

    def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = self._open_tool(instance, args, kwargs)
        if scope is None:
            return wrapped(*args, **kwargs)
        return call_in_scope(scope, lambda: wrapped(*args, **kwargs), self._tool_finisher(scope), "camel tool")

    async def _atool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = self._open_tool(instance, args, kwargs)
        if scope is None:
            return await wrapped(*args, **kwargs)
        return await await_in_scope(scope, lambda: wrapped(*args, **kwargs), self._tool_finisher(scope), "camel tool")

    # -- tools camel runs while streaming (sync: in pool threads, from a generator) --------
    def _stream_tools(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_execute_tools_sync_with_status_accumulator``: hand the step over to its pool threads."""
        step = current_step()
        if step is None:
            return wrapped(*args, **kwargs)
        try:
            calls = kwargs["accumulated_tool_calls"] if "accumulated_tool_calls" in kwargs else args[0]
            handed = list(calls.values())  # each pool thread is handed one of them
        except Exception:
            log_hook_error("camel tool handover")
            return wrapped(*args, **kwargs)
        return self._handing_over(instance, handed, step, wrapped(*args, **kwargs))

    def _handing_over(self, agent: Any, handed: list[Any], step: StepScope, items: Iterator[Any]) -> Iterator[Any]:
        with self._handed_over(agent, handed, step):  # table entries, not a context: fine across yields
            yield from items

    def _open_stream_tool(self, args: tuple, kwargs: dict) -> Any:
        probe = self._ambient_probe()
        if probe is None:
            return None
        try:
            data = kwargs["tool_call_data"] if "tool_call_data" in kwargs else args[0]
            function = data["function"]
            return start_tool(probe, function["name"], call_id=data.get("id"), arguments=function.get("arguments"))
        except Exception:
            log_hook_error("camel tool start")
            return None

    def _stream_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_execute_tool_from_stream_data`` in a pool thread: a tool span in the step handed over."""
        with attached(self._claim(instance, kwargs.get("tool_call_data", args[0] if args else None))):
            scope = self._open_stream_tool(args, kwargs)
        if scope is None:
            return wrapped(*args, **kwargs)
        return call_in_scope(scope, lambda: wrapped(*args, **kwargs), self._tool_finisher(scope), "camel tool")

    async def _astream_tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_aexecute_tool_from_stream_data`` (a task that copied the step's context)."""
        scope = self._open_stream_tool(args, kwargs)
        if scope is None:
            return await wrapped(*args, **kwargs)
        return await await_in_scope(scope, lambda: wrapped(*args, **kwargs), self._tool_finisher(scope), "camel tool")

    # -- model calls -----------------------------------------------------------------------
    @staticmethod
    def _streams(manager: Any, args: tuple, kwargs: dict) -> bool:
        """Whether ``ModelManager.run/arun(messages, response_format, tools)`` returns a chunk stream."""
        try:
            response_format = kwargs["response_format"] if "response_format" in kwargs else args[1] if len(args) > 1 else None
            return response_format is None and bool(manager.model_config_dict.get("stream"))
        except Exception:
            log_hook_error("camel stream check")
            return False

    def _llm(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._ambient_probe()
        if probe is None:
            return wrapped(*args, **kwargs)
        if self._streams(instance, args, kwargs):
            return call_llm_chunks(probe, self.codec, wrapped, instance, args, kwargs)
        return call_llm(probe, self.codec, wrapped, instance, args, kwargs)

    async def _allm(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._ambient_probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        if self._streams(instance, args, kwargs):
            return await acall_llm_chunks(probe, self.codec, wrapped, instance, args, kwargs)
        return await acall_llm(probe, self.codec, wrapped, instance, args, kwargs)
