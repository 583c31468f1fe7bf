"""Message content as span attributes: the GenAI-convention JSON of neutral chat messages.

Every LLM call's prompt repeats the conversation so far, so each message is encoded once and its
JSON reused (kept on a :class:`SharedMessage`, else in a bounded table keyed by content); a
prompt's JSON is then one join of cached fragments. A text is redacted and JSON-quoted once,
whichever messages carry it (a step's output is also the next prompt's last message).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _quote  # what json.dumps(ensure_ascii=False) uses
from typing import Any, Callable, Iterable, Mapping

from ..storage.delta import note_extension

# A neutral chat message, as adapters hand them over: {"role", "content", optional "name",
# optional "tool_calls": [{"id", "name", "arguments"}], optional "tool_call_id"}.
ChatMessage = Mapping[str, Any]


def content_text(content: Any) -> str:
    """The text of a framework message's content, for a neutral message's ``content``.

    A string is kept as is and None is ``""``; a list of parts (OpenAI-style dicts, or a
    framework's own objects) is joined with newlines: text parts by their text, any other part as
    ``[its type]`` (an image, a file), so a non-text part is visible without its payload.
    """
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, (list, tuple)):
        return str(content)
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            kind = part.get("type", "text")
            parts.append(str(part.get("text", "")) if kind == "text" else f"[{kind}]")
        else:
            parts.append(f"[{type(part).__name__}]")
    return "\n".join(parts)


class SharedMessage(dict):
    """A neutral message an adapter reuses across calls and never mutates (``str`` values, and
    ``tool_calls`` a list of dicts: interceptors get copies of those too).

    Its JSON is kept on the object, so encoding a long conversation of them costs one attribute
    read per message. Interceptors are given plain-``dict`` copies.
    """

    __slots__ = ("_fragment", "_base")


def answer_of(base: ChatMessage | None, message: dict[str, Any]) -> dict[str, Any]:
    """``message``, a model's answer that encodes as ``base`` (the adapter's :class:`SharedMessage`
    of it, which the step's output and the next prompt share) plus its ``finish_reason``, as a
    :class:`SharedMessage` whose JSON is built from ``base``'s: the answer is encoded once for the
    chat's output, the step's output and the next prompt. Else ``message`` as it is."""
    if type(base) is not SharedMessage:
        return message
    shared = SharedMessage(message)
    shared._base = base  # type: ignore[attr-defined]
    return shared


_FRAGMENTS: dict[tuple[Any, ...], str] = {}
_FRAGMENTS_MAX = 4096  # messages
_FRAGMENT_MAX_CHARS = 8192  # longer contents are encoded every time, not kept

#: Per redactor: text -> its redacted, JSON-quoted form (texts up to _FRAGMENT_MAX_CHARS).
_TEXTS: dict[Callable[[str], str], dict[str, str]] = {}
_TEXTS_MAX = 4096  # texts per redactor
_REDACTORS_MAX = 8


#: Last JSON per conversation of :class:`SharedMessage`s: (first message id, redactor) ->
#: (messages, JSON). A prompt that extends it is that JSON plus the new messages'. This table is
#: for prompts outside any run; a run's are remembered in a table of its own (see encode_messages).
Prompts = dict[tuple[int, Any], tuple[list[Any], str]]
_PROMPTS: Prompts = {}
_PROMPTS_MAX = 64
_PROMPT_MIN = 8  # shorter prompts are joined afresh


def forget() -> None:
    """Let go of every cached message JSON and text (the apps' messages they hold with them)."""
    _PROMPTS.clear()
    _FRAGMENTS.clear()
    _TEXTS.clear()
    _LONG.clear()


def forget_long_texts() -> None:
    """Let go of the recent long texts (a run ended: they may be its prompts)."""
    _LONG.clear()


def encode_messages(messages: Iterable[ChatMessage], redact: Callable[[str], str], prompts: Prompts | None = None) -> str:
    """GenAI-convention JSON (``[{role, parts: [...]}]``) for neutral chat messages.

    Each LLM call's prompt repeats the conversation so far, so the JSON of a message without tool
    calls is cached and reused: on a :class:`SharedMessage` itself, else in a bounded table keyed
    by content; and a prompt of shared messages that extends the last one of its conversation
    reuses that prompt's JSON whole (a list comparison that stops at identical objects), so a
    step costs its new messages, not the conversation so far. The prompt is remembered in
    ``prompts`` (a run's own table, let go of with the run), else in a table of this module.
    """
    msgs = messages if type(messages) is list else list(messages)
    if len(msgs) < _PROMPT_MIN or type(msgs[0]) is not SharedMessage:
        return _join(msgs, redact)
    table = _PROMPTS if prompts is None else prompts
    key = (id(msgs[0]), redact)
    hit = table.get(key)
    done = len(hit[0]) if hit is not None and len(hit[0]) <= len(msgs) and msgs[: len(hit[0])] == hit[0] else 0
    tail = msgs[done:]
    if not done:
        text = _join(msgs, redact)
    elif not tail:
        text = hit[1]  # type: ignore[index]
    else:
        text = hit[1][:-1] + ", " + _join(tail, redact)[1:]  # type: ignore[index]
        note_extension(text, hit[1], len(hit[1]) - 1)  # type: ignore[index]  # the store's delta: no prefix scan
    if all(type(m) is SharedMessage for m in tail):  # only messages that never change are remembered
        if len(table) >= _PROMPTS_MAX and key not in table:
            table.clear()
        table[key] = (msgs[:], text)
    return text


def _join(messages: list[ChatMessage], redact: Callable[[str], str]) -> str:
    """The JSON list of ``messages``, from each message's cached fragment."""
    out = []
    for m in messages:
        if type(m) is SharedMessage:
            cached = getattr(m, "_fragment", None)
            if cached is None or cached[0] is not redact:
                cached = m._fragment = (redact, _shared_fragment(m, redact))  # type: ignore[attr-defined]
            out.append(cached[1])
            continue
        content = m.get("content")
        if m.get("tool_calls") or m.get("refusal") or (isinstance(content, str) and len(content) > _FRAGMENT_MAX_CHARS):
            out.append(_fragment(m, redact))
            continue
        key = (redact, m.get("role"), content, m.get("name"), m.get("tool_call_id"), m.get("finish_reason"))
        fragment = _FRAGMENTS.get(key)
        if fragment is None:
            if len(_FRAGMENTS) >= _FRAGMENTS_MAX:
                _FRAGMENTS.clear()
            fragment = _FRAGMENTS[key] = _fragment(m, redact)
        out.append(fragment)
    return "[" + ", ".join(out) + "]"


def _shared_fragment(m: SharedMessage, redact: Callable[[str], str]) -> str:
    """The JSON of a shared message: an answer made by :func:`answer_of` is its base's JSON (kept on
    the base) with its ``finish_reason`` added, the last field of a message's JSON."""
    base = getattr(m, "_base", None)
    if base is None:
        return _fragment(m, redact)
    cached = getattr(base, "_fragment", None)
    if cached is None or cached[0] is not redact:
        cached = base._fragment = (redact, _fragment(base, redact))
    reason = m.get("finish_reason")
    if not reason:
        return cached[1]  # type: ignore[no-any-return]
    if type(reason) is not str:
        return _fragment(m, redact)
    return f'{cached[1][:-1]}, "finish_reason": {_quote(reason)}}}'


def _fragment(m: ChatMessage, redact: Callable[[str], str]) -> str:
    """The JSON of one message: ``json.dumps(_encode_message(m), ensure_ascii=False)``, built
    directly (same text) for the common plain-text message, which is most of every prompt."""
    role, name, reason = m.get("role", "user"), m.get("name"), m.get("finish_reason")
    if (m.get("tool_calls") or m.get("tool_call_id") or m.get("refusal") or type(role) is not str
            or (name and type(name) is not str) or (reason and type(reason) is not str)):
        return json.dumps(_encode_message(m, redact), ensure_ascii=False)
    content = m.get("content")
    text = f'{{"type": "text", "content": {_quoted(content if type(content) is str else str(content), redact)}}}' if content else ""
    return (f'{{"role": {_quote(role)}, "parts": [{text}]'
            + (f', "name": {_quote(name)}' if name else "")
            + (f', "finish_reason": {_quote(reason)}' if reason else "") + "}")


def _quoted(text: str, redact: Callable[[str], str]) -> str:
    """``text`` redacted and JSON-quoted, once per distinct text and redactor."""
    texts = _TEXTS.get(redact)
    if texts is None:
        if len(_TEXTS) >= _REDACTORS_MAX:
            _TEXTS.clear()
            _LONG.clear()
        texts = _TEXTS[redact] = {}
    out = texts.get(text)
    if out is None:
        if len(text) > _FRAGMENT_MAX_CHARS:
            return _quoted_long(text, redact)
        out = _quote(redact(text))
        if len(texts) >= _TEXTS_MAX:
            texts.clear()
        texts[text] = out
    return out


#: Per redactor: recent long texts that redaction left as they were, with their JSON (newest last).
_LONG: dict[Callable[[str], str], tuple[tuple[str, str], ...]] = {}
_LONG_MAX = 4


def _quoted_long(text: str, redact: Callable[[str], str]) -> str:
    """A long text (a prompt holding the conversation so far in one message, as MetaGPT's) quoted
    from the JSON of a recent text it extends, when redaction changes neither: JSON escaping is per
    character, so only the new part is escaped."""
    redacted = redact(text)
    if redacted is not text:
        return _quote(redacted)
    recent = _LONG.get(redact, ())
    old = next((item for item in reversed(recent) if text.startswith(item[0])), None)
    out = _quote(text) if old is None else old[1][:-1] + _quote(text[len(old[0]):])[1:]
    _LONG[redact] = (*recent[1 - _LONG_MAX:], (text, out))
    return out


def _encode_message(m: ChatMessage, redact: Callable[[str], str]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    content = m.get("content")
    if content:
        key = "response" if m.get("tool_call_id") else "content"
        kind = "tool_call_response" if m.get("tool_call_id") else "text"
        part: dict[str, Any] = {"type": kind, key: redact(str(content))}
        if m.get("tool_call_id"):
            part["id"] = m["tool_call_id"]
        parts.append(part)
    if m.get("refusal"):  # the model's refusal: a text part, marked so that a replay gives it back as one
        parts.append({"type": "text", "content": redact(str(m["refusal"])), "refusal": True})
    for call in m.get("tool_calls") or ():
        parts.append(
            {"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
             "arguments": redact(str(call.get("arguments", "")))}
        )
    msg: dict[str, Any] = {"role": m.get("role", "user"), "parts": parts}
    if m.get("name"):
        msg["name"] = m["name"]
    if m.get("finish_reason"):
        msg["finish_reason"] = m["finish_reason"]
    return msg
