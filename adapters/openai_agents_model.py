"""The OpenAI Agents SDK's own model abstraction as its model-call seam: ``get_response`` and
``stream_response`` of every ``agents.models.interface.Model`` class that defines them
(``OpenAIResponsesModel``, the SDK's default, and its websocket subclass; ``OpenAIChatCompletionsModel``;
``LitellmModel`` and ``AnyLLMModel`` once imported; a user's own ``Model``), so a model call is
one ``chat`` span whatever the provider.

Both methods speak the Responses format whatever the provider: the request is the system
instructions and the input items (read by :func:`~aegis_probe.adapters.openai_agents_items.item_message`),
the answer a ``ModelResponse`` (output items and usage) or, streamed, Responses stream events ending
with ``response.completed``. A replayed, substituted or injected answer is rebuilt in that format:
a ``message`` item (an ``output_text`` part, a ``refusal`` part) and a ``function_call`` item per tool
call; streamed, as the events a Responses stream sends (:func:`aegis_probe.modelapis.responses.stream_events`:
text and argument deltas, usage in the last event). Output items other than messages and function
calls (reasoning, hosted tools' calls) are not in the neutral form, so a rebuilt answer has none.
A ``Model`` whose method calls another traced one (``super()``, a wrapping model) makes one span.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence

from aegis_probe.adapters.openai_agents_items import input_messages, item_message
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Patcher, call_arg, subclasses
from aegis_probe.capture.interception import LLMResponse, acall_llm, acall_llm_chunks
from aegis_probe.capture.messages import SharedMessage
from aegis_probe.capture.spans import ChatMessage, RunScope, current_run, in_llm_call
from aegis_probe.modelapis.responses import response_body, stream_events, usage_body

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

#: ``get_response``/``stream_response``'s parameters, in order (the SDK passes them by keyword or by position).
_PARAMS = ("system_instructions", "input", "model_settings", "tools", "output_schema", "handoffs", "tracing")
#: ``ModelSettings`` fields that are ``gen_ai.request.*`` parameters (OpenAI's names).
_SETTINGS = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "max_tokens")
#: Stream events that end a Responses stream with its whole response.
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _arg(args: tuple, kwargs: dict, name: str) -> Any:
    return kwargs[name] if name in kwargs else call_arg(args, kwargs, name, _PARAMS.index(name))  # (the SDK's by keyword)


def _with_arg(args: tuple, kwargs: dict, name: str, value: Any) -> tuple[tuple, dict]:
    position = _PARAMS.index(name)
    if name in kwargs or len(args) <= position:
        return args, {**kwargs, name: value}
    return (*args[:position], value, *args[position + 1:]), kwargs


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _count(obj: Any, name: str) -> int | None:
    value = None if obj is None else obj.get(name) if type(obj) is dict else getattr(obj, name, None)
    return value if type(value) is int else None


def _usage(usage: Any) -> dict[str, Any]:
    """``LLMResponse`` usage fields of a Responses-format usage (the SDK's ``Usage``, a ``ResponseUsage``):
    a detail the SDK reports as 0 (its value when the provider gave none) is not recorded."""
    inputs, outputs = _get(usage, "input_tokens_details"), _get(usage, "output_tokens_details")
    return {"input_tokens": _count(usage, "input_tokens"), "output_tokens": _count(usage, "output_tokens"),
            "cache_read_input_tokens": _count(inputs, "cached_tokens") or None,
            "cache_creation_input_tokens": _count(inputs, "cache_write_tokens") or None,
            "reasoning_output_tokens": _count(outputs, "reasoning_tokens") or None}


def read_output(output: Sequence[Any], usage: Any, response_id: str | None, model: str | None = None,
                incomplete: bool = False) -> LLMResponse:
    """The neutral form of a model's Responses-format output items (dicts, or the openai types) and usage."""
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:  # (_get inline: a dict's fields, else the openai type's attributes)
        is_dict = type(item) is dict
        kind = item.get("type") if is_dict else getattr(item, "type", None)
        if kind == "message":
            for part in (item.get("content") if is_dict else getattr(item, "content", None)) or ():
                if type(part) is dict:
                    part_type, text, refusal = part.get("type"), part.get("text"), part.get("refusal")
                else:
                    part_type = getattr(part, "type", None)
                    text, refusal = getattr(part, "text", None), getattr(part, "refusal", None)
                if part_type == "output_text":
                    texts.append(text or "")
                elif part_type == "refusal":
                    refusals.append(refusal or "")
        elif kind == "function_call":
            calls.append({"id": item.get("call_id"), "name": item.get("name"), "arguments": item.get("arguments")} if is_dict
                         else {"id": getattr(item, "call_id", None), "name": getattr(item, "name", None),
                               "arguments": getattr(item, "arguments", None)})
    finish = "tool_calls" if calls else "length" if incomplete else "stop"
    return LLMResponse(content="".join(texts) if texts else None, tool_calls=calls, model=model, finish_reason=finish,
                       id=response_id, refusal="".join(refusals) if refusals else None, **_usage(usage))


def output_items(response: LLMResponse, message_id: str) -> list[dict[str, Any]]:
    """``response`` as Responses-format output items (dicts): a message, then its function calls."""
    parts: list[dict[str, Any]] = []
    if response.content or not (response.refusal or response.tool_calls):
        parts.append({"type": "output_text", "text": response.content or "", "annotations": [], "logprobs": []})
    if response.refusal:
        parts.append({"type": "refusal", "refusal": response.refusal})
    items: list[dict[str, Any]] = []
    if parts:
        items.append({"id": message_id, "type": "message", "role": "assistant", "status": "completed", "content": parts})
    for call in response.tool_calls:
        arguments = call.get("arguments")
        items.append({"type": "function_call", "status": "completed", "call_id": call.get("id"), "name": call.get("name"),
                      "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {})})
    return items


def _usage_dict(response: LLMResponse) -> dict[str, Any]:
    return usage_body(response.input_tokens or 0, response.output_tokens or 0, cached=response.cache_read_input_tokens or 0,
                      cache_write=response.cache_creation_input_tokens or 0,
                      reasoning=response.reasoning_output_tokens or 0)


def _construct(type_: Any, value: Any) -> Any:
    """``value`` (JSON data) as the openai type the client would have parsed it into."""
    from openai._models import construct_type

    return construct_type(type_=type_, value=value)


def _fake_id() -> str:
    from agents.models.fake_id import FAKE_RESPONSES_ID

    return FAKE_RESPONSES_ID


def _message_id(output: Sequence[Any]) -> str:
    """The id of the message in ``output`` (an answer rebuilt from a real one keeps it), else the SDK's placeholder."""
    return next((str(_get(i, "id")) for i in output if _get(i, "type") == "message" and _get(i, "id")), None) or _fake_id()


#: The most system messages a run remembers (then it starts again).
_SYSTEMS_MAX = 64


def _system(text: Any, run: RunScope | None) -> dict[str, Any]:
    """The system message of an agent's instructions; inside ``run`` one :class:`SharedMessage` per
    text, so each agent's prompts start with the same message (messages.encode_messages keys a
    conversation's last prompt by it)."""
    if run is None or type(text) is not str:
        return {"role": "system", "content": text}
    systems = run.caches.get("openai-agents.system")
    if systems is None or len(systems) >= _SYSTEMS_MAX:
        systems = run.caches["openai-agents.system"] = {}
    message = systems.get(text)
    if message is None:
        message = systems[text] = SharedMessage(role="system", content=text)
    return message


class ModelCodec:
    """``Model.get_response`` requests (system instructions and Responses input items) and
    ``ModelResponse`` answers, in neutral form."""

    provider = "openai"

    def model(self, instance: Any, args: tuple, kwargs: dict) -> str | None:
        model = getattr(instance, "model", None)
        return model if isinstance(model, str) else None

    def request_attributes(self, instance: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
        settings = _arg(args, kwargs, "model_settings")
        params = {name: getattr(settings, name, None) for name in _SETTINGS}
        client = getattr(instance, "_client", None)
        base_url = getattr(client, "base_url", None) or getattr(instance, "base_url", None)
        return {**sc.request_attributes(params), **sc.server_attributes(base_url),
                sc.PROVIDER: sc.provider_name(base_url, provider_of(instance))}

    def request(self, args: tuple, kwargs: dict) -> list[dict[str, Any]]:
        system = _arg(args, kwargs, "system_instructions")
        items = _arg(args, kwargs, "input")
        run = current_run()
        messages = [_system(system, run)] if system else []
        if isinstance(items, str):
            return [*messages, {"role": "user", "content": items}]
        return [*messages, *input_messages(items or (), run)]

    def with_request(self, args: tuple, kwargs: dict, messages: Sequence[ChatMessage]) -> tuple[tuple, dict]:
        """The call with ``messages`` as its instructions and input: an input item whose message is
        unchanged is kept as it was, the others are rebuilt (items with no message, reasoning, are left out)."""
        items = _arg(args, kwargs, "input")
        originals = [(item, m) for item, m in ((i, item_message(i)) for i in ([] if isinstance(items, str) else items or ()))
                     if m is not None]
        system = [m for m in messages if m.get("role") == "system"]
        rest = [m for m in messages if m.get("role") != "system"]
        rebuilt = [originals[i][0] if i < len(originals) and originals[i][1] == m else _input_item(m)
                   for i, m in enumerate(rest)]
        instructions = "\n".join(str(m.get("content") or "") for m in system) or None
        args, kwargs = _with_arg(args, kwargs, "system_instructions", instructions)
        return _with_arg(args, kwargs, "input", rebuilt)

    def response(self, raw: Any) -> LLMResponse:
        return read_output(raw.output, raw.usage, raw.response_id)

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        from agents.items import ModelResponse
        from agents.usage import Usage
        from openai.types.responses import ResponseOutputItem, ResponseUsage

        output = [_construct(ResponseOutputItem, item)
                  for item in output_items(response, _message_id(raw.output if raw is not None else ()))]
        usage = _construct(ResponseUsage, _usage_dict(response))
        return ModelResponse(output=output, response_id=response.id,
                             request_id=getattr(raw, "request_id", None),
                             usage=Usage(requests=1, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                         total_tokens=usage.total_tokens, input_tokens_details=usage.input_tokens_details,
                                         output_tokens_details=usage.output_tokens_details))


def _input_item(message: ChatMessage) -> list[dict[str, Any]] | dict[str, Any]:
    """A neutral message as the Responses input item the SDK would send for it."""
    role = message.get("role")
    if role == "tool":
        return {"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": message.get("content") or ""}
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        call = calls[0]  # item_message makes one message per function call
        arguments = call.get("arguments")
        return {"type": "function_call", "call_id": call.get("id"), "name": call.get("name"),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {})}
    return {"role": role or "user", "content": message.get("content") or ""}


class StreamCodec(ModelCodec):
    """``Model.stream_response``: its answer the Responses stream events, read at ``response.completed``."""

    def from_chunks(self, chunks: Sequence[Any]) -> LLMResponse:
        last = next((c for c in reversed(chunks) if _get(c, "type") in _TERMINAL), None)
        if last is not None and _get(last, "response") is not None:
            response = last.response
            return read_output(response.output or [_get(c, "item") for c in chunks
                                                   if _get(c, "type") == "response.output_item.done"],
                               response.usage, response.id, response.model,
                               incomplete=_get(last, "type") == "response.incomplete")
        return read_output([c.item for c in chunks if _get(c, "type") == "response.output_item.done"], None, None)

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        from openai.types.responses import ResponseStreamEvent

        body = response_body(response.id or _fake_id(), response.model or "", output_items(response, _fake_id()),
                             _usage_dict(response))
        return [_construct(ResponseStreamEvent, event) for event in stream_events(body)]

    def is_last(self, chunk: Any) -> bool:
        return _get(chunk, "type") in _TERMINAL


def provider_of(model: Any) -> str:
    """``gen_ai.provider.name`` of a ``Model`` whose endpoint names no well-known provider: LiteLLM's
    and any-llm's by their model's prefix (``anthropic/claude-...``), the SDK's OpenAI models
    ``openai``, a user's own by its class name."""
    module = type(model).__module__
    name = getattr(model, "model", None)
    if "litellm" in module or "any_llm" in module:
        prefix = name.split("/", 1)[0] if isinstance(name, str) and "/" in name else ""
        return prefix or ("litellm" if "litellm" in module else "any_llm")
    if module.startswith("agents."):
        return "openai"
    return type(model).__name__.removesuffix("Model").lower() or type(model).__name__.lower()


class ModelSeam:
    """Wrappers of every ``Model`` class's ``get_response``/``stream_response``, traced inside runs of ``framework``."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.codec = ModelCodec()
        self.stream_codec = StreamCodec()
        self._patched: set[tuple[type, str]] = set()

    def sync(self, patcher: Patcher) -> None:
        """Patch the ``Model`` classes not patched yet (classes defined since: a user's own model)."""
        from agents.models.interface import Model

        for cls in subclasses(Model):
            self._patch(patcher, cls, "get_response", self._get_response)
            self._patch(patcher, cls, "stream_response", self._stream_response)

    def _patch(self, patcher: Patcher, cls: type, name: str, wrapper: Callable[..., Any]) -> None:
        func = vars(cls).get(name)
        if func is None or (cls, name) in self._patched or getattr(func, "__isabstractmethod__", False):
            return
        patcher.wrap(cls, name, wrapper)
        self._patched.add((cls, name))

    def clear(self) -> None:
        """Forget the patched classes (the patcher restored them)."""
        self._patched.clear()

    def _probe(self) -> "Probe | None":
        run = current_run()
        if run is None or run.framework != self.framework or not run.probe.active or in_llm_call():
            return None
        return run.probe

    async def _get_response(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        return await acall_llm(probe, self.codec, wrapped, instance, args, kwargs)

    def _stream_response(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return wrapped(*args, **kwargs)
        return self._events(probe, wrapped, instance, args, kwargs)

    async def _events(self, probe: "Probe", wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> AsyncIterator[Any]:
        """The stream's events through the seam: as they come, or (interceptors) the whole answer's."""

        async def start(*call_args: Any, **call_kwargs: Any) -> Any:
            return wrapped(*call_args, **call_kwargs)

        stream = await acall_llm_chunks(probe, self.stream_codec, start, instance, args, kwargs)
        try:
            async for event in stream:
                yield event
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
