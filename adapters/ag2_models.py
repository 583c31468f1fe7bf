"""AG2's model clients as its model-call seam.

``OpenAIWrapper.create`` walks its clients (one per ``config_list`` entry, whatever its
``api_type``: ``OpenAIClient``, ``AnthropicClient``, ``GeminiClient``, ... or a user's
``model_client_cls`` registered with ``register_model_client``) and calls each one's
``create(params)``: the one place every model request passes through. Every client follows ag2's
``ModelClient`` protocol, a protocol rather than a base class, so the seam patches, at class level,
the class that defines the ``create`` of each client it meets: those of the agents an app
registers, and any other when a wrapper's ``create`` runs inside a run. ``params`` are
OpenAI-style (``messages``, ``model``, ``tools``...); a response is ``ChatCompletion``-like
(``choices[0].message``, ``usage``), which is read and, for a replayed or injected answer,
rebuilt: usage read as OpenAI's (cached and reasoning tokens from its details); the client's own response type when it is a pydantic model, else the ``ChatCompletion``
of the openai SDK (``OpenAIClient``) or of ag2 (``autogen.oai.oai_models``, every other client).

A streamed call (``stream=True``) reaches the app as ``StreamEvent`` text deltas sent to ag2's
``IOStream`` while the client reads the provider's stream; the tool calls and the usage come in
the ``ChatCompletion`` the client returns. With interceptors (replay, injection) the call's live
events are held until they decided: the same events, or the text deltas of the new answer, are
then sent. A response AG2 serves from its cache (``cache_seed``) calls no client: no ``chat`` span.
"""

from __future__ import annotations

import copy
import operator
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Patcher, call_arg
from aegis_probe.capture.interception import LLMResponse, call_llm
from aegis_probe.capture.messages import SharedMessage, content_text
from aegis_probe.capture.openai_shape import completion_usage, openai_messages, openai_tool_calls
from aegis_probe.capture.spans import ChatMessage, RunScope, current_run, in_llm_call, log_hook_error
from aegis_probe.capture.usage import openai_usage

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

#: ``gen_ai.provider.name`` of ag2's own clients, by class name; any other client: its class name.
PROVIDERS = {
    "OpenAIClient": "openai", "OpenAIResponsesClient": "openai", "AnthropicClient": "anthropic",
    "GeminiClient": "gcp.gemini", "BedrockClient": "aws.bedrock", "MistralAIClient": "mistral_ai",
    "GroqClient": "groq", "CohereClient": "cohere", "TogetherClient": "together_ai", "OllamaClient": "ollama",
    "CerebrasClient": "cerebras",
}
#: The finish reasons a ``ChatCompletion`` takes (both the openai SDK's and ag2's).
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


def to_neutral(message: Any, role: str = "user") -> dict[str, Any]:
    """A neutral message of an ag2 message (an OpenAI-style dict, or a string)."""
    if not isinstance(message, dict):
        return {"role": role, "content": content_text(message)}
    out: dict[str, Any] = {"role": message.get("role") or role, "content": content_text(message.get("content"))}
    if out["role"] == "function":
        out["role"] = "tool"
    if message.get("name"):
        out["name"] = message["name"]
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [{"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                              "arguments": (c.get("function") or {}).get("arguments")} for c in calls]
    elif isinstance(message.get("function_call"), dict):  # the legacy form of one tool call
        call = message["function_call"]
        out["tool_calls"] = [{"id": None, "name": call.get("name"), "arguments": call.get("arguments")}]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    responses = message.get("tool_responses")
    if responses and not out["content"]:
        out["content"] = "\n".join(content_text(r.get("content")) for r in responses if isinstance(r, dict))
    return out


#: The most ag2 messages a run remembers converted (then it starts again).
_SEEN_MAX = 4096


def _snapshot(message: Any) -> Any:
    """``message`` as it is now, to tell a message changed in place since (nested lists and dicts copied)."""
    if not isinstance(message, dict):
        return message
    return {k: copy.deepcopy(v) if isinstance(v, (list, dict)) else v for k, v in message.items()}


#: The most message lists a run remembers converted, by their first message (then it starts again).
_LISTS_MAX = 64


def neutral_messages(messages: Sequence[Any], run: RunScope | None = None) -> list[dict[str, Any]]:
    """Neutral messages of ag2 messages, inside a run as :class:`SharedMessage`s converted once.

    ag2 keeps a conversation's message dicts and sends them again on every call: each is converted
    once per run (while equal to its snapshot), so a call or a step costs its new messages, and
    the same shared messages keep their JSON and let a prompt's be reused (messages.encode_messages).
    A list that extends the last one starting with the same message (a prompt: the conversation so
    far) is checked against it in C (the same dicts, each still equal to its snapshot): only its
    new messages are looked at one by one. ``run``: the current run, when the caller has it.
    """
    if run is None:
        run = current_run()
    if run is None:
        return [to_neutral(m) for m in messages]
    caches = run.caches
    seen = caches.get("ag2.messages")
    if seen is None or len(seen) > _SEEN_MAX:
        seen = caches["ag2.messages"] = {}
        lists = caches["ag2.lists"] = {}
    else:
        lists = caches["ag2.lists"]
    msgs = messages if type(messages) is list else list(messages)
    if not msgs:
        return []
    last = lists.get(id(msgs[0]))
    done = 0
    if last is not None:
        raw, snapshots, out = last
        n = len(raw)
        if len(msgs) >= n and all(map(operator.is_, msgs, raw)) and snapshots == msgs[:n]:
            done, out, snapshots = n, out[:], snapshots[:]
    if not done:
        out, snapshots = [], []
    for m in msgs[done:] if done else msgs:
        hit = seen.get(id(m))
        if hit is None or hit[0] is not m or hit[1] != m:
            hit = seen[id(m)] = (m, _snapshot(m), SharedMessage(to_neutral(m)))
        snapshots.append(hit[1])
        out.append(hit[2])
    if len(lists) >= _LISTS_MAX:
        lists.clear()
    lists[id(msgs[0])] = (msgs[:], snapshots, out)
    return out[:]


def _field(obj: Any, name: str) -> Any:
    """``obj.name``, or ``obj[name]`` of a dict (clients' responses mix both)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


#: What a response, its first choice and that choice's message are read for (:func:`_fields`).
_RESPONSE_FIELDS = ("choices", "usage", "model", "id")
_CHOICE_FIELDS = ("message", "finish_reason")
_MESSAGE_FIELDS = ("content", "tool_calls", "function_call", "refusal")


def _fields(obj: Any, names: tuple[str, ...]) -> list[Any]:
    """``[_field(obj, name) for name in names]`` in one call."""
    if isinstance(obj, dict):
        return list(map(obj.get, names))
    return [getattr(obj, name, None) for name in names]


def _tool_call(call: Any) -> dict[str, Any] | None:
    function = _field(call, "function")
    if function is None:
        return None
    return {"id": _field(call, "id"), "name": _field(function, "name"), "arguments": _field(function, "arguments")}


def _endpoint(client: Any) -> Any:
    """The base URL of the SDK client an ag2 model client holds, if it tells."""
    for attr in ("_oai_client", "_client", "client"):
        url = getattr(getattr(client, attr, None), "base_url", None)
        if url:
            return url
    return getattr(client, "base_url", None)


def stream_pieces(text: str) -> list[str]:
    """``text`` as the text deltas of a stream: word by word, each after the first with its space."""
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class _HeldStream:
    """An ag2 ``IOStream`` holding the ``StreamEvent``s a client sends (the rest passes to ``target``)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.held: list[Any] = []

    def send(self, message: Any) -> None:
        from autogen.events.client_events import StreamEvent

        if isinstance(message, StreamEvent):
            self.held.append(message)
        else:
            self.target.send(message)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.target.print(*objects, **kwargs)

    def input(self, prompt: str = "", *, password: bool = False) -> Any:
        return self.target.input(prompt, password=password)

    def release(self) -> None:
        """Send the held events on, once."""
        held, self.held = self.held, []
        for event in held:
            self.target.send(event)


class ModelClientCodec:
    """One ``client.create(params)`` call of an ag2 model client (``instance``)."""

    def __init__(self, client: Any, stream: _HeldStream | None = None) -> None:
        self.client = client
        self.provider = PROVIDERS.get(type(client).__name__, type(client).__name__)
        #: A streamed call's held live events (None: not streamed, or nothing to hold)
        self.stream = stream
        self.replaced = False  #: whether :meth:`with_response` built the app's answer

    @staticmethod
    def _params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        params = call_arg(args, kwargs, "params", 0)
        return params if isinstance(params, dict) else {}

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        model = self._params(args, kwargs).get("model")
        return model if isinstance(model, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        url = _endpoint(instance)
        return {**sc.request_attributes(self._params(args, kwargs)), **sc.server_attributes(url),
                sc.PROVIDER: sc.provider_name(url, self.provider)}

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        return neutral_messages(self._params(args, kwargs).get("messages") or ())

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        params = {**self._params(args, kwargs), "messages": openai_messages(messages)}
        return ((params, *args[1:]), kwargs) if "params" not in kwargs else (args, {**kwargs, "params": params})

    def response(self, raw: Any) -> LLMResponse:
        choices, usage, model, response_id = _fields(raw, _RESPONSE_FIELDS)
        message, finish_reason = _fields(choices[0], _CHOICE_FIELDS) if choices else (None, None)
        content, tool_calls, legacy, refusal = _fields(message, _MESSAGE_FIELDS)
        calls = [c for c in map(_tool_call, tool_calls) if c is not None] if tool_calls else []
        if not calls and legacy is not None:
            calls = [{"id": None, "name": _field(legacy, "name"), "arguments": _field(legacy, "arguments")}]
        if usage is None:  # a user's client may count tokens in get_usage only
            try:
                usage = self.client.get_usage(raw)
            except Exception:
                usage = None
        return LLMResponse(
            content=content if content is None or isinstance(content, str) else content_text(content),
            tool_calls=calls,
            **openai_usage(usage),
            model=model,
            finish_reason=finish_reason,
            id=response_id,
            refusal=refusal if isinstance(refusal, str) else None,
        )

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        calls = openai_tool_calls(response.tool_calls)
        message: dict[str, Any] = {"role": "assistant", "content": response.content}
        if response.refusal:
            message["refusal"] = response.refusal
        if calls:
            message["tool_calls"] = calls
        finish = response.finish_reason if response.finish_reason in FINISH_REASONS else "tool_calls" if calls else "stop"
        cls: Any = type(raw) if hasattr(raw, "model_dump") and hasattr(raw, "choices") else self._completion_type()
        base = raw.model_dump() if raw is not None and isinstance(raw, cls) else {
            "id": response.id or "aegis-replayed", "object": "chat.completion", "created": int(time.time()),
            "model": response.model or "aegis"}
        base.update(choices=[{"index": 0, "message": message, "finish_reason": finish}], usage=completion_usage(response))
        built = cls.model_validate(base)
        self.replaced = True
        if self.stream is not None:
            self._send_text(response.content)
        return built

    def _completion_type(self) -> Any:
        """The ``ChatCompletion`` class the client's own answers are: the openai SDK's for ag2's
        ``OpenAIClient``, ag2's own otherwise (no openai needed)."""
        if type(self.client).__name__ == "OpenAIClient":
            from openai.types.chat import ChatCompletion

            return ChatCompletion
        from autogen.oai import oai_models

        return oai_models.ChatCompletion

    def _send_text(self, text: str | None) -> None:
        """The new answer's text to the app's stream, as the client sends a live one's deltas."""
        from autogen.events.client_events import StreamEvent

        assert self.stream is not None
        self.stream.held = []
        for piece in stream_pieces(text) if text else ():
            self.stream.target.send(StreamEvent(content=piece))


class ModelClientSeam:
    """Wrappers for the ``create`` of ag2 model clients called inside runs of ``framework``."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self._patcher: Patcher | None = None
        self._covered: set[type] = set()  #: client classes looked at (their ``create`` owner wrapped)
        self._lock = threading.Lock()

    def install(self, patcher: Patcher) -> None:
        from autogen.oai.client import OpenAIClient, OpenAIWrapper

        self._patcher = patcher
        patcher.wrap(OpenAIWrapper, "create", self._wrapper_create)
        self._cover_class(OpenAIClient)

    def reset(self) -> None:
        """Forget the classes covered (their patches were restored)."""
        with self._lock:
            self._patcher = None
            self._covered.clear()

    def cover(self, wrapper: Any) -> None:
        """Wrap the ``create`` of each client class ``wrapper`` (an ``OpenAIWrapper``) holds."""
        for client in list(getattr(wrapper, "_clients", None) or ()):
            if type(client) not in self._covered:
                self._cover_class(type(client))

    def _cover_class(self, cls: type) -> None:
        with self._lock:
            if self._patcher is None or cls in self._covered:
                return
            self._covered.add(cls)
            owner = next((c for c in cls.__mro__ if "create" in vars(c)), None)
            if owner is not None and owner is not object and callable(vars(owner)["create"]):
                self._patcher.wrap(owner, "create", self._client_create)

    def _probe(self) -> "Probe | None":
        run = current_run()
        if run is None or run.framework != self.framework or not run.probe.active or in_llm_call():
            return None
        return run.probe

    def _wrapper_create(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        """``OpenAIWrapper.create`` inside a run: its clients' classes covered before it walks them."""
        if self._probe() is not None:
            try:
                self.cover(instance)
            except Exception:
                log_hook_error("ag2 model clients")
        return wrapped(*args, **kwargs)

    def _client_create(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return wrapped(*args, **kwargs)
        params = call_arg(args, kwargs, "params", 0)
        if not (probe.interceptors and isinstance(params, dict) and params.get("stream")):
            return call_llm(probe, ModelClientCodec(instance), wrapped, instance, args, kwargs)
        return self._held_stream_call(probe, wrapped, instance, args, kwargs)

    @staticmethod
    def _held_stream_call(probe: "Probe", wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        """A streamed call with interceptors: its live ``StreamEvent``s held until they decided."""
        from autogen.io.base import IOStream

        held = _HeldStream(IOStream.get_default())
        codec = ModelClientCodec(instance, held)

        def live(*a: Any, **k: Any) -> Any:
            with IOStream.set_default(held):  # type: ignore[arg-type]
                return wrapped(*a, **k)

        try:
            return call_llm(probe, codec, live, instance, args, kwargs)
        finally:
            if not codec.replaced:
                held.release()
