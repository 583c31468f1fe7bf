"""AG2 adapter (ag2 0.14, the classic ``autogen`` API: ``ConversableAgent``, ``GroupChat``).

Class-level patches, installed once:

- run entry: ``ConversableAgent.initiate_chat/a_initiate_chat`` where the initiator, the
  recipient or one of a recipient ``GroupChatManager``'s agents is registered (so a chat of
  ``initiate_group_chat(pattern=...)``, whose manager the pattern builds, is traced when one of
  its agents is instrumented): one run per chat, ``invoke_workflow {recipient.name}`` (a
  ``GroupChatManager``'s name for a group chat), its answer the last message a step produced.
  Chats started inside a run (nested chats, ``initiate_chats``, CaptainAgent-style experts)
  open no run: their messages are steps of the outer run;
- agent step: ``ConversableAgent.generate_reply/a_generate_reply``, one message of a group chat
  or a two-agent chat -> ``invoke_agent {agent.name}``; its input the messages received since
  the agent's last own message, its output the reply. A ``GroupChatManager``'s own reply (the
  whole group chat) is not a step, nor is the reply of an agent whose termination check ends the
  chat sending nothing (``human_input_mode="NEVER"``: the termination message, the auto-reply
  limit), and neither are the replies of the helper agents of automatic
  speaker selection (``GroupChat.select_speaker/a_select_speaker``): their model calls are
  ``chat`` spans named after the manager with ``aegis.llm.purpose = speaker_selection``.
  Messages of a nested chat are steps inside the step that started it;
- LLM call: the ``create(params)`` of each model client ``OpenAIWrapper.create`` walks, whatever
  its ``api_type`` or a user's ``model_client_cls`` (:mod:`~aegis_probe.adapters.ag2_models`),
  under ag2's own ``OpenAIWrapper`` (cache, cost), so replayed and injected answers pass through it
  unchanged. ``a_generate_oai_reply`` runs the sync client in an executor thread, which does not inherit
  the caller's context: ``a_generate_reply`` hands its step over to ``generate_oai_reply`` there
  (keyed by the agent and its sender), also outside steps (automatic speaker selection's helper agents);
- tool call: ``ConversableAgent.execute_function/a_execute_function`` -> ``execute_tool {tool}``
  (an unsuccessful execution fails the span). A sync chat runs an async tool's
  ``a_execute_function`` on a new loop in a new thread (``_run_async_in_thread``): the caller's
  context goes with it.
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable

from opentelemetry import context as otel_context

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, call_arg
from aegis_probe.adapters.ag2_models import ModelClientSeam, neutral_messages, to_neutral
from aegis_probe.capture.messages import content_text
from aegis_probe.capture.spans import (
    Actor,
    RunScope,
    StepScope,
    acting_context,
    await_in_scope,
    call_in_scope,
    current_actor,
    current_run,
    log_hook_error,
    scoped_wrappers,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

FRAMEWORK = "ag2"


def _own(messages: list[Any], i: int, agent: Any, two_party: bool) -> bool:
    """Whether ``messages[i]`` of ``agent``'s history is one it sent. ag2 stores received messages
    as ``user`` and names every message by its author, except the tool calls an agent sends
    (``assistant`` either way) and a legacy ``function_call``'s result (a ``function`` message named
    after the function: the agent's when it executes that function). In a group chat the manager
    names the tool calls it passes on, so an unnamed one is the agent's own; in a two-agent chat it
    is the partner's when the agent answered it (the next message is the agent's) or is about to (it
    is the last)."""
    m = messages[i]
    if not isinstance(m, dict) or m.get("role") == "user":
        return False
    if m.get("role") == "function":
        return m.get("name") in getattr(agent, "function_map", {})
    if m.get("name") is not None:
        return bool(m["name"] == agent.name)
    if not (m.get("tool_calls") or m.get("function_call")):
        return m.get("role") == "assistant"
    if not two_party:
        return True
    after = messages[i + 1] if i + 1 < len(messages) else None
    return isinstance(after, dict) and after.get("name") != agent.name


def _unseen(messages: list[Any], agent: Any, two_party: bool) -> list[Any]:
    """The messages of ``agent``'s history after its own last one."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if _own(messages, i, agent, two_party)), -1)
    return messages[last + 1:]


def _ends_silently(agent: Any, messages: list[Any], sender: Any, exclude: Any, asynchronous: bool) -> bool:
    """Whether ``agent``'s reply will be its termination check ending the chat without a message: the
    first reply function ``generate_reply`` (``a_generate_reply``: ``asynchronous``) will call is
    ag2's ``check_termination_and_human_reply``, which, asking no human (``human_input_mode="NEVER"``),
    ends the chat on a termination message or once the agent's auto-reply limit is reached."""
    if agent.human_input_mode != "NEVER" or not messages:
        return False
    agent_class = sys.modules["autogen"].ConversableAgent  # imported: its methods are patched
    checks = (agent_class.check_termination_and_human_reply, agent_class.a_check_termination_and_human_reply)
    skipped = agent._get_sync_funcs_to_skip_in_async_chat() if asynchronous else ()
    for entry in agent._reply_func_list:
        func = entry["reply_func"]
        if func in (exclude or ()) or func in skipped or (not asynchronous and _is_async(func)):
            continue
        if not _matches(agent, entry["trigger"], sender):
            continue
        if func not in checks:
            return False
        replies = agent._consecutive_auto_reply_counter.get(sender, 0)
        limit = agent._max_consecutive_auto_reply_dict.get(sender, agent.max_consecutive_auto_reply())
        return bool(replies >= limit or agent._is_termination_msg(messages[-1]))
    return False


#: reply function -> whether it is a coroutine function (bounded: cleared when full).
_ASYNC: dict[Any, bool] = {}


def _is_async(func: Any) -> bool:
    """``inspect.iscoroutinefunction(func)``, remembered per reply function."""
    hit = _ASYNC.get(func)
    if hit is None:
        if len(_ASYNC) >= 256:
            _ASYNC.clear()
        hit = _ASYNC[func] = inspect.iscoroutinefunction(func)
    return hit


#: (trigger class, sender class) -> whether a sender of that class matches (bounded: cleared when full).
_TYPE_MATCHES: dict[tuple[type, type], bool] = {}


def _matches(agent: Any, trigger: Any, sender: Any) -> bool:
    """``agent._match_trigger(trigger, sender)``, a class trigger's answer remembered per sender class:
    ag2's own reply functions' trigger is ``[Agent, None]``, and ``Agent`` is a runtime-checkable
    protocol, whose ``isinstance`` check walks its members every time."""
    if isinstance(trigger, list):
        return any(_matches(agent, t, sender) for t in trigger)
    if isinstance(trigger, type) and sender is not None:
        key = (trigger, type(sender))
        hit = _TYPE_MATCHES.get(key)
        if hit is None:
            if len(_TYPE_MATCHES) >= 256:
                _TYPE_MATCHES.clear()
            hit = _TYPE_MATCHES[key] = isinstance(sender, trigger)
        return hit
    return bool(agent._match_trigger(trigger, sender))


#: ``GroupChat.speaker_selection_method``\ s that choose without a model call.
_MODEL_FREE_SELECTION = frozenset({"round_robin", "random", "manual"})


def _fail_run(run: RunScope, exc: BaseException) -> None:
    """End ``run`` failed by the app's ``exc`` through ``RunScope.finish`` (the probe's last run, judged)."""
    try:
        run.finish(exc)
    except Exception:
        log_hook_error("ag2 run end")


class AG2Adapter(Adapter):
    """Traces AG2 (classic autogen) chats: one step per message an agent generates."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.seam = ModelClientSeam(FRAMEWORK)
        #: (id(agent), id(sender)) -> the context of its async step, for the executor thread
        #: ``a_generate_oai_reply`` runs ``generate_oai_reply`` in (``run_in_executor`` does not carry
        #: the caller's context); keyed by the sender too, as one agent may serve several chats at once
        self._handoff: dict[tuple[int, int], otel_context.Context] = {}
        self._reply = scoped_wrappers(self._open_step, self._reply_finisher, "ag2 step")[0]
        self._tool, self._atool = scoped_wrappers(self._open_tool, self._tool_finisher, "ag2 tool")

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        agent_type = getattr(sys.modules.get("autogen"), "ConversableAgent", None)
        return isinstance(agent_type, type) and isinstance(app, agent_type)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        from autogen import GroupChatManager

        agents = [app]
        if isinstance(app, GroupChatManager):
            agents += list(app.groupchat.agents)
        for agent in agents:
            self.registry.add(agent, probe)
            try:
                self.seam.cover(getattr(agent, "client", None))
            except Exception:
                log_hook_error("ag2 model clients")
        names = tuple(dict.fromkeys(a.name for a in agents if not isinstance(a, GroupChatManager)))
        return AppInfo(name=app.name, lone_agent=False, agents=names)

    def _instrument(self, patcher: Patcher) -> None:
        from autogen import ConversableAgent, GroupChat

        patcher.wrap(ConversableAgent, "initiate_chat", self._chat)
        patcher.wrap(ConversableAgent, "a_initiate_chat", self._achat)
        patcher.wrap(ConversableAgent, "generate_reply", self._reply)
        patcher.wrap(ConversableAgent, "a_generate_reply", self._areply)
        patcher.wrap(ConversableAgent, "execute_function", self._tool)
        patcher.wrap(ConversableAgent, "a_execute_function", self._atool)
        patcher.wrap(ConversableAgent, "generate_oai_reply", self._in_thread, enabled=self._handoff.__len__)
        patcher.wrap(ConversableAgent, "_run_async_in_thread", self._in_new_loop)
        patcher.wrap(GroupChat, "select_speaker", self._select)
        patcher.wrap(GroupChat, "a_select_speaker", self._aselect)
        self.seam.install(patcher)

    def uninstall(self) -> None:
        super().uninstall()
        self.seam.reset()

    # -- runs ------------------------------------------------------------------------------
    def _start(self, initiator: Any, args: tuple, kwargs: dict) -> RunScope | None:
        if current_run() is not None:
            return None
        recipient = kwargs["recipient"] if "recipient" in kwargs else args[0] if args else None
        # A group chat's participants count too: ``initiate_group_chat(pattern=...)`` builds the
        # manager itself and starts the chat from its user agent.
        members = getattr(getattr(recipient, "groupchat", None), "agents", None) or ()
        candidates = (initiator, *(() if recipient is None else (recipient,)), *members)
        probe = next((p for p in map(self.run_probe, candidates) if p is not None), None)
        if probe is None:
            return None
        try:
            message = kwargs.get("message")
            task = None if message is None or callable(message) else to_neutral(message)["content"]
            return start_run(probe, getattr(recipient, "name", initiator.name), framework=self.name, task=task)
        except Exception:
            log_hook_error("ag2 run start")
            return None

    def _chat(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start(instance, args, kwargs)
        if run is None:
            return wrapped(*args, **kwargs)

        def chat() -> Any:
            try:
                return wrapped(*args, **kwargs)
            except BaseException as exc:
                _fail_run(run, exc)
                raise

        return call_in_scope(run, chat, self._chat_finisher(run), "ag2 run")

    async def _achat(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start(instance, args, kwargs)
        if run is None:
            return await wrapped(*args, **kwargs)

        async def chat() -> Any:
            try:
                return await wrapped(*args, **kwargs)
            except BaseException as exc:
                _fail_run(run, exc)
                raise

        return await await_in_scope(run, chat, self._chat_finisher(run), "ag2 run")

    @staticmethod
    def _chat_finisher(run: RunScope) -> Callable[[Any], None]:
        def finish(result: Any) -> None:
            summary = getattr(result, "summary", None)
            text: Any = summary if isinstance(summary, str) else None
            if run.answer is None and text:
                run.answer = text
            run.finish()

        return finish

    # -- steps (messages) ------------------------------------------------------------------
    def _open_step(self, agent: Any, args: tuple, kwargs: dict, asynchronous: bool = False) -> StepScope | None:
        run = current_run()
        if run is None or run.framework != self.name or current_actor() is not None:
            return None
        GroupChatManager = sys.modules["autogen"].GroupChatManager  # imported: its methods are patched
        if isinstance(agent, GroupChatManager):
            return None
        try:
            messages = kwargs["messages"] if "messages" in kwargs else args[0] if args else None
            sender = kwargs["sender"] if "sender" in kwargs else args[1] if len(args) > 1 else None
            if messages is None and sender is not None:
                messages = agent.chat_messages.get(sender, [])
            if type(messages) is not list:
                messages = list(messages or ())
            if _ends_silently(agent, messages, sender, call_arg(args, kwargs, "exclude", 2), asynchronous):
                return None
            two_party = not isinstance(sender, GroupChatManager)
            shown = neutral_messages(_unseen(messages, agent, two_party), run)
            return start_step(run.probe, agent.name, run=run, input_messages=shown,
                              description=getattr(agent, "description", None))
        except Exception:
            log_hook_error("ag2 step start")
            return None

    @staticmethod
    def _reply_finisher(step: StepScope) -> Callable[[Any], None]:
        def finish(reply: Any) -> None:
            output = [] if reply is None else [to_neutral(reply, role="assistant")]
            if output and output[0]["content"] and step.run is not None:
                step.run.answer = output[0]["content"]
            step.finish(output)

        return finish

    def _in_own_run(self) -> bool:
        run = current_run()
        return run is not None and run.framework == self.name

    async def _areply(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        step = self._open_step(instance, args, kwargs, asynchronous=True)
        if step is None and not self._in_own_run():
            return await wrapped(*args, **kwargs)
        # Not a step but inside a run (automatic speaker selection's helper agents): hand over the
        # current context, so their model calls are still the run's.
        ctx = step.ctx if step is not None else otel_context.get_current()
        key = (id(instance), id(call_arg(args, kwargs, "sender", 1)))

        async def reply() -> Any:
            self._handoff[key] = ctx  # for a_generate_oai_reply's executor thread
            try:
                return await wrapped(*args, **kwargs)
            finally:
                self._handoff.pop(key, None)

        if step is None:
            return await reply()
        return await await_in_scope(step, reply, self._reply_finisher(step), "ag2 step")

    def _in_thread(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``generate_oai_reply`` in ``a_generate_oai_reply``'s executor thread: attach the handed-over context."""
        ctx = self._handoff.get((id(instance), id(call_arg(args, kwargs, "sender", 1))))
        if ctx is None or current_run() is not None:
            return wrapped(*args, **kwargs)
        token = otel_context.attach(ctx)
        try:
            return wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    def _in_new_loop(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_run_async_in_thread(coro)`` (a sync chat's async tools) awaits ``coro`` on a new loop in a
        new thread: the coroutine attaches the caller's context there."""
        if not self._in_own_run():
            return wrapped(*args, **kwargs)
        coro = kwargs.pop("coro") if "coro" in kwargs else args[0]
        ctx = otel_context.get_current()

        async def attached() -> Any:
            token = otel_context.attach(ctx)
            try:
                return await coro
            finally:
                otel_context.detach(token)

        return wrapped(attached(), *args[1:], **kwargs)

    # -- speaker selection -----------------------------------------------------------------
    @staticmethod
    def _selecting(chat: Any, args: tuple, kwargs: dict) -> Any:
        """The context automatic speaker selection runs in: no step, the manager as the actor (None
        for a method that calls no model: round robin, random, manual)."""
        method = getattr(chat, "speaker_selection_method", None)
        if type(method) is str and method.lower() in _MODEL_FREE_SELECTION:
            return None
        run = current_run()
        if run is None or run.framework != FRAMEWORK:
            return None
        try:
            selector = kwargs["selector"] if "selector" in kwargs else args[1]
            return acting_context(Actor(selector.name, sc.PURPOSE_SPEAKER_SELECTION))
        except Exception:
            log_hook_error("ag2 speaker selection")
            return None

    def _select(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ctx = self._selecting(instance, args, kwargs)
        if ctx is None:
            return wrapped(*args, **kwargs)
        token = otel_context.attach(ctx)
        try:
            return wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    async def _aselect(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        ctx = self._selecting(instance, args, kwargs)
        if ctx is None:
            return await wrapped(*args, **kwargs)
        token = otel_context.attach(ctx)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    # -- tools -----------------------------------------------------------------------------
    def _open_tool(self, agent: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None or run.framework != self.name or not run.probe.active:
            return None
        try:
            call = kwargs["func_call"] if "func_call" in kwargs else args[0]
            call_id = kwargs["call_id"] if "call_id" in kwargs else args[1] if len(args) > 1 else None
            return start_tool(run.probe, str(call.get("name", "")), call_id=call_id, arguments=call.get("arguments"),
                              tool_type="function")
        except Exception:
            log_hook_error("ag2 tool start")
            return None

    @staticmethod
    def _tool_finisher(scope: Any) -> Callable[[Any], None]:
        def finish(outcome: Any) -> None:
            ok, result = outcome
            scope.finish(content_text(result.get("content")) if isinstance(result, dict) else result, is_error=not ok)

        return finish
