"""Microsoft Agent Framework (agent-framework-core 1.23) adapter: a ``Workflow`` or an agent is the app.

Class-level patches, installed once:

- run entry: ``Workflow.run`` (``stream=False`` and ``stream=True``) of a registered workflow, and
  ``run`` of a registered agent (``BaseAgent`` subclasses), outside any run: one run per call,
  ``invoke_workflow {name}``, its task the input message's text, its answer the text of the
  workflow's last output (an agent's: its response). A workflow run inside a run (a sub-workflow,
  a workflow used as an agent) opens no run of its own;
- agent step: one ``run`` of an agent inside a run, ``invoke_agent {agent.name}``: its input the
  messages it is given (in a workflow: the conversation so far), its output its response; its
  tool loop (model calls and tools) runs under it. ``run`` is patched on every ``BaseAgent``
  subclass that defines it (``Agent``, ``RawAgent``, a user's own); the layers of one agent
  (middleware, telemetry, ``RawAgent``) calling one another are one step. Orchestrators that
  decide with an agent (a group chat's agent-based manager, Magentic's manager) make steps of it:
  a group chat's selection (``AgentBasedGroupChatOrchestrator._invoke_agent``) is a step with
  ``aegis.llm.purpose = speaker_selection`` (its ``chat`` spans too) and the participant it picks in
  ``aegis.step.next_speaker``; a Magentic progress ledger
  (``StandardMagenticManager.create_progress_ledger``) names its next speaker there too, and so does
  a handoff orchestration's agent the agent it hands over to (its handoff tool's result);
- LLM call: ``BaseChatClient.get_response`` (``stream=False`` and ``stream=True``), the framework's
  own model abstraction: every provider's client (OpenAI, Azure, Anthropic, Ollama, ...) and a
  user's own ``BaseChatClient`` subclass reach it once per model request, below the client's
  function-invocation loop;
- tool call: ``FunctionTool.invoke`` -> ``execute_tool {tool}``; the tool's exception fails the span
  (Agent Framework then hands the error to the model).

Agent Framework's own OpenTelemetry spans (its observability layers, on by default with any
tracer provider) are kept out of instrumented runs: ``observability.get_tracer``, through which
all of them start, gives inside such a run a tracer whose spans record nothing and stand for the
current span. Outside instrumented runs they record as configured.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple, Sequence

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, call_arg, subclasses
from aegis_probe.capture.coexist import SILENT
from aegis_probe.capture.interception import LLMResponse, acall_llm, acall_llm_chunks
from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import SharedMessage
from aegis_probe.capture.spans import (
    RunScope,
    StepScope,
    attached,
    current_run,
    in_llm_call,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

FRAMEWORK = "agent-framework"


# -- messages --------------------------------------------------------------------------------
def _value(x: Any) -> str | None:
    """A role or finish reason as text (a plain string, or an enum-like's value)."""
    return None if x is None else str(getattr(x, "value", x))


def _result_text(result: Any) -> str:
    """A tool result's text: a string, Agent Framework ``Content`` items' text, else JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, (list, tuple)) and all(hasattr(c, "type") for c in result):
        return "\n".join(_content_text(c) for c in result)
    return json_text(result)


def _content_text(content: Any) -> str:
    return content.text if content.type == "text" else f"[{content.type}]"


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json_text(arguments or {})


def message_dicts(message: Any) -> list[dict[str, Any]]:
    """The neutral messages of one Agent Framework ``Message``: its function results as tool
    messages, else one message of its text (a part without text as ``[its type]``) and tool calls."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for content in message.contents:
        kind = content.type
        if kind == "text":
            texts.append(content.text)
        elif kind == "function_call":
            calls.append({"id": content.call_id, "name": content.name, "arguments": _arguments_text(content.arguments)})
        elif kind == "function_result":
            text = _result_text(content.result) if content.exception is None else str(content.exception)
            results.append({"role": "tool", "content": text, "tool_call_id": content.call_id})
        elif kind not in ("usage", "text_reasoning"):
            texts.append(f"[{kind}]")
    if results:
        return results
    out: dict[str, Any] = {"role": _value(message.role) or "user", "content": "\n".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    return [out]


def _as_messages(messages: Any) -> list[Any]:
    """An agent's or a client's input as ``Message`` objects (a string, a ``Message``, a list of either)."""
    if messages is None:
        return []
    from agent_framework import Message

    items = [messages] if isinstance(messages, (str, Message)) or not isinstance(messages, Sequence) else messages
    return [m if isinstance(m, Message) else Message("user", [m]) for m in items]


# A workflow hands every step new ``Message`` objects around the same ``Content`` objects (the
# conversation is copied message by message, its contents are not), so the neutral form of a message
# is kept per run keyed by its role and its contents' identities (the entry holds the contents: an
# id is not reused while kept; the framework replaces contents rather than change them in place).
# Messages whose neutral values are all strings (text, tool results) are shared as
# ``SharedMessage``s, the same objects every step, so ``encode_messages`` extends the last
# prompt's JSON; tool-call messages are converted every time. Kept in the run's caches
# (``RunScope.caches``), let go of when it ends.
_Shared = dict[tuple[Any, ...], tuple[tuple[Any, ...], list[SharedMessage]]]
_SHARED_MAX = 4096  # messages per run


def _run_shared() -> _Shared | None:
    """The calling run's shared messages; None outside runs."""
    run = current_run()
    if run is None:
        return None
    shared = run.caches.get(FRAMEWORK)
    if shared is None:
        shared = run.caches[FRAMEWORK] = {}
    return shared  # type: ignore[no-any-return]


def _converted(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """``Message``s in neutral form (text messages and tool results shared within the run)."""
    shared = _run_shared()
    if shared is None:
        return [d for m in messages for d in message_dicts(m)]
    out: list[dict[str, Any]] = []
    for m in messages:
        contents = m.contents
        key = (m.role, *map(id, contents))
        entry = shared.get(key)
        if entry is not None:
            out.extend(entry[1])
            continue
        dicts = message_dicts(m)
        if all(type(v) is str for d in dicts for v in d.values()):
            if len(shared) >= _SHARED_MAX:
                shared.clear()
            entry = shared[key] = (tuple(contents), [SharedMessage(d) for d in dicts])
            out.extend(entry[1])
        else:
            out.extend(dicts)
    return out


def _system_message(instructions: str) -> dict[str, Any]:
    """The instructions as a system message (shared within the run)."""
    shared = _run_shared()
    if shared is None:
        return {"role": "system", "content": instructions}
    entry = shared.get(("system", instructions))
    if entry is None:
        entry = shared[("system", instructions)] = ((), [SharedMessage(role="system", content=instructions)])
    return entry[1][0]


def neutral_messages(messages: Any) -> list[dict[str, Any]]:
    return _converted(_as_messages(messages))


def _instructions(options: Mapping[str, Any]) -> str | None:
    value = options.get("instructions")
    if isinstance(value, (list, tuple)):
        value = "\n".join(map(str, value))
    return value or None


def _task_text(message: Any) -> str | None:
    """A run's task: the text of its input message(s)."""
    if isinstance(message, str):
        return message
    try:
        texts = [m["content"] for m in neutral_messages(message) if m.get("content")]
    except Exception:
        return None
    return "\n".join(texts) if texts else None


def _answer_text(output: Any) -> str | None:
    """The text of a run's output: a string, a response's or message's text, a conversation's last."""
    if output is None or isinstance(output, str):
        return output
    if isinstance(output, (list, tuple)):
        return _answer_text(output[-1]) if output else None
    text = getattr(output, "text", None)
    return text if isinstance(text, str) else json_text(output)


def _workflow_answer(result: Any) -> str | None:
    """A workflow run's answer: its last output's text (streamed: the last response's updates' text)."""
    outputs = result.get_outputs()
    if not outputs:
        return None
    last = outputs[-1]
    if type(last).__name__ != "AgentResponseUpdate":
        return _answer_text(last)
    same = [o for o in outputs if type(o) is type(last) and o.response_id == last.response_id]
    return "".join(o.text for o in same)


# -- the model call ----------------------------------------------------------------------------
def _response_contents(response: LLMResponse) -> list[Any]:
    from agent_framework import Content

    contents: list[Any] = [Content.from_text(response.content)] if response.content else []
    contents += [Content.from_function_call(str(c.get("id") or ""), str(c["name"]), arguments=c.get("arguments") or None)
                 for c in response.tool_calls]
    return contents


def _usage(response: LLMResponse) -> Any:
    usage = {"input_token_count": response.input_tokens, "output_token_count": response.output_tokens,
             "cache_read_input_token_count": response.cache_read_input_tokens,
             "reasoning_output_token_count": response.reasoning_output_tokens}
    return {k: v for k, v in usage.items() if v is not None}


def _neutral_response(messages: Sequence[Any], usage: Mapping[str, Any] | None, **fields: Any) -> LLMResponse:
    neutral = [d for d in _converted(messages) if d["role"] == "assistant"]
    texts = [d["content"] for d in neutral if d.get("content")]
    usage = usage or {}
    return LLMResponse(
        content="\n".join(texts) if texts else None,
        tool_calls=[c for d in neutral for c in d.get("tool_calls", ())],
        input_tokens=usage.get("input_token_count"), output_tokens=usage.get("output_token_count"),
        cache_read_input_tokens=usage.get("cache_read_input_token_count"),
        cache_creation_input_tokens=usage.get("cache_creation_input_token_count"),
        reasoning_output_tokens=usage.get("reasoning_output_token_count"), **fields,
    )


class AgentFrameworkCodec:
    """``BaseChatClient.get_response(messages, *, options, client_kwargs, ...)`` and its ``ChatResponse``
    (a streamed call: its ``ChatResponseUpdate`` items)."""

    provider = "agent_framework"

    @staticmethod
    def _options(kwargs: dict[str, Any]) -> Mapping[str, Any]:
        return kwargs.get("options") or {}

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        model = (kwargs.get("client_kwargs") or {}).get("model") or self._options(kwargs).get("model")
        model = model or getattr(instance, "model", None) or getattr(instance, "model_id", None)
        return model if isinstance(model, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        client = getattr(instance, "client", None)
        url = getattr(client, "base_url", None)
        name = getattr(instance, "otel_provider_name", None) or getattr(instance, "OTEL_PROVIDER_NAME", None)
        default = name if isinstance(name, str) and name != "unknown" else self.provider
        attrs = {**sc.request_attributes(self._options(kwargs)), **sc.server_attributes(url)}
        attrs[sc.PROVIDER] = sc.provider_name(url, default)
        decision = _DECISION.get()
        if decision is not None and decision.purpose:
            attrs[sc.LLM_PURPOSE] = decision.purpose
        return attrs

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        instructions = _instructions(self._options(kwargs))
        system = [_system_message(instructions)] if instructions else []
        return system + neutral_messages(call_arg(args, kwargs, "messages", 0))

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        neutral = list(messages)
        options = dict(self._options(kwargs))
        if _instructions(options) is not None and neutral and neutral[0].get("role") == "system":
            options["instructions"] = str(neutral.pop(0).get("content") or "")
        rebuilt = [_message(m) for m in neutral]
        kwargs = {**kwargs, "options": options}
        if "messages" in kwargs or not args:
            return args, {**kwargs, "messages": rebuilt}
        return (rebuilt, *args[1:]), kwargs

    def response(self, raw: Any) -> LLMResponse:
        return _neutral_response(raw.messages, raw.usage_details, model=raw.model,
                                 finish_reason=_value(raw.finish_reason), id=raw.response_id)

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        from agent_framework import ChatResponse, Message

        return ChatResponse(
            messages=[Message("assistant", _response_contents(response))], response_id=response.id,
            model=response.model or getattr(raw, "model", None), finish_reason=response.finish_reason,  # type: ignore[arg-type]
            usage_details=_usage(response), conversation_id=getattr(raw, "conversation_id", None),
        )

    # -- streamed calls (a ChunkCodec) --
    def from_chunks(self, chunks: Sequence[Any]) -> LLMResponse:
        from agent_framework import ChatResponse

        return self.response(ChatResponse.from_updates(chunks))

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        from agent_framework import ChatResponseUpdate, Content

        contents = _response_contents(response)
        usage = _usage(response)
        if usage:
            contents.append(Content.from_usage(usage))
        return [ChatResponseUpdate(contents=contents, role="assistant", response_id=response.id, model=response.model,
                                   finish_reason=response.finish_reason)]  # type: ignore[arg-type]

    def is_last(self, chunk: Any) -> bool:
        return False  # the usage may follow the finish reason: the span ends with the stream


def _message(neutral: Mapping[str, Any]) -> Any:
    """An Agent Framework ``Message`` carrying a neutral message (an injected prompt)."""
    from agent_framework import Content, Message

    role, text = str(neutral.get("role") or "user"), str(neutral.get("content") or "")
    if role == "tool":
        return Message("tool", [Content.from_function_result(str(neutral.get("tool_call_id") or ""), result=text)])
    if role == "assistant":
        return Message("assistant", _response_contents(
            LLMResponse(content=neutral.get("content"), tool_calls=list(neutral.get("tool_calls") or ()))))
    return Message(role, [text])


# -- runs and steps ------------------------------------------------------------------------------
#: The agent whose step is current: its own layers' ``run`` (middleware, telemetry, ``RawAgent``) open none.
_AGENT: ContextVar[Any] = ContextVar("aegis_agent_framework_agent", default=None)


@contextmanager
def _in_step(step: StepScope, agent: Any) -> Iterator[None]:
    """``step`` current, and ``agent`` the agent it is a step of."""
    token = _AGENT.set(agent)
    try:
        with attached(step):
            yield
    finally:
        _AGENT.reset(token)


def _end(scope: StepScope | RunScope, exc: BaseException | None, output: Any = None) -> None:
    try:
        if exc is not None:
            scope.fail(exc)
        elif isinstance(scope, RunScope):
            scope.answer = output
            scope.finish()
        else:
            scope.finish(output)
    except Exception:
        log_hook_error("agent-framework end")


def _agent_name(agent: Any) -> str:
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else type(agent).__name__


def _step_output(response: Any) -> list[dict[str, Any]] | None:
    messages = getattr(response, "messages", None)
    return None if messages is None else _converted(messages)


class _Decision(NamedTuple):
    """An orchestrator deciding with its agent: why (``aegis.llm.purpose``, if marked) and how its
    response names the next speaker."""

    purpose: str | None
    next_speaker: Callable[[Any], str | None]


#: The decision an orchestrator is making with its agent (that agent's run is a step marked so).
_DECISION: ContextVar[_Decision | None] = ContextVar("aegis_agent_framework_decision", default=None)


def _selected(response: Any) -> str | None:
    """A group chat's agent-based selection: the participant it names, unless it terminates."""
    from agent_framework_orchestrations._group_chat import AgentBasedGroupChatOrchestrator

    output = AgentBasedGroupChatOrchestrator._parse_agent_output(response)
    return None if output.terminate else output.next_speaker


def _ledger_speaker(response: Any) -> str | None:
    """A Magentic progress ledger's next speaker, unless it finds the request satisfied."""
    from agent_framework_orchestrations._magentic import _extract_json

    ledger = _extract_json(response.messages[-1].text)
    speaker = ledger["next_speaker"]["answer"]
    return None if ledger["is_request_satisfied"]["answer"] or not isinstance(speaker, str) else speaker


def _handed_to(response: Any) -> str | None:
    """The agent a handoff orchestration's agent hands over to (its handoff tool's result), if any."""
    messages = getattr(response, "messages", None)
    for content in messages[-1].contents if messages else ():
        if content.type == "function_result" and isinstance(content.result, str) and _HANDOFF_KEY in content.result:
            try:
                target = json.loads(content.result).get(_HANDOFF_KEY)
            except (ValueError, AttributeError):
                continue
            if isinstance(target, str):
                return target
    return None


#: The key of a handoff tool's result (agent_framework_orchestrations' ``HANDOFF_FUNCTION_RESULT_KEY``).
_HANDOFF_KEY = "handoff_to"


class _Turn:
    """One agent ``run`` traced: its step, and the run it opened (a lone agent's), if any."""

    def __init__(self, agent: Any, step: StepScope, run: RunScope | None, decision: _Decision | None = None) -> None:
        self.agent, self.step, self.run, self.decision = agent, step, run, decision

    def _mark_next_speaker(self, response: Any) -> None:
        try:
            speaker = self.decision.next_speaker(response) if self.decision else _handed_to(response)
        except Exception:  # not a decision the orchestrator can read either: it retries or fails
            speaker = None
        if speaker:
            self.step.span.set_attribute(sc.STEP_NEXT_SPEAKER, speaker)

    def end(self, exc: BaseException | None, response: Any = None) -> None:
        if exc is None:
            self._mark_next_speaker(response)
            _end(self.step, None, lambda: _step_output(response))
        else:
            _end(self.step, exc)
        if self.run is not None:
            _end(self.run, exc, None if exc is not None else _answer_text(response))

    async def awaited(self, awaitable: Any) -> Any:
        with _in_step(self.step, self.agent):
            try:
                response = await awaitable
            except BaseException as exc:
                self.end(exc)
                raise
        self.end(None, response)
        return response

    def streamed(self, stream: Any) -> Any:
        """The agent's ``ResponseStream``, pulled with the step current and ending it when done."""
        def cleanup() -> None:
            if stream._stream_error is not None:
                self.end(stream._stream_error)

        def result(response: Any) -> Any:
            self.end(None, response)
            return response

        return (stream.with_pull_context_manager(lambda: _in_step(self.step, self.agent))
                .with_cleanup_hook(cleanup).with_result_hook(result))


def _deciding(purpose: str | None, next_speaker: Callable[[Any], str | None]) -> Callable[..., Any]:
    """A wrapper of an orchestrator's async decision method: its agent's runs inside are decision steps."""
    decision = _Decision(purpose, next_speaker)

    async def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        token = _DECISION.set(decision)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _DECISION.reset(token)

    return wrapper


class AgentFrameworkAdapter(Adapter):
    """Traces Microsoft Agent Framework workflows and agents: one step per agent run."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.codec = AgentFrameworkCodec()

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        modules = [sys.modules.get("agent_framework._agents"), sys.modules.get("agent_framework._workflows._workflow")]
        types = tuple(t for t in (getattr(modules[0], "BaseAgent", None), getattr(modules[1], "Workflow", None))
                      if isinstance(t, type))
        return bool(types) and isinstance(app, types)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        self.registry.add(app, probe)
        executors = getattr(app, "executors", None)
        if isinstance(executors, dict):  # a workflow: its agents' names
            agents = tuple(_agent_name(e.agent) for e in executors.values() if hasattr(e, "agent"))
            return AppInfo(name=getattr(app, "name", None) or "workflow", lone_agent=False, agents=agents)
        name = _agent_name(app)
        return AppInfo(name=name, lone_agent=False, agents=(name,))

    def _instrument(self, patcher: Patcher) -> None:
        from agent_framework import BaseChatClient, FunctionTool, observability
        from agent_framework._workflows._workflow import Workflow

        patcher.wrap(Workflow, "run", self._workflow_run)
        patcher.wrap(BaseChatClient, "get_response", self._get_response)
        patcher.wrap(FunctionTool, "invoke", self._tool)
        patcher.wrap(observability, "get_tracer", self._own_tracer)
        try:
            from agent_framework_orchestrations import AgentBasedGroupChatOrchestrator, StandardMagenticManager
        except ImportError:  # the orchestrations package is optional
            pass
        else:
            patcher.wrap(AgentBasedGroupChatOrchestrator, "_invoke_agent", _deciding(sc.PURPOSE_SPEAKER_SELECTION, _selected))
            patcher.wrap(StandardMagenticManager, "create_progress_ledger", _deciding(None, _ledger_speaker))
        self.sync_patches()

    def sync_patches(self, **options: Any) -> None:
        """Wrap ``run`` of every ``BaseAgent`` class that defines its own (a class defined after
        ``instrument()`` too: synced when a run starts)."""
        from agent_framework import BaseAgent

        for cls in subclasses(BaseAgent):
            if "run" in vars(cls):
                self._patcher.wrap(cls, "run", self._agent_run)

    @staticmethod
    def _probe() -> "Probe | None":
        run = current_run()
        return run.probe if run is not None and run.framework == FRAMEWORK and run.probe.active else None

    def _start_run(self, app: Any, name: str, task: Any) -> RunScope | None:
        """A new run of ``app`` when it is registered (or trace-every-app mode is on) and no run is open."""
        if current_run() is not None:
            return None
        probe = self.run_probe(app)
        if probe is None:
            return None
        self.sync()
        return start_run(probe, name, framework=self.name, task=_task_text(task))

    # -- workflow runs ---------------------------------------------------------------------
    def _workflow_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            run = self._start_run(instance, instance.name or "workflow", call_arg(args, kwargs, "message", 0))
        except Exception:
            log_hook_error("agent-framework run start")
            run = None
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            with attached(run):
                result = wrapped(*args, **kwargs)
        except BaseException as exc:
            _end(run, exc)
            raise
        if kwargs.get("stream"):
            return self._streamed_run(result, run)
        return self._awaited_run(result, run)

    @staticmethod
    async def _awaited_run(awaitable: Any, run: RunScope) -> Any:
        with attached(run):
            try:
                result = await awaitable
            except BaseException as exc:
                _end(run, exc)
                raise
        try:
            answer = _workflow_answer(result)
        except Exception:
            log_hook_error("agent-framework run end")
            answer = None
        _end(run, None, answer)
        return result

    @staticmethod
    def _streamed_run(stream: Any, run: RunScope) -> Any:
        def cleanup() -> None:
            if stream._stream_error is not None:
                _end(run, stream._stream_error)

        def result(final: Any) -> Any:
            _end(run, None, _workflow_answer(final))
            return final

        return stream.with_pull_context_manager(lambda: attached(run)).with_cleanup_hook(cleanup).with_result_hook(result)

    # -- agent steps -----------------------------------------------------------------------
    def _open_turn(self, agent: Any, args: tuple, kwargs: dict) -> _Turn | None:
        if _AGENT.get() is agent:  # an inner layer of the agent whose step is current
            return None
        messages = call_arg(args, kwargs, "messages", 0)
        name = _agent_name(agent)
        opened = self._start_run(agent, name, messages)
        run = opened or current_run()
        if run is None or run.framework != FRAMEWORK or not run.probe.active:
            return None
        decision = _DECISION.get()
        purpose = {sc.LLM_PURPOSE: decision.purpose} if decision is not None and decision.purpose else None
        with attached(opened):
            step = start_step(run.probe, name, run=run, agent_id=getattr(agent, "id", None),
                              description=getattr(agent, "description", None),
                              input_messages=lambda: neutral_messages(messages), attributes=purpose)
        return _Turn(agent, step, opened, decision)

    def _agent_run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            turn = self._open_turn(instance, args, kwargs)
        except Exception:
            log_hook_error("agent-framework step start")
            turn = None
        if turn is None:
            return wrapped(*args, **kwargs)
        try:
            with _in_step(turn.step, instance):
                result = wrapped(*args, **kwargs)
        except BaseException as exc:
            turn.end(exc)
            raise
        if kwargs.get("stream"):
            try:
                return turn.streamed(result)
            except Exception:
                log_hook_error("agent-framework stream")
                return result
        return turn.awaited(result)

    # -- model and tool calls --------------------------------------------------------------
    def _get_response(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None or in_llm_call():  # outside runs, or a client delegating to another
            return wrapped(*args, **kwargs)
        if not kwargs.get("stream"):
            return acall_llm(probe, self.codec, wrapped, instance, args, kwargs)
        from agent_framework import ResponseStream

        async def opened(*a: Any, **k: Any) -> Any:
            return wrapped(*a, **k)

        response_format = AgentFrameworkCodec._options(kwargs).get("response_format")
        return ResponseStream(
            acall_llm_chunks(probe, self.codec, opened, instance, args, kwargs),
            finalizer=lambda updates: instance._finalize_response_updates(updates, response_format=response_format),
        )

    async def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        try:
            arguments: Any = kwargs.get("arguments")
            if hasattr(arguments, "model_dump"):
                arguments = arguments.model_dump()
            scope = start_tool(probe, instance.name, call_id=kwargs.get("tool_call_id"),
                               arguments=dict(arguments or {}, **{k: v for k, v in kwargs.items() if k not in _INVOKE_KWARGS}),
                               description=instance.description or None, tool_type="function")
        except Exception:
            log_hook_error("agent-framework tool start")
            return await wrapped(*args, **kwargs)
        with attached(scope):
            try:
                result = await wrapped(*args, **kwargs)
            except BaseException as exc:
                scope.fail(exc)
                raise
        try:
            scope.finish(_result_text(result))
        except Exception:
            log_hook_error("agent-framework tool end")
            scope.end()
        return result

    def _own_tracer(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``observability.get_tracer``: inside an instrumented run, a tracer recording nothing."""
        return SILENT if self._probe() is not None else wrapped(*args, **kwargs)


#: ``FunctionTool.invoke``'s own keywords (the others are the tool's arguments, passed directly).
_INVOKE_KWARGS = frozenset({"arguments", "context", "tool_call_id", "skip_parsing"})
