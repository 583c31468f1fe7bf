"""AutoGen adapter (autogen-agentchat 0.7.x): teams, agent steps, model clients, tools.

Patch points, all class-level and installed once (classes defined later are patched when an app
is registered and when a run starts):

- run: ``run_stream`` of ``BaseGroupChat``/``BaseChatAgent`` (``run`` of a team iterates it) and
  ``BaseChatAgent.run``; a registered app opens the run when the stream is first iterated (the
  coroutine first awaited), nested teams pass through. A stream left before its ``TaskResult``
  (closed, or dropped after its loop closed) ends its run cancelled. A registered lone agent's
  ``on_messages_stream`` (``on_messages``) called outside runs is a run of its own too.
- agent step: ``on_messages_stream`` and ``on_messages`` of every ``BaseChatAgent`` class that
  defines them (``run`` and ``MessageFilterAgent`` call ``on_messages``); a call of
  the step's agent name in the step's team (``super()``, ``on_messages``, a wrapper such as
  ``MessageFilterAgent``) stays one step, and so does a ``MessageFilterAgent``'s inner agent of
  another name; the step's input is the messages the inner agent got.
- LLM call: ``create``/``create_stream`` of every concrete ``ChatCompletionClient`` class, via the
  core interception seam; a client delegating to another (``ChatCompletionCache``) makes one span.
  Streams: interceptors see the final ``CreateResult`` only, string chunks pass through.
- team manager: ``on_message_impl`` of ``BaseGroupChatManager`` and ``update_message_thread``.
  Each message a Magentic-One orchestrator adds (task ledger, instruction, final answer) is an
  ``invoke_agent MagenticOneOrchestrator`` step holding the model calls that produced it, with the
  progress ledger's next speaker in ``aegis.step.next_speaker``. Other managers' model calls
  (``SelectorGroupChat``'s speaker selection) stay outside steps, as ``chat`` spans naming the
  manager with ``aegis.llm.purpose = speaker_selection``.
- a team on a runtime the app started itself (``runtime=``): its message handlers run in the
  runtime's task, outside the run; the manager's and (patched once such a team is registered) the
  participant containers' ``on_message_impl`` put them back in their team's run, found by team id.
- nested teams (a team as a participant, ``SocietyOfMindAgent``): the inner ``run_stream`` opens
  no run; its agents' steps are steps of the outer run, each with ``aegis.agent.path`` (the team
  names from the outer app down).
- tool call: ``call_tool`` / ``call_tool_stream`` of every ``Workbench`` class that defines them
  (``McpWorkbench``, ``StaticWorkbench``, user workbenches) -> ``execute_tool {tool}`` with the
  call's arguments and the ``ToolResult``'s text, ERROR when ``is_error``; ``BaseTool.run_json`` /
  ``BaseStreamTool.run_json_stream`` for tools called outside a workbench (handoffs). A tool that
  a workbench runs through ``run_json`` gets no second span: its exception type is recorded on
  the workbench call's span, which a workbench delegating to another reuses too. A call
  ``AssistantAgent._execute_tool_call`` rejects before any tool runs (arguments that are not JSON,
  a tool no workbench has) gets an ERROR ``execute_tool`` span with autogen's error text.

autogen-core opens its own ``invoke_agent`` and ``execute_tool`` spans (``trace_invoke_agent_span``,
``trace_tool_span``, on the global tracer provider). Inside an aegis run those helpers are
patched to reuse the current span instead, so each step and tool call has exactly one span.
Its runtime messaging spans (``TraceHelper.trace_block``) and the trace context the in-process
runtime copies into every message envelope are skipped inside aegis runs too, and its
``create_agent`` spans (one per agent constructed, before any run: each a one-span trace of its
own) while instrumented, unless ``AEGIS_AUTOGEN_RUNTIME_SPANS=true``: that propagation alone
costs about as much per step as the aegis spans themselves. Apps that are not being traced run untouched.
"""

from __future__ import annotations

import json
import operator
import sys
import weakref
from asyncio import CancelledError
from contextlib import nullcontext
from types import CoroutineType
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence

from autogen_agentchat.agents import AssistantAgent, BaseChatAgent, MessageFilterAgent
from autogen_agentchat.base import Response, TaskResult
from autogen_agentchat.messages import BaseChatMessage, HandoffMessage
from autogen_agentchat.teams import BaseGroupChat
from autogen_agentchat.teams._group_chat._base_group_chat_manager import BaseGroupChatManager
from autogen_agentchat.teams._group_chat._chat_agent_container import ChatAgentContainer
from autogen_agentchat.teams._group_chat._events import GroupChatStart
from autogen_agentchat.teams._group_chat._magentic_one._magentic_one_orchestrator import MagenticOneOrchestrator
from autogen_core import FunctionCall
from autogen_core import _single_threaded_agent_runtime as _runtime_module
from autogen_core._telemetry import EnvelopeMetadata, TraceHelper, _genai
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import BaseStreamTool, BaseTool, ToolResult, Workbench
from autogen_core.utils import extract_json_from_str
from opentelemetry import context as otel_context
from opentelemetry import trace

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, subclasses
from aegis_probe.config import env_flag
from aegis_probe.counterfactual.order import in_recorded_order
from aegis_probe.capture.interception import LLMResponse, acall_llm, astream_llm, text_pieces
from aegis_probe.capture.messages import SharedMessage, content_text
from aegis_probe.capture.spans import (
    Actor,
    ChatMessage,
    StepScope,
    ToolScope,
    acting_context,
    attached,
    await_in_scope,
    current_context,
    current_run,
    current_step,
    in_llm_call,
    iterate_in_scope,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe
    from aegis_probe.capture.spans import RunScope

FRAMEWORK = "autogen"
#: Set to ``true`` to keep autogen-core's runtime messaging spans (and the trace context it
#: propagates with every message) inside aegis runs; off by default, as they are noise per step.
ENV_RUNTIME_SPANS = "AEGIS_AUTOGEN_RUNTIME_SPANS"
_CORE_SPAN_HELPERS = (_genai.trace_invoke_agent_span, _genai.trace_tool_span)
_CREATE_AGENT_SPAN = _genai.trace_create_agent_span  # the original: the modules that imported it are patched too
_MODULE_PREFIXES = ("autogen_core", "autogen_agentchat", "autogen_ext")


# -- neutral messages ----------------------------------------------------------------------------
def _calls(calls: Sequence[FunctionCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]


def _system(m: SystemMessage) -> list[dict[str, Any]]:
    return [{"role": "system", "content": m.content}]


def _user(m: UserMessage) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content_text(m.content), "name": m.source}]


def _assistant(m: AssistantMessage) -> list[dict[str, Any]]:
    if isinstance(m.content, str):
        return [{"role": "assistant", "content": m.content, "name": m.source}]
    return [{"role": "assistant", "content": m.thought, "name": m.source, "tool_calls": _calls(m.content)}]


def _results(m: FunctionExecutionResultMessage) -> list[dict[str, Any]]:
    return [{"role": "tool", "content": r.content, "tool_call_id": r.call_id, "name": r.name} for r in m.content]


_CONVERTERS: dict[type, Callable[[Any], list[dict[str, Any]]]] = {
    SystemMessage: _system, UserMessage: _user, AssistantMessage: _assistant, FunctionExecutionResultMessage: _results,
}


def _convert(m: LLMMessage) -> list[dict[str, Any]]:
    convert = _CONVERTERS.get(type(m))
    if convert is None:  # a subclass
        convert = next((c for t, c in _CONVERTERS.items() if isinstance(m, t)), None)
    return convert(m) if convert is not None else []


# A model context hands the same message objects to every call, so the neutral form of a text
# message is kept per object (checked by identity of its content and source) and shared; and the
# last prompt of each conversation (keyed by its first message; only text messages, whose fields
# are strings): a prompt that extends it, same objects whose fields (content, source, ...) still
# equal a copy taken then (compared in C: a message changed in place is converted anew), converts
# only its new messages. Both are kept in
# the run's caches (``RunScope.caches``), which go when it ends: a busy process (some run always
# open) keeps nothing of apps gone.
_Shared = dict[int, tuple[LLMMessage, str, Any, list[dict[str, Any]]]]
_Prompts = dict[int, tuple[list[LLMMessage], list[dict[str, Any]], list[dict[str, Any]]]]
_SHARED_MAX = 4096  # messages per run
_PROMPTS_MAX = 64  # conversations per run
_NO_FIELDS: dict[str, Any] = {}
_fields = operator.attrgetter("__dict__")  # a pydantic message's field values


def _run_caches() -> tuple[_Shared, _Prompts]:
    """The calling run's message caches: (message id -> (message, content, source, neutral form),
    first message id -> (messages, copies of their fields, neutral form)); a call outside runs gets empty ones."""
    run = current_run()
    if run is None:
        return {}, {}
    caches = run.caches.get(FRAMEWORK)
    if caches is None:
        caches = run.caches[FRAMEWORK] = ({}, {})
    return caches


def llm_messages(messages: Sequence[LLMMessage]) -> list[dict[str, Any]]:
    """autogen ``LLMMessage``s in neutral form (one message per function result)."""
    msgs = list(messages)
    fields = list(map(_fields, msgs))
    shared, prompts = _run_caches()
    hit = prompts.get(id(msgs[0])) if msgs else None
    done = 0
    if hit is not None and len(hit[0]) <= len(msgs) and msgs[: len(hit[0])] == hit[0] and fields[: len(hit[0])] == hit[1]:
        done = len(hit[0])
    known = hit[2][:] if done else []  # type: ignore[index]
    start = len(known)
    out = _neutral(msgs[done:], known, shared)
    if msgs and all(type(m) is SharedMessage for m in out[start:]):  # text messages: their field values are strings
        if len(prompts) >= _PROMPTS_MAX and id(msgs[0]) not in prompts:
            prompts.clear()
        prompts[id(msgs[0])] = (msgs, (hit[1] if done else []) + list(map(dict, fields[done:])), out[:])  # type: ignore[index]
    return out


def _neutral(messages: Sequence[LLMMessage], out: list[dict[str, Any]], shared: _Shared) -> list[dict[str, Any]]:
    """``messages`` converted and appended to ``out`` (text messages kept in ``shared`` and shared)."""
    for m in messages:
        # (a field read from __dict__: a missing one would go through pydantic's slow __getattr__)
        content, source = m.content, getattr(m, "__dict__", _NO_FIELDS).get("source")
        if not isinstance(content, str):  # tool calls and results: converted every time
            out.extend(_convert(m))
            continue
        entry = shared.get(id(m))
        if entry is None or entry[0] is not m or entry[1] is not content or entry[2] is not source:
            if len(shared) >= _SHARED_MAX:
                shared.clear()
            entry = shared[id(m)] = (m, content, source, [SharedMessage(d) for d in _convert(m)])
        out.extend(entry[3])
    return out


def to_llm_messages(messages: Sequence[ChatMessage]) -> list[LLMMessage]:
    """Neutral messages back to autogen ``LLMMessage``s (consecutive tool results are grouped)."""
    out: list[LLMMessage] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role == "system":
            out.append(SystemMessage(content=str(content or "")))
        elif role == "assistant" and m.get("tool_calls"):
            calls = [FunctionCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m["tool_calls"]]
            out.append(AssistantMessage(content=calls, thought=content, source=m.get("name") or "assistant"))
        elif role == "assistant":
            out.append(AssistantMessage(content=str(content or ""), source=m.get("name") or "assistant"))
        elif role == "tool":
            result = FunctionExecutionResult(content=str(content or ""), call_id=m.get("tool_call_id") or "", name=m.get("name") or "")
            if out and isinstance(out[-1], FunctionExecutionResultMessage):
                out[-1].content.append(result)
            else:
                out.append(FunctionExecutionResultMessage(content=[result]))
        else:
            out.append(UserMessage(content=str(content or ""), source=m.get("name") or "user"))
    return out


def edited_llm_messages(originals: Sequence[LLMMessage], messages: Sequence[ChatMessage]) -> list[LLMMessage]:
    """``originals`` after an interceptor changed their neutral form to ``messages`` (prompt injection).

    Originals whose neutral form is unchanged stay as they are (their images, thoughts and error
    flags); an edited one is rebuilt from its new form, keeping a user message's images. When
    messages were only dropped (history lost), the originals left are kept; anything else is
    rebuilt whole from ``messages``."""
    slices = [_convert(m) for m in originals]
    if sum(map(len, slices)) == len(messages):  # edited in place
        out: list[LLMMessage] = []
        start = 0
        for m, neutral in zip(originals, slices):
            new, start = list(messages[start:start + len(neutral)]), start + len(neutral)
            if new == neutral:
                out.append(m)
            elif isinstance(m, UserMessage) and not isinstance(m.content, str) and len(new) == 1:
                parts = [p for p in m.content if not isinstance(p, str)]
                out.append(UserMessage(content=[str(new[0].get("content") or ""), *parts], source=m.source))
            else:
                out.extend(to_llm_messages(new))
        return out
    kept, start = [], 0
    for m, neutral in zip(originals, slices):
        if neutral and list(messages[start:start + len(neutral)]) == neutral:
            kept.append(m)
            start += len(neutral)
    return kept if start == len(messages) else to_llm_messages(messages)


def chat_messages(messages: Sequence[BaseChatMessage]) -> list[dict[str, Any]]:
    """Agent-chat messages (what a step receives) in neutral form."""
    return [{"role": "user", "content": m.to_text(), "name": m.source} for m in messages]


def _task_text(task: Any) -> str | None:
    if task is None or isinstance(task, str):
        return task
    if isinstance(task, BaseChatMessage):
        return task.to_text()
    return "\n".join(m.to_text() for m in task)


_PROVIDERS = (("azure", "azure.ai.inference"), ("anthropic", "anthropic"), ("ollama", "ollama"),
              ("llama_cpp", "llama_cpp"), ("semantic_kernel", "semantic_kernel"), ("openai", "openai"))


def provider_of(cls: type) -> str:
    """``gen_ai.provider.name`` for a client class, from its module (else from its class name)."""
    module = cls.__module__
    if "AzureOpenAI" in cls.__name__:
        return "azure.ai.openai"
    custom = cls.__name__.removesuffix("ChatCompletionClient").lower() or cls.__name__.lower()
    return next((name for key, name in _PROVIDERS if key in module), custom)


#: Server and provider attributes per client (reading an openai client's ``base_url`` costs ~10 us).
_ENDPOINTS: "weakref.WeakKeyDictionary[Any, dict[str, Any]]" = weakref.WeakKeyDictionary()


def _endpoint_attributes(client: Any) -> dict[str, Any]:
    """``server.address``/``server.port`` and ``gen_ai.provider.name`` of a client, from its class and endpoint."""
    try:
        cached = _ENDPOINTS.get(client)
    except TypeError:  # not weak-referenceable
        cached = None
    if cached is None:
        base_url = getattr(getattr(client, "_client", None), "base_url", None)
        cached = {**sc.server_attributes(base_url), sc.PROVIDER: sc.provider_name(base_url, provider_of(type(client)))}
        try:
            _ENDPOINTS[client] = cached
        except TypeError:
            pass
    return cached


#: autogen's finish reasons as the other adapters record them (the OpenAI values): its
#: ``function_calls`` is ``tool_calls``; ``unknown`` (the provider gave none, or one autogen does
#: not know) is none, as a provider's missing reason is elsewhere. An answer with tool calls is
#: ``tool_calls`` whatever autogen says (its stream reader says ``unknown`` when the usage comes
#: in the chunk that has the finish reason).
FINISH_REASONS: dict[str, str] = {"stop": "stop", "length": "length", "content_filter": "content_filter",
                                  "function_calls": "tool_calls"}
#: The other way, for an answer an interceptor gives (tool calls make ``function_calls`` whatever it says).
_AUTOGEN_FINISH: dict[str | None, str] = {"stop": "stop", "length": "length", "content_filter": "content_filter",
                                          None: "unknown"}


class AutogenCodec:
    """``ChatCompletionClient.create`` requests and ``CreateResult`` responses, in neutral form."""

    __slots__ = ("provider",)

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def request_attributes(self, instance: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Model parameters (the client's create args and the call's ``extra_create_args``), the
        endpoint, and the provider of the client that talks to the model."""
        inner = getattr(instance, "client", None)  # ChatCompletionCache wraps .client
        client = inner if inner is not None and isinstance(inner, ChatCompletionClient) else instance
        params = {**(getattr(client, "_create_args", None) or {}), **(kwargs.get("extra_create_args") or {})}
        return {**sc.request_attributes(params), **_endpoint_attributes(client)}

    def model(self, instance: Any, args: tuple, kwargs: dict) -> str | None:
        """The model autogen's clients send (their create args), else a user's client's ``model`` text."""
        for client in (instance, getattr(instance, "client", None)):  # ChatCompletionCache wraps .client
            create_args = getattr(client, "_create_args", None)
            if isinstance(create_args, dict) and create_args.get("model"):
                return str(create_args["model"])
        name = getattr(instance, "model", None)
        return name if isinstance(name, str) and name else None

    def request(self, args: tuple, kwargs: dict) -> list[dict[str, Any]]:
        return llm_messages(args[0] if args else kwargs.get("messages", ()))

    def with_request(self, args: tuple, kwargs: dict, messages: Sequence[ChatMessage]) -> tuple[tuple, dict]:
        rebuilt = edited_llm_messages(args[0] if args else kwargs.get("messages", ()), messages)
        if args:
            return (rebuilt, *args[1:]), kwargs
        return args, {**kwargs, "messages": rebuilt}

    def response(self, raw: CreateResult) -> LLMResponse:
        usage = raw.usage
        calls = isinstance(raw.content, list)
        return LLMResponse(
            content=raw.thought if calls else raw.content,  # type: ignore[arg-type]  # text when no calls
            tool_calls=_calls(raw.content) if calls else [],  # type: ignore[arg-type]
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
            finish_reason="tool_calls" if calls else FINISH_REASONS.get(raw.finish_reason),
        )

    def with_response(self, raw: CreateResult | None, response: LLMResponse) -> CreateResult:
        content: Any = response.content or ""
        finish = _AUTOGEN_FINISH.get(response.finish_reason, "stop")
        if response.tool_calls:
            content = [FunctionCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in response.tool_calls]
            finish = "function_calls"
        return CreateResult(
            finish_reason=finish,  # type: ignore[arg-type]
            content=content,
            usage=RequestUsage(prompt_tokens=response.input_tokens or 0, completion_tokens=response.output_tokens or 0),
            cached=raw.cached if raw is not None else False,
            thought=response.content if response.tool_calls else None,
        )


# -- wrappers ------------------------------------------------------------------------------------
#: Each team's run in progress (its own, or the run a nested team is part of) and the context to
#: handle its messages in, by the team's id (its runtime agents' key): the message handlers of a
#: runtime the app started itself run in the runtime's task, not in the run (see ``_in_team_run``).
_TEAM_RUNS: "dict[str, tuple[RunScope, otel_context.Context]]" = {}


def _team_run_started(team: Any, run: "RunScope", ctx: otel_context.Context) -> str | None:
    """Note ``team``'s run in progress and its context; returns the team's id (None: unknown, or
    another run of the team is in progress: autogen refuses this one, which must not take its place)."""
    team_id = getattr(team, "_team_id", None)
    if team_id is None:
        return None
    entry = _TEAM_RUNS.get(team_id)
    if entry is not None and entry[0] is not run and not entry[0]._ended:
        return None
    _TEAM_RUNS[team_id] = (run, ctx)
    return team_id


def _team_run_ended(team_id: str | None, ctx: otel_context.Context) -> None:
    entry = _TEAM_RUNS.get(team_id) if team_id is not None else None
    if entry is not None and entry[1] is ctx:
        del _TEAM_RUNS[team_id]  # type: ignore[arg-type]


class _RunHooks:
    """Item and end callbacks of one run's stream (``team_id``: the team's, for ``_TEAM_RUNS``).

    A stream that stops before its ``TaskResult`` (the app closed it) ends its run cancelled. One
    whose frames are torn down unfinished, its ``finally`` never run (dropped after its event loop
    closed: the loop's finalizer no longer closes it), ends its run when these hooks go, as
    abandoned; both ERROR, ``error.type`` ``CancelledError``."""

    __slots__ = ("run", "team_id", "completed", "ended")

    def __init__(self, run: "RunScope", team: Any = None) -> None:
        self.run, self.team_id = run, _team_run_started(team, run, run.ctx) if team is not None else None
        self.completed = self.ended = False

    def item(self, item: Any) -> None:
        if isinstance(item, TaskResult):
            self.completed = True
            if item.messages:
                self.run.answer = item.messages[-1].to_text()
        elif isinstance(item, Response):  # a lone agent's step called outside runs: the run ends with it
            self.completed = True
            self.run.answer = item.chat_message.to_text()
            self.done(None)

    def done(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        if exc is None and not self.completed:
            exc = CancelledError("the app closed the run's stream before its result")
        _team_run_ended(self.team_id, self.run.ctx)
        self.run.finish(exc)

    def __del__(self) -> None:
        if not self.ended:
            try:
                self.done(CancelledError("the run's stream was dropped unfinished, its end never run (its event loop had closed)"))
            except Exception:
                log_hook_error("run end")


class _Wrapper:
    def __init__(self, adapter: "AutogenAdapter") -> None:
        self.registry = adapter.registry
        self.adapter = adapter

    def _open_run(self, instance: Any, kwargs: dict) -> "RunScope | None":
        """A new run for a registered app outside any run; None (errors logged) to pass through."""
        try:
            if current_run() is not None:
                return None
            probe = self.adapter.run_probe(instance)
            if probe is None:
                return None
            self.adapter.sync()
            lone = isinstance(instance, BaseChatAgent)
            return start_run(probe, instance.name, framework=FRAMEWORK, task=_task_text(kwargs.get("task")), lone_agent=lone)
        except Exception:
            log_hook_error("run start")
            return None


async def _made_when_iterated(make: Callable[[], AsyncIterator[Any]]) -> AsyncIterator[Any]:
    """The items of the stream ``make`` returns when this one is first iterated (closed with it)."""
    stream = make()
    try:
        async for item in stream:
            yield item
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


class RunStreamWrapper(_Wrapper):
    """``run_stream`` of a registered team or lone agent: the run's root span, opened when the stream
    is first iterated, as autogen starts the team only then: a stream dropped or closed before that
    runs nothing and opens no run (one opened at the call was never ended)."""

    def __call__(self, wrapped: Callable[..., AsyncIterator[Any]], instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_run() is not None:
            return _nested_team(wrapped, instance, args, kwargs)
        stream = wrapped(*args, **kwargs)
        try:
            if self.adapter.run_probe(instance) is None:
                return stream
        except Exception:
            log_hook_error("run start")
            return stream
        return self._traced(stream, instance, kwargs)

    def _traced(self, stream: AsyncIterator[Any], instance: Any, kwargs: dict) -> AsyncIterator[Any]:
        return _made_when_iterated(lambda: self._in_run(stream, instance, kwargs))

    def _in_run(self, stream: AsyncIterator[Any], instance: Any, kwargs: dict) -> AsyncIterator[Any]:
        """``stream`` iterated in a new run (itself when none opens)."""
        if getattr(instance, "_embedded_runtime", True) is False:  # (a team traced unregistered: trace-every-app)
            self.adapter.own_runtimes = True  # its participants' handlers must be put back in its run
        run = self._open_run(instance, kwargs)
        if run is None:
            return stream
        team = None
        if isinstance(instance, BaseGroupChat):
            run.ctx = otel_context.set_value(_TEAM_PATH, (instance.name,), run.ctx)
            team = instance
        hooks = _RunHooks(run, team)
        return iterate_in_scope(stream, run, on_item=hooks.item, on_done=hooks.done)


def _nested_team(wrapped: Callable[..., AsyncIterator[Any]], instance: Any, args: tuple, kwargs: dict) -> Any:
    """``run_stream`` inside a run (a team as a participant, a ``SocietyOfMindAgent``'s team): no run
    of its own; its agents' steps belong to the current run, with the team's name in their path."""
    if not isinstance(instance, BaseGroupChat):
        return wrapped(*args, **kwargs)
    try:
        scope = _ContextScope(otel_context.set_value(_TEAM_PATH, (*_team_path(), instance.name)))
        team_id = _team_run_started(instance, current_run(), scope.ctx)  # type: ignore[arg-type]
    except Exception:
        log_hook_error("nested team start")
        return wrapped(*args, **kwargs)
    return iterate_in_scope(wrapped(*args, **kwargs), scope,  # type: ignore[arg-type]  # a context-only scope
                            on_done=lambda exc: _team_run_ended(team_id, scope.ctx))


def _stands_for(traced: Any, coro: Any) -> None:
    """``traced`` (a coroutine awaiting ``coro``) named like ``coro``, and ``coro`` closed once ``traced``
    is gone: one closed or dropped without being awaited warns as ``coro`` alone would (a dropped one
    "coroutine 'BaseChatAgent.run' was never awaited", a closed one not at all)."""
    if isinstance(coro, CoroutineType):  # (another awaitable a subclass's ``run`` returns warns of nothing)
        traced.__name__, traced.__qualname__ = coro.__name__, coro.__qualname__
        weakref.finalize(traced, coro.close).atexit = False


def _in_place_of(coro: Any, trace: Callable[[], Any], where: str) -> Any:
    """``trace()`` (a coroutine awaiting ``coro`` traced), standing for ``coro`` (see
    :func:`_stands_for`): what the app holds instead, a call never awaited behaving the same;
    ``coro`` itself when the hook fails."""
    try:
        traced = trace()
    except Exception:
        log_hook_error(where)
        return coro
    try:
        _stands_for(traced, coro)
    except Exception:
        log_hook_error(where)
    return traced


async def _awaited_in_run(run: "RunScope", awaitable: Any) -> Any:
    """``awaitable``'s result, awaited in ``run``, which ends with it (its answer the result's)."""
    hooks = _RunHooks(run)
    token = run.attach()
    try:
        result = await awaitable
    except BaseException as exc:
        run.detach(token)
        hooks.done(exc)
        raise
    run.detach(token)
    try:
        hooks.item(result)
        hooks.done(None)  # (a step's Response has ended it already)
    except Exception:
        log_hook_error("run end")
    return result


class RunWrapper(_Wrapper):
    """``BaseChatAgent.run`` of a registered lone agent (it does not go through ``run_stream``)."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        coro = wrapped(*args, **kwargs)
        try:
            if current_run() is not None or self.adapter.run_probe(instance) is None:
                return coro
        except Exception:
            log_hook_error("run start")
            return coro
        return _in_place_of(coro, lambda: self._traced(coro, instance, kwargs), "run start")

    async def _traced(self, coro: Any, instance: Any, kwargs: dict) -> Any:
        """``coro`` awaited in a new run, opened when it is awaited (a call never awaited opens none)."""
        run = self._open_run(instance, kwargs)
        if run is None:
            return await coro
        return await _awaited_in_run(run, coro)


def _end_step(scope: StepScope, response: Any) -> None:
    """End a step with its ``Response``'s message (a handoff names the next speaker, as in a ``Swarm``)."""
    out = response.chat_message
    if isinstance(out, HandoffMessage):
        scope.span.set_attribute(sc.STEP_NEXT_SPEAKER, out.target)
    scope.finish(lambda: [{"role": "assistant", "content": out.to_text(), "name": out.source}])


class _StepHooks:
    """A step's stream callbacks. The step ends at its ``Response`` (the stream's last item): ``on_messages``
    and ``run`` stop reading there and leave the stream to the garbage collector, which would end it
    only later, after the run (and its trace) had ended."""

    __slots__ = ("scope", "ended")

    def __init__(self, scope: StepScope) -> None:
        self.scope = scope
        self.ended = False

    def item(self, item: Any) -> None:
        if isinstance(item, Response) and not self.ended:
            self.ended = True
            _end_step(self.scope, item)

    def done(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        if exc is not None:
            self.scope.fail(exc)
        else:
            self.scope.finish()


def _in_steps_team(step: StepScope) -> bool:
    """Whether the calling code runs in ``step``'s team. An agent of the step's name called there
    delegates (``super()``, ``on_messages``, a wrapper such as ``MessageFilterAgent``); one called
    in a nested team (a ``SocietyOfMindAgent``'s of the same name) takes a turn of its own."""
    return current_context().get(_TEAM_PATH) is step.ctx.get(_TEAM_PATH)


#: A step's input messages, in a one-item list in its context: a delegate called with others
#: (``MessageFilterAgent``'s inner agent) replaces them (see ``_note_delegate_input``).
_STEP_INPUT = otel_context.create_key("aegis.autogen.step_input")
#: The agent a ``MessageFilterAgent`` step's wrapper passes its turn to, whatever its name.
_STEP_WRAPPED = otel_context.create_key("aegis.autogen.step_wrapped")


def _delegates(step: StepScope | None, instance: Any) -> bool:
    """Whether ``instance`` called now acts within ``step``: an agent of the step's name in the step's
    team (``super()``, ``on_messages``, a wrapper's inner agent of its name), or the step's wrapper's
    inner agent."""
    if step is None or not _in_steps_team(step):
        return False
    return step.agent == instance.name or step.ctx.get(_STEP_WRAPPED) is instance


def _note_delegate_input(step: StepScope, messages: Sequence[BaseChatMessage]) -> None:
    """``step``'s agent delegates to one (of its name) called with ``messages``: when they are not the
    step's input (a wrapper filtered them), they are, as what the agent acting saw."""
    held = step.ctx.get(_STEP_INPUT)
    if not isinstance(held, list):
        return
    seen = held[0]
    if seen is messages or (len(seen) == len(messages) and all(map(operator.is_, seen, messages))):
        return
    held[0] = messages
    step.content(sc.INPUT_MESSAGES, lambda: chat_messages(messages))


def _stepped(stream: AsyncIterator[Any], scope: StepScope | None) -> AsyncIterator[Any]:
    """``stream`` (an ``on_messages_stream``) iterated as the step ``scope`` (itself when None)."""
    if scope is None:
        return stream
    hooks = _StepHooks(scope)
    return iterate_in_scope(stream, scope, on_item=hooks.item, on_done=hooks.done)


class StepWrapper(_Wrapper):
    """``on_messages_stream``: one ``invoke_agent`` step span per call; its input is what the agent
    acting saw (a wrapper's inner agent: the messages the wrapper passed on)."""

    def __call__(self, wrapped: Callable[..., AsyncIterator[Any]], instance: Any, args: tuple, kwargs: dict) -> Any:
        if self._lone_app(instance) and current_run() is None:
            stream = wrapped(*args, **kwargs)
            return _made_when_iterated(lambda: self._in_lone_run(stream, instance, args, kwargs))
        try:
            scope = self._open(instance, args, kwargs)
        except Exception:
            log_hook_error("agent step start")
            scope = None
        if scope is None:
            return wrapped(*args, **kwargs)
        return _stepped(wrapped(*args, **kwargs), scope)

    def _lone_app(self, instance: Any) -> bool:
        """Whether ``instance`` is an agent instrumented as an app of its own (and still registered)."""
        lone = self.adapter.lone_apps
        return bool(lone) and lone.get(id(instance)) is instance and self.registry.get(instance) is not None

    def _in_lone_run(self, stream: AsyncIterator[Any], instance: Any, args: tuple, kwargs: dict) -> AsyncIterator[Any]:
        """A registered lone agent's step called outside runs (``on_messages``, as autogen's tutorials
        call an agent): a run of its own, its task the messages, ended at the step's ``Response``."""
        run = self._open_run(instance, {"task": args[0] if args else kwargs.get("messages")})
        if run is None:
            return stream
        token = run.attach()
        try:
            stream = _stepped(stream, self._open(instance, args, kwargs))
        except Exception:
            log_hook_error("agent step start")
        finally:
            run.detach(token)
        hooks = _RunHooks(run)
        return iterate_in_scope(stream, run, on_item=hooks.item, on_done=hooks.done)

    def _open(self, instance: Any, args: tuple, kwargs: dict) -> StepScope | None:
        name = instance.name
        step = current_step()
        messages = args[0] if args else kwargs.get("messages", ())
        if _delegates(step, instance):
            _note_delegate_input(step, messages)  # type: ignore[arg-type]
            return None
        run = current_run()
        probe = run.probe if run is not None else self.registry.get(instance)
        if probe is None:
            return None
        scope = start_step(probe, name, run=run, description=instance.description,
                           input_messages=lambda: chat_messages(messages), attributes=_path_attributes())
        if scope.records_content:
            scope.ctx = otel_context.set_value(_STEP_INPUT, [messages], scope.ctx)
        if isinstance(instance, MessageFilterAgent):
            scope.ctx = otel_context.set_value(_STEP_WRAPPED, instance._wrapped_agent, scope.ctx)
        return scope


class OnMessagesWrapper(StepWrapper):
    """``on_messages`` of an agent class that defines it: a step as ``on_messages_stream``'s, for the
    calls that do not go through that: ``BaseChatAgent.run``, an agent implementing ``on_messages``
    only, a ``MessageFilterAgent`` (which calls its inner agent's ``on_messages``)."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        coro = wrapped(*args, **kwargs)
        return _in_place_of(coro, lambda: self._traced(coro, instance, args, kwargs), "agent step start")

    async def _traced(self, coro: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``coro`` awaited as a step; a lone app's called outside runs, in a run of its own."""
        run = None
        try:
            if self._lone_app(instance) and current_run() is None:
                run = self._open_run(instance, {"task": args[0] if args else kwargs.get("messages")})
        except Exception:
            log_hook_error("run start")
        if run is None:
            return await self._in_step(coro, instance, args, kwargs)
        return await _awaited_in_run(run, self._in_step(coro, instance, args, kwargs))

    async def _in_step(self, coro: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            scope = self._open(instance, args, kwargs)
        except Exception:
            log_hook_error("agent step start")
            scope = None
        if scope is None:
            return await coro
        return await await_in_scope(scope, lambda: coro, lambda response: _end_step(scope, response), "agent step")


class _ClientWrapper(_Wrapper):
    def __init__(self, adapter: "AutogenAdapter") -> None:
        super().__init__(adapter)
        self._codecs: dict[type, AutogenCodec] = {}

    def codec(self, instance: Any) -> AutogenCodec:
        cls = type(instance)
        codec = self._codecs.get(cls)
        if codec is None:
            codec = self._codecs[cls] = AutogenCodec(provider_of(cls))
        return codec

    def _probe(self, instance: Any) -> "Probe | None":
        try:
            if in_llm_call():
                return None
            run = current_run()
            return run.probe if run is not None else self.registry.get(instance)
        except Exception:
            log_hook_error("llm call")
            return None


class CreateWrapper(_ClientWrapper):
    """``ChatCompletionClient.create``: a ``chat`` span through the interception seam."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe(instance)
        if probe is None:
            return wrapped(*args, **kwargs)
        turn = _manager_turn()
        if turn is not None and turn.adds_turns and current_step() is None:
            return self._in_turn(turn, probe, wrapped, instance, args, kwargs)
        return self._call(probe, wrapped, instance, args, kwargs)

    def _call(self, probe: "Probe", wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        """The traced call; with interceptors (a replay), its answer reaches the app in the order the
        recorded answers came back (a GraphFlow's parallel branches publish in that order)."""
        call = acall_llm(probe, self.codec(instance), wrapped, instance, args, kwargs)
        return in_recorded_order(call) if probe.interceptors else call

    async def _in_turn(self, turn: "_ManagerTurn", probe: "Probe", wrapped: Callable[..., Any], instance: Any,
                       args: tuple, kwargs: dict) -> Any:
        """A model call of a manager that adds messages: inside the step of the message it produces."""
        try:
            step = turn.open_step()
        except Exception:
            log_hook_error("manager step start")
            return await self._call(probe, wrapped, instance, args, kwargs)
        with attached(step):
            result = await self._call(probe, wrapped, instance, args, kwargs)
        turn.saw(result)
        return result


def _is_result(item: Any) -> bool:
    return isinstance(item, CreateResult)


def _text_deltas(result: CreateResult) -> list[str]:
    """The ``str`` chunks autogen's clients stream before a ``CreateResult``: its text word by word
    (with tool calls, the text beside them); the result itself carries the calls and the usage."""
    return text_pieces(result.content if isinstance(result.content, str) else result.thought)


class CreateStreamWrapper(_ClientWrapper):
    """``ChatCompletionClient.create_stream``: a ``chat`` span over the whole stream; a replayed or
    injected answer is streamed as text deltas, then its ``CreateResult``."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe(instance)
        if probe is None:
            return wrapped(*args, **kwargs)
        return astream_llm(probe, self.codec(instance), wrapped, instance, args, kwargs, _is_result, _text_deltas)


def _start_tool(probe: "Probe", tool: Any, args: tuple, kwargs: dict) -> ToolScope:
    """The ``execute_tool`` span of ``run_json(args, cancellation_token, call_id)`` (or its stream form)."""
    call_id = kwargs.get("call_id", args[2] if len(args) > 2 else None)
    raw_args = args[0] if args else kwargs.get("args")
    return start_tool(probe, tool.name, call_id=call_id, arguments=dict(raw_args) if raw_args is not None else None,
                      description=tool.description, tool_type="function")


# A workbench call's span carries itself under this key: the tools the workbench runs, and a
# workbench it delegates to, see that span still current and open none of their own.
_WORKBENCH_CALL = otel_context.create_key("aegis.autogen.workbench_call")


def _workbench_call() -> ToolScope | None:
    """The workbench call whose span is the current span (nothing opened a span since), if any."""
    scope = current_context().get(_WORKBENCH_CALL)
    return scope if isinstance(scope, ToolScope) and trace.get_current_span() is scope.span else None


def _open_workbench_call(probe: "Probe", args: tuple, kwargs: dict, workbench: Any) -> ToolScope:
    """The ``execute_tool`` span of ``call_tool(name, arguments, cancellation_token, call_id)`` (or its stream form)."""
    name = args[0] if args else kwargs["name"]
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    call_id = args[3] if len(args) > 3 else kwargs.get("call_id")
    # A StaticWorkbench knows its tools' descriptions; others (MCP) would need an async list_tools.
    description = next((t.description for t in getattr(workbench, "_tools", ()) if getattr(t, "name", None) == name), None)
    scope = start_tool(probe, name, call_id=call_id, arguments=dict(arguments) if arguments is not None else None,
                       description=description, tool_type="function")
    scope.ctx = otel_context.set_value(_WORKBENCH_CALL, scope, scope.ctx)
    return scope


def _finish_workbench_call(scope: ToolScope, result: Any) -> None:
    """End a workbench call's span with its ``ToolResult`` (text, and ERROR when ``is_error``)."""
    if not isinstance(result, ToolResult):
        scope.finish()
        return
    text = result.to_text(replace_image="[image]") if scope.probe.config.capture_content else None
    scope.finish(text, is_error=result.is_error)


def _note_tool_error(scope: ToolScope, exc: BaseException | None) -> None:
    """Record the exception of a tool a workbench ran on the workbench call's span (it returns an
    error result, which ends the span as ERROR)."""
    if exc is not None:
        scope.record_error(exc)


async def _await_noting_error(scope: ToolScope, call: Any) -> Any:
    try:
        return await call
    except Exception as exc:
        try:
            _note_tool_error(scope, exc)
        except Exception:
            log_hook_error("tool error")
        raise


class WorkbenchWrapper(_Wrapper):
    """``Workbench.call_tool`` (MCP and any other workbench): one ``execute_tool`` span per call."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None or _workbench_call() is not None:
            return wrapped(*args, **kwargs)
        return self._traced(run.probe, wrapped, instance, args, kwargs)

    @staticmethod
    async def _traced(probe: "Probe", wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            scope = _open_workbench_call(probe, args, kwargs, instance)
        except Exception:
            log_hook_error("workbench tool start")
            return await wrapped(*args, **kwargs)
        return await await_in_scope(scope, lambda: wrapped(*args, **kwargs),
                                    lambda result: _finish_workbench_call(scope, result), "workbench tool")


class WorkbenchStreamWrapper(_Wrapper):
    """``call_tool_stream`` of a stream workbench: one ``execute_tool`` span over the stream."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None or _workbench_call() is not None:
            return wrapped(*args, **kwargs)
        try:
            scope = _open_workbench_call(run.probe, args, kwargs, instance)
        except Exception:
            log_hook_error("workbench tool start")
            return wrapped(*args, **kwargs)
        result: list[Any] = [None]

        def item(event: Any) -> None:
            if isinstance(event, ToolResult):
                result[0] = event

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                scope.fail(exc)
            else:
                _finish_workbench_call(scope, result[0])

        return iterate_in_scope(wrapped(*args, **kwargs), scope, on_item=item, on_done=done)


class ToolWrapper(_Wrapper):
    """``BaseTool.run_json``: one ``execute_tool`` span per call, inside runs (none inside a workbench call)."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None:
            return wrapped(*args, **kwargs)
        outer = _workbench_call()
        if outer is not None:
            return _await_noting_error(outer, wrapped(*args, **kwargs))
        return self._traced(run.probe, wrapped, instance, args, kwargs)

    @staticmethod
    async def _traced(probe: "Probe", wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            scope = _start_tool(probe, instance, args, kwargs)
        except Exception:
            log_hook_error("tool start")
            return await wrapped(*args, **kwargs)
        return await await_in_scope(
            scope, lambda: wrapped(*args, **kwargs),
            lambda result: scope.finish(instance.return_value_as_string(result) if probe.config.capture_content else None),
            "tool",
        )


class ToolStreamWrapper(_Wrapper):
    """``BaseStreamTool.run_json_stream``: one ``execute_tool`` span over the stream (none inside a workbench call)."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None:
            return wrapped(*args, **kwargs)
        outer = _workbench_call()
        if outer is not None:
            return iterate_in_scope(wrapped(*args, **kwargs), outer, on_done=lambda exc: _note_tool_error(outer, exc))
        try:
            scope = _start_tool(run.probe, instance, args, kwargs)
        except Exception:
            log_hook_error("tool start")
            return wrapped(*args, **kwargs)
        last: list[Any] = [None]

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                scope.fail(exc)
            elif last[0] is not None and run.probe.config.capture_content:
                scope.finish(instance.return_value_as_string(last[0]))
            else:
                scope.finish()

        return iterate_in_scope(wrapped(*args, **kwargs), scope, on_item=lambda item: last.__setitem__(0, item), on_done=done)


class ToolDispatchWrapper(_Wrapper):
    """``AssistantAgent._execute_tool_call``: a call autogen answers with an error before any tool
    runs (arguments that are not JSON, a tool no workbench has) gets an ERROR ``execute_tool`` span."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None:
            return wrapped(*args, **kwargs)
        return self._checked(run.probe, wrapped(*args, **kwargs))

    @staticmethod
    async def _checked(probe: "Probe", call: Any) -> Any:
        tool_call, result = outcome = await call
        try:
            if result.is_error and _undispatched(tool_call, result.content):
                scope = start_tool(probe, tool_call.name, call_id=tool_call.id, arguments=tool_call.arguments,
                                   tool_type="function")
                scope.finish(result.content, is_error=True)
        except Exception:
            log_hook_error("tool dispatch")
        return outcome


def _undispatched(tool_call: FunctionCall, error: str) -> bool:
    """Whether autogen made ``error`` itself, running no tool: ``tool_call``'s arguments are not JSON,
    or no workbench has its tool."""
    if error == f"Error: tool '{tool_call.name}' not found in any workbench":
        return True
    try:
        json.loads(tool_call.arguments)
    except ValueError:
        return True
    return False


def _reuse_current_span(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """autogen-core's span helpers: inside an aegis run, yield the current span, open none."""
    if current_run() is None:
        return wrapped(*args, **kwargs)
    return nullcontext(trace.get_current_span())


_NO_SPAN = nullcontext(trace.INVALID_SPAN)  # reusable; autogen never reads the block's span


def _no_runtime_span(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """``TraceHelper.trace_block`` (runtime messaging spans): none inside an aegis run."""
    if current_run() is None:
        return wrapped(*args, **kwargs)
    return _NO_SPAN


def _no_create_agent_span(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """autogen-core's ``create_agent`` span (opened by every agent's constructor): none while
    instrumented. Agents are made when the app is built, before its run: each span would be a
    one-span trace of its own beside the run's (``AEGIS_AUTOGEN_RUNTIME_SPANS=true`` keeps them)."""
    return _NO_SPAN


def _no_envelope_context(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """The in-process runtime's per-message trace context, only read by runtime spans: none in a run."""
    if current_run() is None:
        return wrapped(*args, **kwargs)
    return EnvelopeMetadata()


# -- team managers and nested teams --------------------------------------------------------------
# A team's manager handles messages on the agent runtime, outside any agent step. While it handles
# one, a _ManagerTurn is current. A manager that adds messages to the conversation (Magentic-One's
# orchestrator: task ledger, instructions, final answer) gets one step per message, opened at the
# first model call that produces it and ended when the message is added to its thread. Other
# managers' model calls (SelectorGroupChat choosing the next speaker) add no turn: their ``chat``
# spans name the manager, with the purpose ``speaker_selection``.
_TURN = otel_context.create_key("aegis.autogen.manager_turn")
_TEAM_PATH = otel_context.create_key("aegis.autogen.team_path")
#: Managers whose model calls produce messages of the conversation (each such message is a step).
TURN_MANAGERS: tuple[type, ...] = (MagenticOneOrchestrator,)


def _team_path() -> tuple[str, ...]:
    """Names of the teams the calling code runs in, outermost first."""
    return current_context().get(_TEAM_PATH) or ()  # type: ignore[return-value]


def _path_attributes() -> dict[str, Any] | None:
    path = _team_path()
    return {sc.AGENT_PATH: list(path)} if path else None


def _manager_turn() -> "_ManagerTurn | None":
    return current_context().get(_TURN)  # type: ignore[return-value]


class _ContextScope:
    """A context to attach while each item of a stream is produced (see ``iterate_in_scope``)."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: otel_context.Context) -> None:
        self.ctx = ctx

    def attach(self) -> object:
        return otel_context.attach(self.ctx)

    @staticmethod
    def detach(token: object) -> None:
        otel_context.detach(token)  # type: ignore[arg-type]


class _ManagerTurn(_ContextScope):
    """One message a manager handles, and the step of the message it is producing, if any."""

    __slots__ = ("run", "manager", "received", "step", "next_speaker", "_added")

    def __init__(self, run: "RunScope", manager: Any, message: Any) -> None:
        self.run, self.manager = run, manager
        self.received = list(message.messages or ()) if isinstance(message, GroupChatStart) else []
        self.step: StepScope | None = None
        self.next_speaker: str | None = None
        self._added: set[int] = set()
        purpose = None if self.adds_turns else sc.PURPOSE_SPEAKER_SELECTION
        super().__init__(otel_context.set_value(_TURN, self, acting_context(Actor(manager._name, purpose))))

    @property
    def adds_turns(self) -> bool:
        return isinstance(self.manager, TURN_MANAGERS)

    def open_step(self) -> StepScope:
        """The step of the message being produced; opened now if none is. Its input: the task this
        turn received until the manager adds a message, then the manager's thread."""
        if self.step is None:
            probe, inputs = self.run.probe, None
            if probe.config.capture_content:
                thread = [m for m in self.manager._message_thread if isinstance(m, BaseChatMessage)]
                inputs = chat_messages(self.received if self.received and not self._added else thread or self.received)
            self.step = start_step(probe, self.manager._name, run=self.run, description="manager of the team",
                                   input_messages=inputs, attributes=_path_attributes())
        return self.step

    def saw(self, result: Any) -> None:
        """Keep the next speaker ``result`` names if it is a progress ledger (JSON with ``next_speaker``);
        any other answer names none (a stalled ledger's choice is dropped when re-planning follows)."""
        self.next_speaker = None
        content = getattr(result, "content", None)
        if not isinstance(content, str) or "next_speaker" not in content:
            return
        try:
            (ledger,) = extract_json_from_str(content)
            done = ledger.get("is_request_satisfied", {}).get("answer")
            speaker = ledger["next_speaker"]["answer"]
        except (ValueError, TypeError, KeyError, AttributeError):  # not a ledger: the manager retries
            return
        self.next_speaker = None if done or not speaker else str(speaker)

    def added(self, messages: Sequence[Any]) -> None:
        """The manager added ``messages`` to its thread: each of its own ends the step producing it."""
        for message in messages:
            if isinstance(message, BaseChatMessage) and message.source == self.manager._name and id(message) not in self._added:
                self._added.add(id(message))
                step, self.step = self.open_step(), None
                if self.next_speaker is not None:
                    step.span.set_attribute(sc.STEP_NEXT_SPEAKER, self.next_speaker)
                    self.next_speaker = None
                step.finish([{"role": "assistant", "content": message.to_text(), "name": message.source}]
                            if step.probe.config.capture_content else None)

    def fail(self, exc: BaseException) -> None:
        if self.step is not None:
            self.step.fail(exc)
        self.step = None

    def end(self) -> None:
        if self.step is not None:
            self.step.finish()
        self.step = None


def _team_run_context(runtime_agent: Any) -> otel_context.Context | None:
    """The context of the run of the team whose manager or participant container ``runtime_agent``
    is, when its handler runs outside that run: the app started the team's runtime itself
    (``runtime=``), so the runtime's task runs in no run, or in the one it was started in."""
    try:
        entry = _TEAM_RUNS.get(runtime_agent.id.key) if _TEAM_RUNS else None
    except Exception:  # not bound to a runtime
        return None
    return entry[1] if entry is not None and entry[0] is not current_run() else None


async def _in_context(ctx: otel_context.Context, call: Callable[[], Any]) -> Any:
    token = otel_context.attach(ctx)
    try:
        return await call()
    finally:
        otel_context.detach(token)


def _in_team_run(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """``on_message_impl`` of a participant's container (patched once a registered team has a runtime
    of the app's own): handled inside its team's run."""
    ctx = _team_run_context(instance)
    if ctx is None:
        return wrapped(*args, **kwargs)
    return _in_context(ctx, lambda: wrapped(*args, **kwargs))


class ManagerWrapper(_Wrapper):
    """``on_message_impl`` of a team's manager: a :class:`_ManagerTurn` current while it handles a
    message (inside its team's run, also on a runtime the app started itself)."""

    def __call__(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.adapter.own_runtimes:
            ctx = _team_run_context(instance)
            if ctx is not None:
                return _in_context(ctx, lambda: self(wrapped, instance, args, kwargs))
        run = current_run()
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            turn = _ManagerTurn(run, instance, args[0] if args else kwargs.get("message"))
        except Exception:
            log_hook_error("manager turn start")
            return wrapped(*args, **kwargs)
        return await_in_scope(turn, lambda: wrapped(*args, **kwargs), lambda _: turn.end(),  # type: ignore[arg-type]
                              "manager turn")


def _thread_updated(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """``update_message_thread`` of a manager: the messages it adds itself end their steps."""
    turn = _manager_turn()
    if turn is not None and turn.manager is instance:
        try:
            turn.added(args[0] if args else kwargs["messages"])
        except Exception:
            log_hook_error("manager message")
    return wrapped(*args, **kwargs)


# -- the adapter ---------------------------------------------------------------------------------
class AutogenAdapter(Adapter):
    """Traces autogen-agentchat teams and agents."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self._patched: set[tuple[type, str]] = set()
        self.own_runtimes = False  # a registered team runs on a runtime the app started itself
        #: Agents registered as apps of their own (by id): one called outside runs opens one.
        self.lone_apps: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
        self._run_stream = RunStreamWrapper(self)
        self._run = RunWrapper(self)
        self._step = StepWrapper(self)
        self._on_messages = OnMessagesWrapper(self)
        self._tool = ToolWrapper(self)
        self._tool_stream = ToolStreamWrapper(self)
        self._workbench = WorkbenchWrapper(self)
        self._workbench_stream = WorkbenchStreamWrapper(self)
        self._create = CreateWrapper(self)
        self._manager = ManagerWrapper(self)
        self._create_stream = CreateStreamWrapper(self)
        self._dispatch = ToolDispatchWrapper(self)

    def detect(self, app: Any) -> bool:
        return isinstance(app, (BaseGroupChat, BaseChatAgent))

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        agents = self._register(app, probe)
        if isinstance(app, BaseChatAgent):
            self.lone_apps[id(app)] = app
        self.sync(modules=True)
        return AppInfo(name=app.name, lone_agent=isinstance(app, BaseChatAgent), agents=tuple(a.name for a in agents))

    def _register(self, obj: Any, probe: "Probe") -> list[Any]:
        """Add ``obj``, its participants (recursively) and model clients; return its agents."""
        self.registry.add(obj, probe)
        client = getattr(obj, "_model_client", None)
        if isinstance(client, ChatCompletionClient):
            self.registry.add(client, probe)
        if isinstance(obj, BaseChatAgent):
            return [obj]
        if getattr(obj, "_embedded_runtime", True) is False:
            self.own_runtimes = True
        return [agent for member in getattr(obj, "_participants", ()) for agent in self._register(member, probe)]

    def _instrument(self, patcher: Patcher) -> None:
        self._patched.clear()
        self.sync_patches(modules=True)
        patcher.wrap(BaseGroupChatManager, "on_message_impl", self._manager)  # inherited: no subclass defines it
        patcher.wrap(AssistantAgent, "_execute_tool_call", self._dispatch)  # a staticmethod its subclasses inherit
        if not env_flag(ENV_RUNTIME_SPANS, False):
            patcher.wrap(TraceHelper, "trace_block", _no_runtime_span)
            patcher.wrap(_runtime_module, "get_telemetry_envelope_metadata", _no_envelope_context)

    def uninstall(self) -> None:
        super().uninstall()
        self._patched.clear()
        self.own_runtimes = False
        self.lone_apps.clear()

    def sync_patches(self, *, modules: bool = False, **_: Any) -> None:
        """Patch the classes (and, with ``modules``, the autogen modules) not patched yet."""
        if modules:
            self._patch_modules()
        for cls in subclasses(BaseGroupChat):
            self._patch(cls, "run_stream", self._run_stream)
        for cls in subclasses(BaseChatAgent):
            self._patch(cls, "run_stream", self._run_stream)
            self._patch(cls, "run", self._run)
            self._patch(cls, "on_messages_stream", self._step)
            self._patch(cls, "on_messages", self._on_messages)
        for cls in subclasses(BaseGroupChatManager):
            self._patch(cls, "update_message_thread", _thread_updated)
        for cls in subclasses(ChatCompletionClient):
            self._patch(cls, "create", self._create)
            self._patch(cls, "create_stream", self._create_stream)
        for cls in subclasses(BaseTool):
            self._patch(cls, "run_json", self._tool)
        for cls in subclasses(BaseStreamTool):
            self._patch(cls, "run_json_stream", self._tool_stream)
        for cls in subclasses(Workbench):
            self._patch(cls, "call_tool", self._workbench)
            self._patch(cls, "call_tool_stream", self._workbench_stream)
        if self.own_runtimes and (ChatAgentContainer, "on_message_impl") not in self._patched:
            self._patcher.wrap(ChatAgentContainer, "on_message_impl", _in_team_run)  # inherited, as the manager's
            self._patched.add((ChatAgentContainer, "on_message_impl"))

    def _patch(self, cls: type, attr: str, wrapper: Callable[..., Any]) -> None:
        func = vars(cls).get(attr)
        key = (cls, attr)
        if func is None or key in self._patched or getattr(func, "__isabstractmethod__", False):
            return
        self._patcher.wrap(cls, attr, wrapper)
        self._patched.add(key)

    def _patch_modules(self) -> None:
        for module_name, module in list(sys.modules.items()):
            if module is None or not module_name.startswith(_MODULE_PREFIXES):
                continue
            for attr in ("trace_invoke_agent_span", "trace_tool_span"):
                if any(vars(module).get(attr) is helper for helper in _CORE_SPAN_HELPERS):
                    self._patcher.wrap(module, attr, _reuse_current_span)
            if vars(module).get("trace_create_agent_span") is _CREATE_AGENT_SPAN and not env_flag(ENV_RUNTIME_SPANS, False):
                self._patcher.wrap(module, "trace_create_agent_span", _no_create_agent_span)
