"""The LLM-call seam every adapter routes model calls through.

An adapter describes a framework's model call with an :class:`LLMCodec` (how to read the request
messages and the response, and how to rebuild them); the core does the rest here: the ``chat``
span, content capture, usage, and the interceptor chain that recording, replay and fault
injection plug into. Interceptors work on neutral data, so one implementation serves every
framework, and injection at this level keeps an agent's own memory and what others see in
agreement.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Protocol, Sequence

from ..errors import AegisProbeError
from .coexist import hide_inside
from .content_events import emit_inference_details
from .messages import answer_of
from .spans import ChatMessage, attached, current_actor, current_run, current_step, iterate_in_scope, iterate_sync_in_scope, log_hook_error, start_llm

if TYPE_CHECKING:
    from .probe import Probe
    from .spans import LLMScope, RunScope


class InterceptAbort(AegisProbeError):
    """Raised by an interceptor to stop the app's call on purpose (e.g. a replay diverged).

    Unlike any other error inside instrumentation, it propagates to the app.
    """


@dataclass
class LLMResponse:
    """A model response in neutral form."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments"}]
    input_tokens: int | None = None  #: every input token, cached ones included (see ``capture.usage``)
    output_tokens: int | None = None
    model: str | None = None
    finish_reason: str | None = None
    id: str | None = None  #: the provider's response id
    #: The model's refusal text (OpenAI's ``message.refusal``): kept apart from ``content``, so a
    #: replay gives it back as a refusal (recorded as a text part marked ``"refusal": true``).
    refusal: str | None = None
    cache_read_input_tokens: int | None = None  #: input tokens read from the provider's prompt cache
    cache_creation_input_tokens: int | None = None  #: input tokens written to it
    reasoning_output_tokens: int | None = None  #: output tokens spent on reasoning
    #: The adapter's neutral form of the answer it read, when it shares one (a ``SharedMessage`` the
    #: step's output and the next prompt hold too): while the answer still reads as it, the chat's
    #: output is encoded from its JSON.
    message: ChatMessage | None = field(default=None, repr=False, compare=False)

    def as_message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.refusal:
            msg["refusal"] = self.refusal
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        shared = self.message is not None and self.message == (msg if self.content else {**msg, "content": ""})
        if self.finish_reason:
            msg["finish_reason"] = self.finish_reason
        return answer_of(self.message, msg) if shared else msg


@dataclass
class ModelCall:
    """One model call as interceptors see it. ``messages`` may be edited in ``before``."""

    run: "RunScope | None"
    agent: str | None
    call_index: int | None
    step_index: int | None
    model: str | None
    messages: list[dict[str, Any]]


class LLMCodec(Protocol):
    """What an adapter knows about one framework's model call."""

    @property
    def provider(self) -> str:
        """``gen_ai.provider.name`` unless :meth:`request_attributes` names one."""

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None: ...

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's ``gen_ai.request.*`` parameters, ``server.address``/``server.port`` and, when
        the client or its endpoint tells, ``gen_ai.provider.name`` (see the ``semconv`` helpers)."""

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """The request's chat messages in neutral form."""

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Arguments for the same call with ``messages`` instead (prompt injection)."""

    def response(self, raw: Any) -> LLMResponse:
        """The neutral form of the framework's response object."""

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        """A framework response object carrying ``response`` (``raw`` is the original, if any)."""


class Interceptor(Protocol):
    """Observes or changes model calls of a run (recording, replay, injection)."""

    def before(self, call: ModelCall) -> LLMResponse | None:
        """Called before the model; may edit ``call.messages``; a returned response skips the model."""

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        """Called with the model's (or the short-circuit) response; returns what the app sees."""


class UnansweredCalls:
    """Interceptor keeping the model calls that reached the model and got no answer (the endpoint
    raised: down, key refused, ...): a run that failed on them says nothing about the app. Enter
    it after interceptors that answer calls themselves (replay), so that only real calls count."""

    def __init__(self) -> None:
        self._pending: dict[int, ModelCall] = {}  # the call kept too: its id is not reused meanwhile

    def before(self, call: ModelCall) -> LLMResponse | None:
        self._pending[id(call)] = call
        return None

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        self._pending.pop(id(call), None)
        return response

    def __len__(self) -> int:
        return len(self._pending)


def _begin(probe: "Probe", codec: LLMCodec, instance: Any, args: tuple, kwargs: dict) -> tuple["LLMScope", ModelCall]:
    # Neutral messages are needed only to capture them (if the span records) or to show them to interceptors.
    request: list[list[dict[str, Any]]] = []

    def messages() -> list[dict[str, Any]]:
        if not request:
            request.append(codec.request(args, kwargs))
        return request[0]

    model = codec.model(instance, args, kwargs)
    step, run = current_step(), current_run()
    actor = None if step else current_actor()  # e.g. a team's manager choosing the next speaker
    agent = step.agent if step else actor.agent if actor else None
    call_index = run.next_call_index(agent or "") if run is not None else None
    scope = start_llm(probe, model, provider=codec.provider, input_messages=messages, agent=agent,
                      call_index=call_index, purpose=actor.purpose if actor else None,
                      attributes=codec.request_attributes(instance, args, kwargs))
    hide_inside(scope, instance)  # another instrumentation of the openai SDK: one span and one count per call
    shown = messages() if probe.interceptors or probe.events is not None else request[0] if request else []
    return scope, ModelCall(run, agent, call_index, step.index if step else None, model, shown)


def _finish(scope: "LLMScope", response: LLMResponse) -> None:
    scope.finish(
        [response.as_message()],
        input_tokens=response.input_tokens,
        output_tokens=response.output_tokens,
        cache_read_input_tokens=response.cache_read_input_tokens,
        cache_creation_input_tokens=response.cache_creation_input_tokens,
        reasoning_output_tokens=response.reasoning_output_tokens,
        response_model=response.model,
        finish_reasons=[response.finish_reason] if response.finish_reason else None,
        response_id=response.id,
    )


def _finish_converted(scope: "LLMScope", convert: Callable[[], LLMResponse]) -> None:
    """End ``scope`` with ``convert()``'s response; a span that records nothing is ended without converting."""
    if scope.span.is_recording():
        _finish(scope, convert())
    else:
        scope.end()


class _Prepared:
    """Span, call record and possibly-rewritten arguments of a call about to run."""

    __slots__ = ("scope", "call", "args", "kwargs", "short_circuit")

    def __init__(self, probe: "Probe", codec: LLMCodec, instance: Any, args: tuple, kwargs: dict) -> None:
        self.scope, self.call = _begin(probe, codec, instance, args, kwargs)
        self.args, self.kwargs, self.short_circuit = args, kwargs, None
        if not probe.interceptors:
            return
        original = self.call.messages
        # interceptors edit copies, never shared messages (nor their tool calls)
        self.call.messages = [{**m, "tool_calls": [dict(c) for c in m["tool_calls"]]} if m.get("tool_calls") else dict(m)
                              for m in original]
        for icpt in probe.interceptors:
            self.short_circuit = icpt.before(self.call)
            if self.short_circuit is not None:
                break
        if self.call.messages != original:
            self.args, self.kwargs = codec.with_request(args, kwargs, self.call.messages)

    def complete(self, probe: "Probe", codec: LLMCodec, raw: Any | None) -> Any:
        if raw is not None and not probe.interceptors and probe.events is None:
            _finish_converted(self.scope, lambda: codec.response(raw))
            return raw
        response = self.short_circuit if raw is None else codec.response(raw)
        changed = raw is None
        for icpt in probe.interceptors:
            new = icpt.after(self.call, response)  # type: ignore[arg-type]
            changed = changed or new is not response
            response = new
        _finish(self.scope, response)  # type: ignore[arg-type]
        if probe.events is not None:
            try:
                emit_inference_details(probe, self.scope, self.call.messages, response)  # type: ignore[arg-type]
            except Exception:
                log_hook_error("content event")
        return codec.with_response(raw, response) if changed else raw  # type: ignore[arg-type]


def _prepare(probe: "Probe", codec: LLMCodec, instance: Any, args: tuple, kwargs: dict) -> _Prepared | None:
    """The prepared call, or None (logged) when instrumentation failed: the app then calls as usual.

    An :class:`InterceptAbort` from an interceptor propagates on purpose.
    """
    try:
        return _Prepared(probe, codec, instance, args, kwargs)
    except InterceptAbort:
        raise
    except Exception:
        log_hook_error("llm call start")
        return None


def call_llm(probe: "Probe", codec: LLMCodec, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """Run a synchronous model call inside a ``chat`` span, through the interceptors."""
    prep = _prepare(probe, codec, instance, args, kwargs)
    if prep is None:
        return wrapped(*args, **kwargs)
    if prep.short_circuit is not None:
        raw = None
    else:
        token = prep.scope.attach()
        try:
            raw = wrapped(*prep.args, **prep.kwargs)
        except BaseException as exc:
            prep.scope.fail(exc)
            raise
        finally:
            prep.scope.detach(token)
    return _complete(prep, probe, codec, raw)


async def acall_llm(
    probe: "Probe", codec: LLMCodec, wrapped: Callable[..., Awaitable[Any]], instance: Any, args: tuple, kwargs: dict
) -> Any:
    """Run an async model call inside a ``chat`` span, through the interceptors."""
    prep = _prepare(probe, codec, instance, args, kwargs)
    if prep is None:
        return await wrapped(*args, **kwargs)
    if prep.short_circuit is not None:
        raw = None
    else:
        token = prep.scope.attach()
        try:
            raw = await wrapped(*prep.args, **prep.kwargs)
        except BaseException as exc:
            prep.scope.fail(exc)
            raise
        finally:
            prep.scope.detach(token)
    return _complete(prep, probe, codec, raw)


async def astream_llm(
    probe: "Probe",
    codec: LLMCodec,
    wrapped: Callable[..., AsyncIterator[Any]],
    instance: Any,
    args: tuple,
    kwargs: dict,
    is_final: Callable[[Any], bool],
    deltas: Callable[[Any], Sequence[Any]] = lambda final: (),
) -> AsyncGenerator[Any, None]:
    """Run a streaming model call (chunks, then the full response) inside a ``chat`` span.

    Without interceptors chunks pass through unchanged, with the span current while each is
    produced. Interceptors see the request and the final response only (the item ``is_final``
    accepts), which they may replace, so with interceptors the stream is read to its end first and
    its chunks held while they decide: then the same items are handed on, or, for a new response
    (also a short-circuit one from ``before``), ``deltas(final)`` and the rebuilt final item.
    """
    prep = _prepare(probe, codec, instance, args, kwargs)
    if prep is None:
        async for item in wrapped(*args, **kwargs):
            yield item
        return
    if prep.short_circuit is not None:
        final = _complete(prep, probe, codec, None)
        for item in deltas(final):
            yield item
        yield final
        return
    scope = prep.scope
    try:
        source = wrapped(*prep.args, **prep.kwargs)
    except BaseException as exc:
        scope.fail(exc)
        raise
    stream = iterate_in_scope(source, scope, on_done=lambda exc: scope.fail(exc) if exc is not None else scope.end())
    try:
        if probe.interceptors:
            for item in await _held_stream(prep, probe, codec, stream, is_final, deltas):
                yield item
            return
        async for item in stream:
            yield _complete(prep, probe, codec, item) if is_final(item) else item
    finally:
        await stream.aclose()


async def _held_stream(prep: _Prepared, probe: "Probe", codec: LLMCodec, stream: AsyncIterator[Any],
                       is_final: Callable[[Any], bool], deltas: Callable[[Any], Sequence[Any]]) -> list[Any]:
    """The items to hand on for ``stream``, read to its end while interceptors decide on its final item."""
    held = [item async for item in stream]
    final = next((item for item in reversed(held) if is_final(item)), None)
    if final is None:
        return held
    handed = _complete(prep, probe, codec, final)
    if handed is final:
        return held
    return [*deltas(handed), handed]


def _complete(prep: _Prepared, probe: "Probe", codec: LLMCodec, raw: Any) -> Any:
    try:
        return prep.complete(probe, codec, raw)
    except InterceptAbort:
        prep.scope.end()
        raise
    except Exception:
        log_hook_error("llm call end")
        prep.scope.end()
        if raw is None:
            raise RuntimeError("aegis-probe: a replayed/injected response could not be built") from None
        return raw


def text_pieces(text: str | None) -> list[str]:
    """``text`` as word-sized deltas (each word with the space before it), as a model streams a
    replayed or injected answer."""
    words = text.split(" ") if text else []
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class ChunkCodec(LLMCodec, Protocol):
    """An :class:`LLMCodec` for calls whose response arrives as a stream of chunks (OpenAI ``stream=True``)."""

    def from_chunks(self, chunks: Sequence[Any]) -> LLMResponse:
        """The neutral form of the response the ``chunks`` carry together."""

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        """Chunks carrying ``response`` (a replayed or injected answer to a streaming call)."""

    def is_last(self, chunk: Any) -> bool:
        """Whether ``chunk`` completes the response (apps may stop reading there)."""


class _ChunkList:
    """A :class:`ChunkCodec` seen as a plain codec whose raw response is the list of chunks."""

    __slots__ = ("codec",)

    def __init__(self, codec: ChunkCodec) -> None:
        self.codec = codec

    def response(self, raw: Sequence[Any]) -> LLMResponse:
        return self.codec.from_chunks(raw)

    def with_response(self, raw: Sequence[Any] | None, response: LLMResponse) -> list[Any]:
        return self.codec.to_chunks(response)


class _PassingChunks:
    """The chunks of a streamed call as they pass. The span ends with their response at the last
    chunk (apps often stop reading there and drop the stream), else when the stream ends; the
    app's error before that fails it."""

    __slots__ = ("scope", "codec", "chunks", "ended")

    def __init__(self, scope: "LLMScope", codec: ChunkCodec) -> None:
        self.scope, self.codec, self.ended = scope, codec, False
        self.chunks: list[Any] = []

    def item(self, chunk: Any) -> None:
        self.chunks.append(chunk)
        if self.codec.is_last(chunk):
            self.end(None)

    def end(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        if exc is not None:
            self.scope.fail(exc)
            return
        try:
            _finish_converted(self.scope, lambda: self.codec.from_chunks(self.chunks))
        except Exception:
            log_hook_error("llm stream end")
            self.scope.end()


def _handed_on(chunks: list[Any]) -> Generator[Any, None, None]:
    yield from chunks


async def _ahanded_on(chunks: list[Any]) -> AsyncGenerator[Any, None]:
    for chunk in chunks:
        yield chunk


def call_llm_chunks(probe: "Probe", codec: ChunkCodec, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """Run a model call that returns a stream of chunks inside a ``chat`` span; returns a generator of them.

    Without interceptors the chunks pass through as they arrive, the span current while each is
    produced, and the span ends with the response ``codec.from_chunks`` assembles at the end of
    the stream. Interceptors see and may replace the whole response, so with interceptors the
    stream is read to its end first, then handed on: the same chunks, or ``codec.to_chunks`` of
    the new response (also of a short-circuit response from ``before``).
    """
    prep = _prepare(probe, codec, instance, args, kwargs)
    if prep is None:
        return wrapped(*args, **kwargs)
    if prep.short_circuit is not None:
        return _handed_on(_complete(prep, probe, _ChunkList(codec), None))  # type: ignore[arg-type]
    scope = prep.scope
    token = scope.attach()
    try:
        stream = wrapped(*prep.args, **prep.kwargs)
        chunks = list(stream) if probe.interceptors else None
    except BaseException as exc:
        scope.fail(exc)
        raise
    finally:
        scope.detach(token)
    if chunks is not None:
        return _handed_on(_complete(prep, probe, _ChunkList(codec), chunks))  # type: ignore[arg-type]
    passing = _PassingChunks(scope, codec)
    return iterate_sync_in_scope(iter(stream), scope, on_item=passing.item, on_done=passing.end)


async def acall_llm_chunks(
    probe: "Probe", codec: ChunkCodec, wrapped: Callable[..., Awaitable[Any]], instance: Any, args: tuple, kwargs: dict
) -> Any:
    """The async twin of :func:`call_llm_chunks`: awaits the call, returns an async generator of chunks."""
    prep = _prepare(probe, codec, instance, args, kwargs)
    if prep is None:
        return await wrapped(*args, **kwargs)
    if prep.short_circuit is not None:
        return _ahanded_on(_complete(prep, probe, _ChunkList(codec), None))  # type: ignore[arg-type]
    scope = prep.scope
    token = scope.attach()
    try:
        stream = await wrapped(*prep.args, **prep.kwargs)
        chunks = [chunk async for chunk in stream] if probe.interceptors else None
    except BaseException as exc:
        scope.fail(exc)
        raise
    finally:
        scope.detach(token)
    if chunks is not None:
        return _ahanded_on(_complete(prep, probe, _ChunkList(codec), chunks))  # type: ignore[arg-type]
    passing = _PassingChunks(scope, codec)
    return iterate_in_scope(stream.__aiter__(), scope, on_item=passing.item, on_done=passing.end)


class StreamReader(Protocol):
    """How to read a model call that is an async context manager yielding a stream (Pydantic AI's
    ``Model.request_stream``): the framework's response object once the app is done with it, the
    stream read to its end first (for interceptors), and a stream that carries a given response."""

    def final(self, stream: Any) -> Any:
        """The response object ``stream`` holds so far (what the app read of it)."""

    async def drain(self, stream: Any) -> Any:
        """Read ``stream`` to its end; its whole response object."""

    def as_stream(self, raw: Any, args: tuple, kwargs: dict) -> Any:
        """A stream carrying the response object ``raw`` (a replayed or injected answer)."""


@asynccontextmanager
async def aopen_llm_stream(
    probe: "Probe", codec: LLMCodec, reader: StreamReader, wrapped: Callable[..., Any], instance: Any,
    args: tuple, kwargs: dict,
) -> AsyncGenerator[Any, None]:
    """Run a model call that is an async context manager yielding a stream inside a ``chat`` span.

    Without interceptors the stream reaches the app as it is and the span ends, when the app
    leaves the context, with what it read (``reader.final``). Interceptors see and may replace the
    whole response, so with interceptors the stream is read to its end first and the app gets
    ``reader.as_stream`` of the response (also of a short-circuit response from ``before``).
    """
    prep = _prepare(probe, codec, instance, args, kwargs)
    if prep is None:
        async with wrapped(*args, **kwargs) as stream:
            yield stream
        return
    if prep.short_circuit is not None:
        yield reader.as_stream(_complete(prep, probe, codec, None), args, kwargs)
        return
    scope = prep.scope
    token = scope.attach()
    try:
        manager = wrapped(*prep.args, **prep.kwargs)
        stream = await manager.__aenter__()
    except BaseException as exc:
        scope.fail(exc)
        raise
    finally:
        scope.detach(token)
    try:
        if probe.interceptors:
            with attached(scope):
                raw = await reader.drain(stream)
            handed = _complete(prep, probe, codec, raw)
            yield stream if handed is raw else reader.as_stream(handed, args, kwargs)
        else:
            yield stream
            try:
                _finish_converted(scope, lambda: codec.response(reader.final(stream)))
            except Exception:
                log_hook_error("llm stream end")
                scope.end()
    except BaseException as exc:
        scope.fail(exc)
        if not await manager.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await manager.__aexit__(None, None, None)
