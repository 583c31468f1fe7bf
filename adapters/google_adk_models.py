"""Google ADK's model abstraction as the LLM-call seam: ``BaseLlm.generate_content_async(llm_request,
stream)``, an async generator of ``LlmResponse`` (one, or a streamed call's partial ones then the
whole), read and rebuilt through a chunk codec.

Neutral messages of an ``LlmRequest``: its system instruction first, then each ``types.Content``:
a ``user`` content's text as a user message and each of its function responses as a tool message
(``tool_call_id`` the call's id), a ``model`` content as an assistant message with its text and its
function calls as tool calls.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import call_arg
from aegis_probe.capture.interception import LLMResponse, text_pieces
from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import SharedMessage
from aegis_probe.capture.spans import current_run

#: ``types.FinishReason`` names that OpenAI (the value the other adapters record) calls otherwise.
_FINISH_TO_OPENAI = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter"}
_FINISH_FROM_OPENAI = {v: k for k, v in _FINISH_TO_OPENAI.items()}
#: ``GenerateContentConfig`` fields under OpenAI's names, as ``sc.request_attributes`` reads them.
_CONFIG_NAMES = {"temperature": "temperature", "top_p": "top_p", "max_output_tokens": "max_tokens",
                 "stop_sequences": "stop", "seed": "seed", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json_text(value)


def content_messages(content: Any) -> list[dict[str, Any]]:
    """The neutral messages of one ``types.Content`` (a part without text, call or response as ``[its kind]``)."""
    parts = list(getattr(content, "parts", None) or ())
    texts = [p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", None)]
    if getattr(content, "role", None) == "model":
        message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
        calls = [{"id": p.function_call.id, "name": p.function_call.name, "arguments": json_text(p.function_call.args or {})}
                 for p in parts if getattr(p, "function_call", None) is not None]
        if calls:
            message["tool_calls"] = calls
        return [message]
    out: list[dict[str, Any]] = [{"role": "tool", "content": _text(p.function_response.response),
                                  "tool_call_id": p.function_response.id}
                                 for p in parts if getattr(p, "function_response", None) is not None]
    others = [f"[{_kind(p)}]" for p in parts if _kind(p) not in ("text", "function_response", "thought")]
    if texts or others or not out:
        out.insert(0, {"role": "user", "content": "\n".join(texts + others)})
    return out


def _kind(part: Any) -> str:
    if getattr(part, "thought", None):
        return "thought"
    for kind in ("text", "function_call", "function_response", "inline_data", "file_data", "executable_code"):
        if getattr(part, kind, None) is not None:
            return kind
    return "part"


def _system(request: Any) -> str | None:
    instruction = getattr(getattr(request, "config", None), "system_instruction", None)
    if instruction is None or isinstance(instruction, str):
        return instruction
    texts = [getattr(p, "text", None) for p in getattr(instruction, "parts", None) or ()]
    return "\n".join(t for t in texts if t) or None


# ADK builds every request's contents anew from the session's events (deep copies: new ``Content``
# and ``Part`` objects each call), so a content's neutral messages are kept per run keyed by its
# value (role; each part's text, thought flag, and function call or response: id, name and the
# ``repr`` of its arguments or response), as ``SharedMessage``s: the same objects in every request
# of the run, so a prompt's JSON extends the last one (messages.encode_messages). A content with
# other parts (inline data, files, code) is converted every time. Kept in the run's caches
# (``RunScope.caches``), let go of when it ends.
_Shared = dict[tuple[Any, ...], list[SharedMessage]]
_SHARED_MAX = 4096  # contents per run


#: A part that is no text, function call or response: its content is not kept.
_OTHER = object()


def _content_key(content: Any) -> tuple[Any, ...]:
    """``content`` by value (``_OTHER`` among its items when a part is no text, call or response)."""
    return (content.role, *[
        _OTHER if p.text is None and c is None and r is None
        else (p.text, p.thought, c and (c.id, c.name, repr(c.args)), r and (r.id, r.name, repr(r.response)))
        for p in content.parts or () for c, r in ((p.function_call, p.function_response),)])


def _shared(shared: _Shared, key: tuple[Any, ...], messages: list[dict[str, Any]]) -> list[SharedMessage]:
    if len(shared) >= _SHARED_MAX:
        shared.clear()
    out = shared[key] = [SharedMessage(m) for m in messages]
    return out


def request_messages(request: Any) -> list[dict[str, Any]]:
    """Neutral messages of an ``LlmRequest``: its system instruction, then its contents (inside a
    run: each content converted once, its messages shared)."""
    system = _system(request)
    contents = getattr(request, "contents", None) or ()
    run = current_run()
    if run is None:
        out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for content in contents:
            out.extend(content_messages(content))
        return out
    shared: _Shared | None = run.caches.get(_CACHE)
    if shared is None:
        shared = run.caches[_CACHE] = {}
    out = []
    if system:
        key: tuple[Any, ...] | None = ("system", system)
        out.extend(shared.get(key) or _shared(shared, key, [{"role": "system", "content": system}]))  # type: ignore[arg-type]
    for content in contents:
        try:
            key = _content_key(content)
        except AttributeError:  # not a genai Content
            key = None
        if key is None or _OTHER in key:
            out.extend(content_messages(content))
            continue
        hit = shared.get(key)
        out.extend(hit if hit is not None else _shared(shared, key, content_messages(content)))
    return out


_CACHE = "google-adk.contents"


def _response_data(text: str) -> dict[str, Any]:
    """A function response's ``response`` dict from its neutral text (JSON object, else ``{"result": text}``)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {"result": text}
    return data if isinstance(data, dict) else {"result": data}


def _model_content(content: str | None, tool_calls: Sequence[dict[str, Any]]) -> Any:
    from google.genai import types

    parts = [types.Part(text=content)] if content else []
    for call in tool_calls:
        args = call.get("arguments")
        args = _response_data(args) if isinstance(args, str) and args else (args or {})
        parts.append(types.Part(function_call=types.FunctionCall(id=call.get("id"), name=call.get("name"), args=args)))
    return types.Content(role="model", parts=parts)


def _contents(neutral: Sequence[Any]) -> tuple[str | None, list[Any]]:
    """The system instruction and ``types.Content`` list carrying ``neutral`` messages (tool results
    after each other in one user content, as ADK sends them)."""
    from google.genai import types

    system: str | None = None
    names: dict[Any, str] = {}
    out: list[Any] = []
    for message in neutral:
        role, text = message.get("role"), message.get("content")
        if role == "system":
            system = str(text or "")
        elif role == "assistant":
            calls = list(message.get("tool_calls") or ())
            names.update((c.get("id"), str(c.get("name"))) for c in calls)
            out.append(_model_content(text, calls))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            part = types.Part(function_response=types.FunctionResponse(
                id=call_id, name=names.get(call_id, ""), response=_response_data(str(text or ""))))
            if out and out[-1].role == "user" and all(p.function_response is not None for p in out[-1].parts or ()):
                out[-1].parts.append(part)
            else:
                out.append(types.Content(role="user", parts=[part]))
        else:
            out.append(types.Content(role="user", parts=[types.Part(text=str(text or ""))]))
    return system, out


def response_message(response: Any) -> dict[str, Any]:
    """The neutral assistant message of an ``LlmResponse`` (or an ``Event``, which is one)."""
    content = getattr(response, "content", None)
    if content is None:
        return {"role": "assistant", "content": getattr(response, "error_message", None)}
    return content_messages(content.model_copy(update={"role": "model"}))[0]


def _finish(reason: Any) -> str | None:
    name = getattr(reason, "name", reason)
    return None if name is None else _FINISH_TO_OPENAI.get(str(name), str(name).lower())


class ADKCodec:
    """``BaseLlm.generate_content_async(llm_request, stream)`` and its ``LlmResponse`` chunks."""

    provider = "google_adk"

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        request = call_arg(args, kwargs, "llm_request", 0)
        name = getattr(request, "model", None) or getattr(instance, "model", None)
        return name if isinstance(name, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        config = getattr(call_arg(args, kwargs, "llm_request", 0), "config", None)
        params = {name: getattr(config, field, None) for field, name in _CONFIG_NAMES.items()}
        url = _base_url(instance)
        attrs = {**sc.request_attributes(params), **sc.server_attributes(url)}
        attrs[sc.PROVIDER] = sc.provider_name(url, _provider(instance))
        return attrs

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        return request_messages(call_arg(args, kwargs, "llm_request", 0))

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        request = call_arg(args, kwargs, "llm_request", 0)
        system, contents = _contents(messages)
        config = request.config.model_copy(update={"system_instruction": system})
        rebuilt = request.model_copy(update={"contents": contents, "config": config})
        if "llm_request" in kwargs:
            return args, {**kwargs, "llm_request": rebuilt}
        return (rebuilt, *args[1:]), kwargs

    def response(self, raw: Any) -> LLMResponse:
        message = response_message(raw)
        usage = getattr(raw, "usage_metadata", None)
        return LLMResponse(
            content=message["content"], tool_calls=message.get("tool_calls", []),
            input_tokens=getattr(usage, "prompt_token_count", None), output_tokens=getattr(usage, "candidates_token_count", None),
            model=getattr(raw, "model_version", None), finish_reason=_finish(getattr(raw, "finish_reason", None)),
        )

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        from google.adk.models.llm_response import LlmResponse
        from google.genai import types

        finish = response.finish_reason
        fields: dict[str, Any] = {
            "content": _model_content(response.content, response.tool_calls),
            "usage_metadata": types.GenerateContentResponseUsageMetadata(
                prompt_token_count=response.input_tokens, candidates_token_count=response.output_tokens),
            "finish_reason": None if finish is None else _finish_reason(finish),
            "partial": False,
        }
        if response.model:
            fields["model_version"] = response.model
        return LlmResponse(**fields) if raw is None else raw.model_copy(update=fields)

    # -- a streamed call's chunks ----------------------------------------------------------
    def from_chunks(self, chunks: Sequence[Any]) -> LLMResponse:
        """A streamed call's last whole response (partial ones precede it), else its partial texts joined."""
        whole = [c for c in chunks if not getattr(c, "partial", None)]
        if whole:
            return self.response(whole[-1])
        text = "".join(t for c in chunks for t in [response_message(c).get("content")] if t)
        return LLMResponse(content=text or None)

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        return [self.with_response(None, response)]

    def is_last(self, chunk: Any) -> bool:
        return False  # a call may yield more than one whole response: the span ends with the stream


class StreamedADKCodec(ADKCodec):
    """A streamed call's (``stream=True``: ``RunConfig(streaming_mode=SSE)``) chunks as ADK's models
    yield them: a replayed or injected answer's text word by word in partial responses, then the
    whole response (tool calls, usage, finish reason), not partial."""

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        from google.adk.models.llm_response import LlmResponse

        partial = [LlmResponse(content=_model_content(piece, ()), partial=True) for piece in text_pieces(response.content)]
        return [*partial, self.with_response(None, response)]


def _finish_reason(openai_name: str) -> Any:
    from google.genai import types

    name = _FINISH_FROM_OPENAI.get(openai_name, openai_name.upper())
    return types.FinishReason[name] if name in types.FinishReason.__members__ else types.FinishReason.OTHER


def _base_url(instance: Any) -> Any:
    """The endpoint of a model: LiteLlm's ``api_base``, else a ``base_url`` the model class keeps."""
    extra = getattr(instance, "_additional_args", None)
    if isinstance(extra, dict) and extra.get("api_base"):
        return extra["api_base"]
    return getattr(instance, "base_url", None)


def _provider(instance: Any) -> str:
    """``gen_ai.provider.name`` by the model class: LiteLlm's provider prefix, Gemini's, else ADK's own."""
    kind = type(instance).__name__
    model = getattr(instance, "model", None)
    if kind == "LiteLlm" and isinstance(model, str) and "/" in model:
        return model.split("/", 1)[0]
    if kind in ("Gemini", "Gemma"):
        return "gcp.gemini"
    if kind in ("AnthropicLlm", "Claude"):
        return "anthropic"
    return ADKCodec.provider
