"""CrewAI's own model abstraction as the model-call seam: ``BaseLLM.call`` / ``acall``.

Every CrewAI model is a ``BaseLLM``: the native providers ``LLM(model=...)`` dispatches to
(OpenAI, Anthropic, Gemini, Bedrock, Azure, OpenAI-compatible), the LiteLLM fallback
(``crewai.LLM`` itself) and a user's own subclass. Each subclass defines its own ``call``/``acall``
(CrewAI wraps them in its rate-limit retry when the class is made), so each of those is wrapped,
classes defined later too (:meth:`CrewAILLMSeam.sync`). A call inside a CrewAI run is one ``chat``
span through :func:`~aegis_probe.capture.interception.call_llm` / ``acall_llm``; a call inside
another traced model call (a subclass calling ``super().call``, a custom model delegating to a
native one, the openai client under the native OpenAI provider) is not traced again.

What ``call`` returns is the text, the tool calls (when the caller runs tools itself: the
provider's own objects, read with CrewAI's ``extract_tool_call_info``), a pydantic model
(``response_model``, or the model's ``response_format``), or the result of a tool the provider
ran from ``available_functions``. Usage, finish reason and response id are what the provider
reports in its ``LLMCallCompletedEvent`` (``_emit_call_completed_event``; the LiteLLM fallback's
``_handle_emit_call_events``), read during the call.

A replayed, substituted or injected answer reaches the app as a provider would give it: tool calls
as OpenAI-shaped dicts (what CrewAI's executors read from every provider), structured output
validated into the requested model (its ``ValidationError`` raised as the provider's would be),
a tool call with ``available_functions`` run through ``_handle_tool_execution``; and, for a
streamed call, as ``LLMStreamChunkEvent`` chunks (text deltas, then tool-call argument deltas),
which is how CrewAI streams. With interceptors, the chunk events of a real streamed call (whatever
emits them onto CrewAI's event bus) are held until the answer is settled, then passed on (or
replaced by the new answer's).
"""

from __future__ import annotations

import contextvars
import json
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeGuard

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Patcher, call_arg, subclasses
from aegis_probe.capture.interception import LLMResponse, acall_llm, call_llm
from aegis_probe.capture.messages import content_text
from aegis_probe.capture.openai_shape import openai_messages, openai_tool_calls
from aegis_probe.capture.spans import ChatMessage, current_run, in_llm_call, log_hook_error

if TYPE_CHECKING:
    from pydantic import BaseModel

    from aegis_probe.capture.probe import Probe

#: CrewAI's provider names -> ``gen_ai.provider.name`` (others are kept as CrewAI names them).
_PROVIDERS = {
    "openai": sc._P.OPENAI.value, "anthropic": sc._P.ANTHROPIC.value, "claude": sc._P.ANTHROPIC.value,
    "gemini": sc._P.GCP_GEMINI.value, "google": sc._P.GCP_GEMINI.value, "bedrock": sc._P.AWS_BEDROCK.value,
    "aws": sc._P.AWS_BEDROCK.value, "azure": sc._P.AZURE_AI_INFERENCE.value,
}
#: The ``call``/``acall`` parameters, in order.
_PARAMS = ("messages", "tools", "callbacks", "available_functions", "from_task", "from_agent", "response_model")
#: A text cut into stream deltas: each word with the space before it (whitespace at the end alone).
_DELTAS = re.compile(r"\s*\S+|\s+")


class _Report:
    """One traced call as it ran: its return value and what the provider reported on the way."""

    __slots__ = ("value", "usage", "finish_reason", "response_id", "executed", "hold", "held")

    def __init__(self, hold: bool) -> None:
        self.value: Any = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.executed: tuple[str, Any] | None = None  # (name, arguments) of a tool the provider ran
        self.hold = hold  # hold the call's chunk events until the answer is settled
        self.held: list[tuple[Callable[..., Any], Any, Any]] = []  # (the bus's emit, source, event)


class _Answer:
    """A new answer (replayed, substituted, injected) the seam delivers once the core is done with it."""

    __slots__ = ("response",)

    def __init__(self, response: LLMResponse) -> None:
        self.response = response


_REPORT: contextvars.ContextVar[_Report | None] = contextvars.ContextVar("aegis_crewai_llm_report", default=None)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _tool_calls(value: list[Any]) -> list[dict[str, Any]]:
    """Tool calls in any provider's shape, neutral (those CrewAI's executors cannot read left out)."""
    from crewai.utilities.agent_utils import extract_tool_call_info

    calls = []
    for item in value:
        info = extract_tool_call_info(item)
        if info is not None:
            calls.append({"id": info[0], "name": info[1], "arguments": _arguments(info[2])})
    return calls


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """``LLMResponse`` usage fields of a CrewAI provider's usage dict (a detail it did not report stays None)."""
    from crewai.types.usage_metrics import UsageMetrics

    metrics = UsageMetrics.from_provider_dict(usage) if isinstance(usage, dict) else None
    if metrics is None or usage is None:
        return {}

    def told(count: int, *keys: str) -> int | None:
        return count if any(k in usage for k in keys) else None

    return {
        "input_tokens": metrics.prompt_tokens,
        "output_tokens": metrics.completion_tokens,
        "cache_read_input_tokens": told(metrics.cached_prompt_tokens, "cached_prompt_tokens", "cached_tokens",
                                        "cache_read_input_tokens", "prompt_tokens_details"),
        "cache_creation_input_tokens": told(metrics.cache_creation_tokens, "cache_creation_tokens",
                                            "cache_creation_input_tokens"),
        "reasoning_output_tokens": told(metrics.reasoning_tokens, "reasoning_tokens"),
    }


def _neutral(m: Any) -> dict[str, Any]:
    """One CrewAI message (an OpenAI-format dict) in neutral form."""
    msg: dict[str, Any] = {"role": m.get("role", "user"), "content": content_text(m.get("content"))}
    for key in ("name", "tool_call_id"):
        if m.get(key):
            msg[key] = m[key]
    if m.get("tool_calls"):
        msg["tool_calls"] = _tool_calls(m["tool_calls"])
    return msg


class CrewAILLMCodec:
    """One ``BaseLLM.call(messages, tools, callbacks, available_functions, from_task, from_agent,
    response_model)`` of ``llm``: its messages, the provider's report of its answer, and a new answer
    delivered as that provider's would be."""

    __slots__ = ("llm", "args", "kwargs")

    def __init__(self, llm: Any, args: tuple, kwargs: dict) -> None:
        self.llm, self.args, self.kwargs = llm, args, kwargs

    def _arg(self, name: str) -> Any:
        return call_arg(self.args, self.kwargs, name, _PARAMS.index(name))

    @property
    def provider(self) -> str:
        name = str(getattr(self.llm, "provider", "") or "")
        return _PROVIDERS.get(name.lower(), name or sc._P.OPENAI.value)

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        model = getattr(instance, "model", None)
        return model if isinstance(model, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        params = {name: getattr(instance, name, None)
                  for name in ("temperature", "top_p", "max_tokens", "seed", "frequency_penalty", "presence_penalty", "n")}
        params["stop"] = getattr(instance, "stop_sequences", None) or None
        url = getattr(instance, "base_url", None) or getattr(instance, "api_base", None)
        return {**sc.request_attributes(params), **sc.server_attributes(url), sc.PROVIDER: sc.provider_name(url, self.provider)}

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        messages = call_arg(args, kwargs, "messages", 0)
        if isinstance(messages, str):
            return [{"role": "user", "content": messages}]
        return [_neutral(m) for m in messages or ()]

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        out = openai_messages(messages)
        if "messages" in kwargs or not args:
            return args, {**kwargs, "messages": out}
        return (out, *args[1:]), kwargs

    def response(self, raw: _Report) -> LLMResponse:
        from pydantic import BaseModel

        value, content, calls = raw.value, None, []
        if raw.executed is not None:
            calls = [{"id": None, "name": raw.executed[0], "arguments": _arguments(raw.executed[1])}]
        elif isinstance(value, list):
            calls = _tool_calls(value)
            if not calls and value:
                content = _arguments(value)
        elif isinstance(value, BaseModel):
            content = value.model_dump_json()
        elif value is not None:
            content = value if isinstance(value, str) else _arguments(value)
        return LLMResponse(content=content, tool_calls=calls, model=self.model(self.llm, (), {}),
                           finish_reason=raw.finish_reason, id=raw.response_id, **_usage(raw.usage))

    def with_response(self, raw: _Report | None, response: LLMResponse) -> _Answer:
        return _Answer(response)

    # -- a new answer, delivered ---------------------------------------------------------------
    def deliver(self, response: LLMResponse) -> Any:
        """What ``call`` returns for ``response`` (its chunk events first, for a streamed call)."""
        if self._streamed():
            self._stream(response)
        if response.tool_calls:
            functions = self._arg("available_functions")
            if not functions:
                return openai_tool_calls(response.tool_calls)
            first = response.tool_calls[0]
            result = self.llm._handle_tool_execution(
                function_name=first["name"], function_args=_loaded(first.get("arguments")),
                available_functions=functions, from_task=self._arg("from_task"), from_agent=self._arg("from_agent"))
            if result is not None:
                return result
        content = response.content or ""
        asked = self._arg("response_model")
        if _is_model(asked):  # the provider's parse raises on an answer that does not validate
            return asked.model_validate_json(content)
        configured = getattr(self.llm, "response_format", None)
        if _is_model(configured):  # the provider falls back to the text
            try:
                return configured.model_validate_json(content)
            except ValueError:
                return content
        return content

    def _streamed(self) -> bool:
        try:
            return bool(self.llm._effective_stream())
        except Exception:
            log_hook_error("crewai stream mode")
            return False

    def _stream(self, response: LLMResponse) -> None:
        """``response`` as the chunk events a streaming provider emits: text deltas, then each tool
        call's argument deltas (the call so far with each, as CrewAI's providers send it)."""
        from crewai.events.types.llm_events import LLMCallType
        from crewai.llms.base_llm import llm_call_context

        task, agent, emit = self._arg("from_task"), self._arg("from_agent"), self.llm._emit_stream_chunk_event
        with llm_call_context():  # the call id CrewAI's events name their call by
            for delta in _DELTAS.findall(response.content or ""):
                emit(chunk=delta, from_task=task, from_agent=agent, response_id=response.id)
            for index, call in enumerate(response.tool_calls):
                sent = ""
                for delta in _DELTAS.findall(call.get("arguments") or "") or [""]:
                    sent += delta
                    emit(chunk=delta, from_task=task, from_agent=agent, call_type=LLMCallType.TOOL_CALL,
                         response_id=response.id,
                         tool_call={"id": call.get("id"), "type": "function", "index": index,
                                    "function": {"name": call.get("name"), "arguments": sent}})


def _loaded(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments or {}
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return {}


def _is_model(value: Any) -> "TypeGuard[type[BaseModel]]":
    from pydantic import BaseModel

    return isinstance(value, type) and issubclass(value, BaseModel)


class CrewAILLMSeam:
    """Wrappers of every ``BaseLLM`` subclass's ``call``/``acall``, for calls inside runs of ``framework``."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self._wrapped: set[type] = set()

    def install(self, patcher: Patcher) -> None:
        from crewai.events.event_bus import CrewAIEventsBus
        from crewai.llm import LLM
        from crewai.llms.base_llm import BaseLLM

        self._wrapped.clear()  # (left as it was by an uninstall, which does not sync)
        patcher.wrap(BaseLLM, "_emit_call_completed_event", self._completed, enabled=_REPORT.get)
        patcher.wrap(LLM, "_handle_emit_call_events", self._completed, enabled=_REPORT.get)
        patcher.wrap(BaseLLM, "_handle_tool_execution", self._executed, enabled=_REPORT.get)
        patcher.wrap(CrewAIEventsBus, "emit", self._emitted, enabled=_REPORT.get)
        self.sync(patcher)

    def sync(self, patcher: Patcher) -> None:
        """Wrap the ``call``/``acall`` of each ``BaseLLM`` class defining them, those defined since too."""
        from crewai.llms.base_llm import BaseLLM

        for cls in subclasses(BaseLLM):
            if cls in self._wrapped:
                continue
            self._wrapped.add(cls)  # tried once: a class that refuses the patch keeps its own
            try:
                if "call" in vars(cls):
                    patcher.wrap(cls, "call", self._call)
                if "acall" in vars(cls):
                    patcher.wrap(cls, "acall", self._acall)
            except Exception:
                log_hook_error(f"patching {cls.__qualname__}.call")

    def _probe(self) -> "Probe | None":
        run = current_run()
        if run is None or run.framework != self.framework or not run.probe.active or in_llm_call():
            return None
        return run.probe

    def _call(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return wrapped(*args, **kwargs)
        codec = CrewAILLMCodec(instance, args, kwargs)
        hold = bool(probe.interceptors)

        def reported(*a: Any, **kw: Any) -> _Report:
            report = _Report(hold)
            token = _REPORT.set(report)
            try:
                report.value = wrapped(*a, **kw)
            finally:
                _REPORT.reset(token)
            return report

        return _settled(codec, call_llm(probe, codec, reported, instance, args, kwargs))

    async def _acall(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        codec = CrewAILLMCodec(instance, args, kwargs)
        hold = bool(probe.interceptors)

        async def reported(*a: Any, **kw: Any) -> _Report:
            report = _Report(hold)
            token = _REPORT.set(report)
            try:
                report.value = await wrapped(*a, **kw)
            finally:
                _REPORT.reset(token)
            return report

        return _settled(codec, await acall_llm(probe, codec, reported, instance, args, kwargs))

    # -- what the provider reports during a traced call ----------------------------------------
    @staticmethod
    def _completed(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        report = _REPORT.get()
        if report is not None:
            try:
                report.usage = call_arg(args, kwargs, "usage", 5)
                report.finish_reason = call_arg(args, kwargs, "finish_reason", 6)
                report.response_id = call_arg(args, kwargs, "response_id", 7)
            except Exception:
                log_hook_error("crewai call completed")
        return wrapped(*args, **kwargs)

    @staticmethod
    def _emitted(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``CrewAIEventsBus.emit(source, event)``: a chunk event of a call whose answer is not settled yet is held."""
        report = _REPORT.get()
        if report is None or not report.hold:
            return wrapped(*args, **kwargs)
        from crewai.events.types.llm_events import LLMStreamChunkEvent

        source, event = call_arg(args, kwargs, "source", 0), call_arg(args, kwargs, "event", 1)
        if not isinstance(event, LLMStreamChunkEvent):
            return wrapped(*args, **kwargs)
        report.held.append((wrapped, source, event))
        return None

    @staticmethod
    def _executed(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        report = _REPORT.get()
        if report is not None:
            report.executed = (call_arg(args, kwargs, "function_name", 0), call_arg(args, kwargs, "function_args", 1))
        return wrapped(*args, **kwargs)


def _settled(codec: CrewAILLMCodec, outcome: Any) -> Any:
    """What the app gets from a traced call: a new answer delivered, or the call's own value (its
    held chunk events passed on first)."""
    if isinstance(outcome, _Answer):
        return codec.deliver(outcome.response)
    if not isinstance(outcome, _Report):
        return outcome
    for emit, source, event in outcome.held:
        emit(source, event)
    return outcome.value
