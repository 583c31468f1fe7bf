"""A LangChain chat model's streamed call under interceptors (replay, substitution, injection).

``BaseChatModel._generate_with_cache`` streams when a streaming callback handler is attached
(LangGraph's ``stream_mode="messages"``, ``astream_events``) or the model streams itself: each
chunk reaches the app through the run manager's ``on_llm_new_token`` (v2 handlers:
``on_stream_event``). While interceptors decide on the answer, those callbacks of the live call
are held (:class:`HeldCallbacks`); then they are passed on as they came, or, for a new answer,
the answer is sent as a provider's stream would send it: text deltas word by word, each tool
call's argument deltas, and a last chunk with the usage (v2 handlers: LangChain's own events of
a message, as for a cache hit).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.utils.utils import LC_ID_PREFIX

from aegis_probe.capture.interception import text_pieces

#: The run manager's callbacks a streamed call sends its chunks through.
_STREAMED = ("on_llm_new_token", "on_stream_event")


class HeldCallbacks:
    """A run manager passing everything through except the streamed chunks, which it holds."""

    def __init__(self, manager: Any, is_async: bool) -> None:
        self._manager, self._async = manager, is_async
        self.held: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str) -> Any:
        if name not in _STREAMED:
            return getattr(self._manager, name)
        if self._async:
            async def hold_async(*args: Any, **kwargs: Any) -> None:
                self.held.append((name, args, kwargs))
            return hold_async

        def hold(*args: Any, **kwargs: Any) -> None:
            self.held.append((name, args, kwargs))
        return hold


class StreamedCall:
    """One ``_generate_with_cache`` call that streams, its run manager swapped for a holding one."""

    def __init__(self, instance: Any, manager: Any, args: tuple, kwargs: dict, is_async: bool, v2: bool) -> None:
        self.instance, self.manager, self.is_async, self.v2 = instance, manager, is_async, v2
        self.held = HeldCallbacks(manager, is_async)
        self.options = _options(kwargs)
        if len(args) > 2:
            self.args, self.kwargs = (*args[:2], self.held, *args[3:]), kwargs
        else:
            self.args, self.kwargs = args, {**kwargs, "run_manager": self.held}
        self.results: list[Any] = []

    @classmethod
    def of(cls, instance: Any, args: tuple, kwargs: dict, is_async: bool) -> "StreamedCall | None":
        """The call, if it streams (else None: its answer reaches the app whole anyway)."""
        manager = args[2] if len(args) > 2 else kwargs.get("run_manager")
        if manager is None:
            return None
        options = _options(kwargs)
        v2 = instance._should_use_protocol_streaming(async_api=is_async, run_manager=manager, **options)
        if not (v2 or instance._should_stream(async_api=is_async, run_manager=manager, **options)):
            return None
        return cls(instance, manager, args, kwargs, is_async, bool(v2))

    def live(self, wrapped: Callable[..., Any]) -> Callable[..., Any]:
        """``wrapped``, keeping what the live call returned (to tell a new answer from it)."""
        def call(*args: Any, **kwargs: Any) -> Any:
            result = wrapped(*args, **kwargs)
            self.results.append(result)
            return result

        async def acall(*args: Any, **kwargs: Any) -> Any:
            result = await wrapped(*args, **kwargs)
            self.results.append(result)
            return result

        return acall if self.is_async else call

    def _callbacks(self, result: ChatResult) -> list[tuple[str, tuple, dict]] | None:
        """The callbacks that carry ``result`` to the app: the held ones if it is the live answer,
        else its chunks (None for v2 handlers, which get LangChain's events of the message). A new
        answer's message gets the id LangChain gives a live one (the stream's, so that LangGraph's
        message stream does not send it again whole at its end)."""
        if self.results and result is self.results[0]:
            return self.held.held
        for generation in result.generations:
            if generation.message.id is None:
                generation.message.id = "-".join((LC_ID_PREFIX, str(self.manager.run_id)))
        if self.v2:
            return None
        message = result.generations[0].message
        chunks = chunks_of(message) if isinstance(message, AIMessage) else []
        return [("on_llm_new_token", (chunk.message.content,), {"chunk": chunk}) for chunk in chunks]

    def send(self, result: ChatResult) -> None:
        callbacks = self._callbacks(result)
        if callbacks is None:
            self.instance._replay_v2_events_for_cache_hit(result.generations, run_manager=self.manager, **self.options)
            return
        for name, args, kwargs in callbacks:
            getattr(self.manager, name)(*args, **kwargs)

    async def asend(self, result: ChatResult) -> None:
        callbacks = self._callbacks(result)
        if callbacks is None:
            await self.instance._areplay_v2_events_for_cache_hit(result.generations, run_manager=self.manager,
                                                                  **self.options)
            return
        for name, args, kwargs in callbacks:
            await getattr(self.manager, name)(*args, **kwargs)


def _options(kwargs: dict) -> dict[str, Any]:
    """The call's model options (what ``_should_stream`` reads), without its messages, stop and run manager."""
    return {k: v for k, v in kwargs.items() if k not in ("messages", "stop", "run_manager")}


def chunks_of(message: AIMessage) -> list[ChatGenerationChunk]:
    """``message`` as a provider streams it: text deltas, each tool call's name then its argument
    deltas, and a last chunk with the usage and response metadata."""
    mid = message.id
    text = message.content if isinstance(message.content, str) else message.text
    parts = [AIMessageChunk(content=piece, id=mid) for piece in text_pieces(text)]
    for index, call in enumerate(message.tool_calls):
        parts.append(AIMessageChunk(content="", id=mid, tool_call_chunks=[
            {"type": "tool_call_chunk", "name": call["name"], "args": "", "id": call["id"], "index": index}]))
        parts += [AIMessageChunk(content="", id=mid, tool_call_chunks=[
            {"type": "tool_call_chunk", "name": None, "args": piece, "id": None, "index": index}])
            for piece in text_pieces(json.dumps(call["args"]))]
    parts.append(AIMessageChunk(content="", id=mid, usage_metadata=message.usage_metadata,
                                response_metadata=dict(message.response_metadata), chunk_position="last"))
    return [ChatGenerationChunk(message=part) for part in parts]
