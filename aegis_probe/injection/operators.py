"""Deterministic manipulators: one operator per MAST mode, no LLM needed.

Each operator turns an agent's action (an :class:`LLMResponse`: text and tool calls) into a
faulty one, in the way its mode describes. The same operator serves prompt injection by being
applied to the latest message of the agent's input (two modes edit the message list instead:
loss of history drops it, conversation reset restarts from the first message).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from ..capture.interception import LLMResponse

_NUM = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_VERIFY = re.compile(r"\b(verif\w*|check\w*|confirm\w*|correct\w*|double-check\w*)\b", re.I)
#: A handoff tool's name (AutoGen's and the OpenAI Agents SDK's default ``transfer_to_<agent>``).
_HANDOFF = re.compile(r"transfer_to_(\w+)")

#: Termination markers the supported frameworks' teams commonly use.
TERMINATION_MARKERS = ("TERMINATE", "APPROVE", "CAMEL_TASK_DONE", "FINAL ANSWER:")


@dataclass
class Context:
    """What an operator may know about the call it manipulates."""

    agent: str
    task: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # the agent's input messages
    agents: tuple[str, ...] = ()
    termination: str = "TERMINATE"
    task_type: str = "generic"

    @property
    def other_agent(self) -> str:
        others = [a for a in self.agents if a != self.agent]
        return others[0] if others else "another agent"

    @property
    def first_user(self) -> str:
        return next((_text(m) for m in self.history if m.get("role") == "user" and _text(m)), self.task or "")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def map_numbers(text: str, fn: Callable[[float], float]) -> str:
    """``text`` with every number ``x`` replaced by ``fn(x)``."""
    return _NUM.sub(lambda m: _fmt(fn(float(m.group()))), text)


def numbers(text: str) -> list[str]:
    return _NUM.findall(text or "")


def _wrong(value: float) -> float:
    return value + max(1, round(abs(value) * 0.1))


def _replace_last_number(text: str, fn: Callable[[float], float]) -> str:
    found = list(_NUM.finditer(text))
    if not found:
        return text
    last = found[-1]
    return text[: last.start()] + _fmt(fn(float(last.group()))) + text[last.end():]


def said_text(resp: LLMResponse) -> LLMResponse:
    """``resp`` with a refusal (and no content) as its content: what the agent said, which a
    corruption edits into an answer (never sent back as both an answer and a refusal)."""
    return replace(resp, content=resp.refusal, refusal=None) if resp.refusal and not resp.content else resp


def _action_text(resp: LLMResponse) -> str:
    """The response as one text: its content, or its tool calls written out."""
    if resp.content:
        return resp.content
    return " ".join(f"{c.get('name')}({c.get('arguments')})" for c in resp.tool_calls)


def _say(resp: LLMResponse, text: str) -> LLMResponse:
    """The response replaced by plain text (tool calls dropped)."""
    return replace(resp, content=text, tool_calls=[], finish_reason="stop" if resp.finish_reason else None)


def _handoff_targets(resp: LLMResponse) -> list[str]:
    """The agents an action hands over to when handing over is all it does (every tool call a
    ``transfer_to_<agent>`` handoff; any text is its reasoning); else empty."""
    found = [_HANDOFF.fullmatch(str(c.get("name", ""))) for c in resp.tool_calls]
    return [m.group(1) for m in found if m] if found and all(found) else []


def _reasoning(resp: LLMResponse, fn: Callable[[str], str]) -> LLMResponse:
    """A handoff's reasoning edited by ``fn``, the handoff kept: a mode about what the agent says leaves
    where it hands over alone (nothing to edit: the action unchanged, so the mode is not applied)."""
    return replace(resp, content=fn(resp.content) if resp.content else resp.content)


def _edit(resp: LLMResponse, fn: Callable[[str], str]) -> LLMResponse:
    """``fn`` applied to the content and to each tool call's arguments."""
    calls = [{**c, "arguments": fn(str(c.get("arguments", "")))} for c in resp.tool_calls]
    return replace(resp, content=fn(resp.content) if resp.content else resp.content, tool_calls=calls)


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(text) if s.strip()]


def _without(text: str, pattern: re.Pattern[str], filler: str) -> str:
    """``text`` without its sentences ``pattern`` finds (``filler`` when none is left); as it is when it has none."""
    if not pattern.search(text):
        return text
    return " ".join(s for s in _sentences(text) if not pattern.search(s)) or filler


# -- one operator per mode ------------------------------------------------------------------

def disobey_task(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-1.1: works on other quantities than the task specifies (every number doubled)."""
    return _edit(resp, lambda t: map_numbers(t, lambda x: x * 2))


def disobey_role(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-1.2: skips its own job (no tool use) and takes over another agent's role with a guess; an
    agent handing over takes over the role of the one it was handing over to."""
    targets = _handoff_targets(resp)
    if targets:
        guess = _replace_last_number(resp.content or ctx.first_user, lambda x: x + 1)
        return _say(resp, f"I will act as {targets[0]} myself instead of handing over to it: {guess}")
    guess = _replace_last_number(_action_text(resp), lambda x: x + 1)
    return _say(resp, f"I will act as {ctx.other_agent} instead of doing my part as {ctx.agent}: {guess}")


def repeat_step(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-1.3: repeats the content of an earlier step instead of acting."""
    own = _action_text(resp)
    earlier = [_text(m) for m in ctx.history if m.get("role") != "system" and _text(m) and _text(m) != own]
    if not earlier and _handoff_targets(resp):  # nothing said before to repeat (a handoff is no text to say twice)
        return resp
    return _say(resp, earlier[-1] if earlier else f"{own}\n{own}")


def lose_history(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-1.4: forgets what happened so far: results not stated in the task are dropped."""
    task_numbers = set(numbers(ctx.task or ctx.first_user))
    text = _action_text(resp)
    forgotten = _NUM.sub(lambda m: m.group() if m.group() in task_numbers else "", text)
    if forgotten == text:
        return _say(resp, f"Let me begin with the task: {ctx.task or ctx.first_user}")
    return _say(resp, forgotten)


def ignore_termination(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-1.5: drops the termination marker and keeps the conversation going (a handoff ends
    nothing: only a marker in its reasoning is dropped)."""
    def unmarked(text: str) -> str:
        for marker in {ctx.termination, *TERMINATION_MARKERS}:
            text = re.sub(re.escape(marker), "", text, flags=re.I)
        return text

    if _handoff_targets(resp):
        return _reasoning(resp, lambda t: t if unmarked(t) == t else unmarked(t).strip() or "Not done yet.")
    return _say(resp, unmarked(_action_text(resp)).strip() + "\nWe are not done yet; let us keep refining this.")


def reset_conversation(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-2.1: restarts the dialogue from scratch."""
    return _say(resp, f"Let's start over from the beginning. {ctx.first_user}")


def skip_clarification(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-2.2: proceeds on an ambiguous basis: specific quantities become vague words (a handoff's
    reasoning only)."""
    if _handoff_targets(resp):
        return _reasoning(resp, lambda t: _NUM.sub("some", t))
    text = _NUM.sub("some", _action_text(resp))
    return _say(resp, text if text != _action_text(resp) else f"{text} (assuming whatever seems reasonable)")


def derail(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-2.3: answers a different question (the sum of all numbers the task mentions)."""
    total = sum(float(n) for n in numbers(ctx.task or ctx.first_user))
    return _say(resp, f"A more interesting question is the sum of all the numbers mentioned, which is {_fmt(total)}.")


def withhold(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-2.4: leaves out the numbers and facts the next agent needs (from a handoff's reasoning,
    still handing over)."""
    if _handoff_targets(resp):
        return _reasoning(resp, lambda t: _without(t, _NUM, "Over to you."))
    kept = [s for s in _sentences(_action_text(resp)) if not _NUM.search(s)]
    return _say(resp, " ".join(kept) or "I have worked it out.")


def ignore_input(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-2.5: ignores the other agents' latest message and sticks to its earlier position."""
    own = [_text(m) for m in ctx.history if m.get("role") == "assistant" and _text(m)]
    return _say(resp, f"Regardless of the previous message, I stand by my earlier position: {own[-1] if own else ctx.first_user}")


def mismatch_action(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-2.6: the reasoning stays, the action does not follow it: the last number of the action
    changed; a handoff (no number to change) is not made, its reasoning (else what it would do)
    said instead; other tool calls with no number are left as they are (not applied at this call:
    the step's next model call, e.g. the report of the tool's result, carries the fault)."""
    if resp.tool_calls:
        calls = [{**c, "arguments": _replace_last_number(str(c.get("arguments", "")), lambda x: x + 1)} for c in resp.tool_calls]
        if calls != resp.tool_calls:
            return replace(resp, tool_calls=calls)
        targets = _handoff_targets(resp)
        if not targets:
            return resp
        return _say(resp, resp.content or " ".join(dict.fromkeys(f"I will hand this over to {t}." for t in targets)))
    return replace(resp, content=_replace_last_number(resp.content or "", lambda x: x + 1) if numbers(resp.content or "") else f"{resp.content or ''} Actually, I will do something else.")


def terminate_early(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-3.1: declares the task finished before it is."""
    return _say(resp, f"The task is already finished. {ctx.termination}")


def skip_verification(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-3.2: no verification: the check (tool use, checking sentences) is dropped for an unchecked
    estimate (from a handoff's reasoning, still handing over)."""
    if _handoff_targets(resp):
        return _reasoning(resp, lambda t: _without(t, _VERIFY, "Over to you."))
    kept = " ".join(s for s in _sentences(_action_text(resp)) if not _VERIFY.search(s))
    estimate = _replace_last_number(kept, lambda x: round(x, -1) if round(x, -1) not in (x, 0) else x + 10)
    return _say(resp, f"{estimate} No need to check this.".strip())


def wrong_verification(resp: LLMResponse, ctx: Context) -> LLMResponse:
    """FM-3.3: confirms a wrong value as verified."""
    found = numbers(_action_text(resp)) or numbers(ctx.task or "") or ["0"]
    wrong = _fmt(_wrong(float(found[-1])))
    return _say(resp, f"I verified the result carefully: {wrong} is correct.")


OPERATORS: dict[str, Callable[[LLMResponse, Context], LLMResponse]] = {
    "FM-1.1": disobey_task,
    "FM-1.2": disobey_role,
    "FM-1.3": repeat_step,
    "FM-1.4": lose_history,
    "FM-1.5": ignore_termination,
    "FM-2.1": reset_conversation,
    "FM-2.2": skip_clarification,
    "FM-2.3": derail,
    "FM-2.4": withhold,
    "FM-2.5": ignore_input,
    "FM-2.6": mismatch_action,
    "FM-3.1": terminate_early,
    "FM-3.2": skip_verification,
    "FM-3.3": wrong_verification,
}


class Manipulator(Protocol):
    """Turns an agent's action (corruption) or input (injection) into a faulty one for ``mode``.

    Either method returns None when it cannot act on what it was given (the target then waits
    for the next model call of the same step).
    """

    kind: str

    def corrupt(self, mode: str, response: LLMResponse, ctx: Context) -> LLMResponse | None: ...

    def inject(self, mode: str, messages: list[dict[str, Any]], ctx: Context) -> list[dict[str, Any]] | None: ...


def latest_input(messages: list[dict[str, Any]]) -> int | None:
    """Index of the latest non-system message with text: what the agent is about to act on."""
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") != "system" and _text(messages[i])), None)


def _system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("role") == "system"]


class DeterministicManipulator:
    """Applies :data:`OPERATORS`; needs no model."""

    kind = "deterministic"

    def corrupt(self, mode: str, response: LLMResponse, ctx: Context) -> LLMResponse | None:
        said = said_text(response)
        new = OPERATORS[mode](said, ctx)
        return None if (new.content, new.tool_calls) == (said.content, said.tool_calls) else new

    def inject(self, mode: str, messages: list[dict[str, Any]], ctx: Context) -> list[dict[str, Any]] | None:
        rest = [m for m in messages if m.get("role") != "system"]
        if mode == "FM-1.4":  # lose the history: only the latest message is left
            new = _system(messages) + rest[-1:]
        elif mode == "FM-2.1":  # reset: back to the first message
            new = _system(messages) + rest[:1]
        else:
            i = latest_input(messages)
            if i is None:
                return None
            edited = OPERATORS[mode](LLMResponse(content=_text(messages[i])), ctx)
            new = [*messages[:i], {**messages[i], "content": edited.content}, *messages[i + 1:]]
        return None if new == messages else new
