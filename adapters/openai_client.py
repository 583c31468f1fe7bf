"""The openai client's chat-completions call as a model-call seam, for adapters whose framework
calls the openai SDK itself (OpenAI Agents SDK, AG2): ``Completions.create`` /
``AsyncCompletions.create`` inside a run of that framework go through
:func:`~aegis_probe.capture.interception.call_llm` / ``acall_llm``.

Streamed calls (``stream=True``) go through :func:`~aegis_probe.capture.interception.call_llm_chunks` /
``acall_llm_chunks`` (chunks as ``ChatCompletionChunk``s). Calls through the client's
``with_raw_response`` (CrewAI's OpenAI provider) are read through the raw response's (cached)
``parse()``; a replayed or injected answer reaches the caller rebuilt as the raw response it asked
for (:func:`as_raw_response`: the body, status 200, no provider headers). Not a framework adapter: no entry in
``ADAPTERS``. Two frameworks that both use this seam should not be instrumented in one process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Patcher
from aegis_probe.adapters.camel import CamelCodec
from aegis_probe.capture.interception import LLMResponse, acall_llm, acall_llm_chunks, call_llm, call_llm_chunks
from aegis_probe.capture.spans import current_run, in_llm_call

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe


class ChatCompletionsCodec(CamelCodec):
    """The openai client's ``chat.completions.create(**kwargs)`` call (OpenAI message dicts and
    ``ChatCompletion``, as :class:`~aegis_probe.adapters.camel.CamelCodec` reads and builds them)."""

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        model = kwargs.get("model")
        return model if isinstance(model, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        url = getattr(getattr(instance, "_client", None), "base_url", None)
        return {**sc.request_attributes(kwargs), **sc.server_attributes(url), sc.PROVIDER: sc.provider_name(url, "openai")}


def _raw_requested(kwargs: dict) -> bool:
    """Whether the call asked for the raw HTTP response (``client.chat.completions.with_raw_response``)."""
    from openai._constants import RAW_RESPONSE_HEADER

    headers = kwargs.get("extra_headers")
    return isinstance(headers, dict) and RAW_RESPONSE_HEADER in headers


def as_raw_response(instance: Any, completion: Any) -> Any:
    """``completion`` as the ``LegacyAPIResponse`` a ``with_raw_response.create`` call returns."""
    from openai import _legacy_response
    from openai._models import FinalRequestOptions
    from openai.types.chat import ChatCompletion

    legacy: Any = _legacy_response
    http = getattr(legacy, "httpx2", None) or legacy.httpx  # the HTTP library of this openai (3.x: httpx2)
    client = instance._client
    request = http.Request("POST", str(client.base_url).rstrip("/") + "/chat/completions")
    body = completion.model_dump(mode="json", exclude_unset=True)
    return _legacy_response.LegacyAPIResponse(raw=http.Response(200, json=body, request=request), cast_to=ChatCompletion,
                                              client=client, stream=False, stream_cls=None,
                                              options=FinalRequestOptions(method="post", url="/chat/completions"))


class RawResponseCodec(ChatCompletionsCodec):
    """A ``with_raw_response`` call of ``instance`` (a ``Completions`` resource): ``LegacyAPIResponse``
    in and out, read through its ``parse()`` (which the response caches for the caller)."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def response(self, raw: Any) -> LLMResponse:
        return super().response(raw.parse())

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        return as_raw_response(self.instance, super().with_response(None if raw is None else raw.parse(), response))


class OpenAIClientSeam:
    """Wrappers for the openai client's chat-completions calls made inside runs of ``framework``."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.codec = ChatCompletionsCodec()

    def install(self, patcher: Patcher, *, sync: bool = True, asynchronous: bool = True) -> None:
        from openai.resources.chat.completions import AsyncCompletions, Completions

        if sync:
            patcher.wrap(Completions, "create", self._create)
        if asynchronous:
            patcher.wrap(AsyncCompletions, "create", self._acreate)

    def _probe(self, kwargs: dict) -> "Probe | None":
        run = current_run()
        if run is None or run.framework != self.framework or not run.probe.active:
            return None
        if in_llm_call():
            return None
        return run.probe

    def _create(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe(kwargs)
        if probe is None:
            return wrapped(*args, **kwargs)
        if kwargs.get("stream") is True:
            return call_llm_chunks(probe, self.codec, wrapped, instance, args, kwargs)
        codec = RawResponseCodec(instance) if _raw_requested(kwargs) else self.codec
        return call_llm(probe, codec, wrapped, instance, args, kwargs)

    async def _acreate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe(kwargs)
        if probe is None:
            return await wrapped(*args, **kwargs)
        if kwargs.get("stream") is True:
            return await acall_llm_chunks(probe, self.codec, wrapped, instance, args, kwargs)
        codec = RawResponseCodec(instance) if _raw_requested(kwargs) else self.codec
        return await acall_llm(probe, codec, wrapped, instance, args, kwargs)
