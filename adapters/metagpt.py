"""MetaGPT 0.8.2 adapter: ``Team`` and lone ``Role`` apps.

Span shape and where each span comes from (class-level patches, installed once):

- Run (trace root): ``Team.run`` -> ``invoke_workflow {name}``, where ``name`` is the team's class
  name (a plain ``Team`` has no name of its own, and its ``idea``/``investment`` are inputs, not
  identity), its task the ``idea`` given, else the human requirements waiting for its roles
  (``run_project``'s, or what the app published into ``team.env``), else the team's ``idea``; a lone
  ``Role.run`` -> ``invoke_agent {role.name}``. A lone role called with no message and an empty
  buffer is idle and opens no run.
- Step: ``Role.react`` -> ``invoke_agent {role.name}``. metagpt calls ``Role.run`` on every role
  each round, but ``react`` only when the role observed news, so idle rounds make no span.
  ``Environment.run`` starts the roles as tasks in hiring order and each runs until its first
  model request, so step indices (taken when ``react`` starts) follow hiring order within a round
  and are the same on every run of the same inputs. The step's input is the observed news, its
  output the message the role publishes; the last finished step's non-empty output is the run's answer.
  Subclasses that override ``react`` are covered when they call ``super().react()``.
- Tool: ``Role._act`` -> ``execute_tool {action.name}``. metagpt has no function-calling tools;
  an ``Action`` is what a role chose to do (in ``react`` mode the model picks it in ``_think``),
  so each executed action is recorded as the step's tool call, with the action's output as the
  result. The model call of ``_think`` stays outside it, directly under the step; the model calls
  an action makes nest inside it. ``Action.run`` itself is not patched: every action overrides it.
  A ``Role`` subclass's own ``_act`` (metagpt's ``Engineer``, the tutorials' ``SimpleCoder``) is
  wrapped too (classes defined after install when a run starts), one span per action however many
  ``super()._act()`` calls it makes; an ``_act`` with no action to do (``rc.todo`` None) makes none.
- LLM: ``BaseLLM.aask`` (all of metagpt's model calls) -> ``chat {model}`` through
  :func:`aegis_probe.capture.interception.acall_llm` with :class:`MetaGPTCodec`. With interceptors
  (replay, injection) the call first yields to the event loop once, as a request to a model does,
  so an answer that needs no network still lets the round's other roles start first (the order
  above, on which a role's observed history depends); a replayed answer then reaches its role in
  the order the recorded answers came back (:func:`~aegis_probe.counterfactual.order.in_recorded_order`),
  the order in which the round's roles publish and a later role's history lists them. A streamed
  call's pieces (``log_llm_stream``) are held while interceptors decide, then passed on, or a new
  answer streamed word by word (:mod:`~aegis_probe.adapters.metagpt_stream`). Token usage is read from
  the usage the provider hands to ``BaseLLM._update_costs`` during that call (it is passed even
  with ``calc_usage: false``), also a stream's usage sent in a chunk of its own after the finish
  reason (as OpenAI sends it when asked). A stream without any (metagpt never asks OpenAI for
  it) makes metagpt pass its own count, from ``_calc_usage`` (tiktoken, or zeros with
  ``calc_usage: false``): that estimate is left off the span, as is any usage a provider never
  reports (``gen_ai.usage.*`` carry reported counts only).

Errors: a lone role's exception propagates unchanged and marks its spans ERROR, its root with the
error the role raised (metagpt re-raises it as a bare ``Exception`` of its traceback text). ``Team.run``
itself logs, serializes and swallows role errors (metagpt's ``serialize_decorator``) and returns
None; that behaviour is kept, and the run still reads as failed: the first role error (the
original exception, which ``role_raise_decorator`` re-raises as a bare ``Exception`` of its
traceback text) or the budget check's ``NoMoneyException`` (``Team._check_balance``) marks the
root span ERROR with its type, and the run's outcome is failed (``aegis.outcome.success =
false``) unless a judge's verdict says otherwise.

Roles run as ``asyncio`` tasks that copy the context, so steps and model calls of roles inside a
traced run nest under it; roles hired after ``instrument()`` are traced too. Only the app object
(team or lone role) is registered.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

import metagpt.roles  # noqa: F401  (must precede metagpt.team on pydantic>=2.10)
from metagpt.actions import UserRequirement
from metagpt.provider.base_llm import BaseLLM
from metagpt.provider.metagpt_api import MetaGPTLLM
from metagpt.provider.openai_api import OpenAILLM
from metagpt.roles import Role
from metagpt.schema import Message
from metagpt.team import Team
from metagpt.utils.common import any_to_str

from aegis_probe.adapters import metagpt_stream
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, subclasses
from aegis_probe.counterfactual.order import in_recorded_order
from aegis_probe.capture.interception import LLMResponse, acall_llm
from aegis_probe.capture.messages import content_text
from aegis_probe.capture.usage import provider_usage
from aegis_probe.capture.spans import (
    ChatMessage,
    await_in_scope,
    current_run,
    current_step,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe
    from aegis_probe.capture.spans import RunScope

#: metagpt ``api_type`` values whose GenAI ``gen_ai.provider.name`` differs from the value.
_PROVIDERS = {
    "azure": "azure.ai.openai",
    "claude": "anthropic",
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
    "mistral": "mistral_ai",
}
#: ``Message.cause_by`` of a human's requirement (``Team.run_project``).
_USER_REQUIREMENT = any_to_str(UserRequirement)
#: ``BaseLLM.aask`` parameters, in order (metagpt 0.8.2).
_AASK_PARAMS = ("msg", "system_msgs", "format_msgs", "images", "timeout", "stream")


#: (api type, temperature, max tokens, endpoint), each value with its type -> (provider, request attributes).
_REQUEST_INFO: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
_REQUEST_INFO_MAX = 64


def _request_info(config: Any) -> tuple[str, dict[str, Any]]:
    """The API type's provider name and the request attributes of an ``LLMConfig``, built once per
    distinct setting (every model call asks; the config may change between calls, so it is keyed by value)."""
    api_type = getattr(getattr(config, "api_type", None), "value", None) or "openai"
    temperature, max_token, base_url = config.temperature, config.max_token, config.base_url
    key = (api_type, type(temperature), temperature, type(max_token), max_token, type(base_url), base_url)
    info = _REQUEST_INFO.get(key)
    if info is None:
        provider = _PROVIDERS.get(api_type, api_type)
        params = {"temperature": temperature, "max_tokens": max_token}
        attrs = {**sc.request_attributes(params), **sc.server_attributes(base_url),
                 sc.PROVIDER: sc.provider_name(base_url, provider)}
        if len(_REQUEST_INFO) >= _REQUEST_INFO_MAX:
            _REQUEST_INFO.clear()
        info = _REQUEST_INFO[key] = (provider, attrs)
    return info


def _neutral(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"role": message.get("role", "user"), "content": content_text(message.get("content"))}


def _aask_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    named = dict(zip(_AASK_PARAMS, args))
    named.update(kwargs)
    return named


class MetaGPTCodec:
    """One ``BaseLLM.aask`` call: prompt pieces <-> neutral messages, returned text <-> response.

    Made per call, bound to the ``BaseLLM`` (its system prompt fills in for absent
    ``system_msgs``); collects the usage the provider reports during the call.
    """

    def __init__(self, llm: BaseLLM) -> None:
        self.llm = llm
        self.usage: dict[str, Any] | None = None
        self.estimate: Any = None  # the usage metagpt counted itself in this call (not the provider's)
        # :func:`_request_info` of the LLM's config, read once per call (every call asks for both)
        self.provider, self._request_attributes = _request_info(llm.config)

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The sampling parameters metagpt's providers send (``temperature``, ``max_token``), the
        endpoint, and the provider serving it."""
        return dict(self._request_attributes)

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        return getattr(instance, "model", None) or getattr(instance.config, "model", None)

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages ``aask`` sends, assembled the way it assembles them."""
        named = _aask_args(args, kwargs)
        out: list[dict[str, Any]] = []
        if getattr(self.llm, "use_system_prompt", True):
            system = named.get("system_msgs") or [self.llm.system_prompt]
            out += [{"role": "system", "content": s} for s in system]
        out += [_neutral(m) for m in named.get("format_msgs") or ()]
        msg = named.get("msg")
        out += [{"role": "user", "content": msg}] if isinstance(msg, str) else [_neutral(m) for m in msg or ()]
        return out

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[ChatMessage]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``aask`` arguments sending ``messages``: system ones as ``system_msgs``, a final user one as ``msg``.

        With no system message left, ``aask`` adds the LLM's default system prompt again.
        """
        named = _aask_args(args, kwargs)
        system = [str(m.get("content") or "") for m in messages if m.get("role") == "system"]
        rest = [_neutral(m) for m in messages if m.get("role") != "system"]
        msg: Any = rest
        if rest and rest[-1]["role"] == "user":
            msg, rest = rest[-1]["content"], rest[:-1]  # keeps ``images`` attached to the user text
        else:
            rest = []
        named.update(msg=msg, system_msgs=system or None, format_msgs=rest or None)
        return (), named

    def record_usage(self, usage: Any) -> None:
        """Keep the usage handed to ``_update_costs``, unless it is metagpt's own estimate."""
        if usage is not None and usage is self.estimate:
            self.usage = None
            return
        data = usage if type(usage) is dict else usage.model_dump() if hasattr(usage, "model_dump") else usage
        if isinstance(data, dict):
            self.usage = data

    def response(self, raw: Any) -> LLMResponse:
        return LLMResponse(content=None if raw is None else str(raw), **provider_usage(self.usage or {}))

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        return response.content or ""


#: The role whose own (overriding) ``_act`` runs in this task: its ``super()._act()`` is the same action.
_ACTING: contextvars.ContextVar[Role | None] = contextvars.ContextVar("aegis_metagpt_acting", default=None)


#: The errors the ``Team.run`` running in this task swallows: its roles' and its budget check's.
_SWALLOWED: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar("aegis_metagpt_swallowed", default=None)


def _note_swallowed(exc: BaseException) -> None:
    """Keep an error for the team run around it (a role's original one, not metagpt's re-raise)."""
    errors = _SWALLOWED.get()
    if errors is not None:
        errors.append(_original(exc))


def _original(exc: BaseException) -> BaseException:
    """The error a role raised, for one metagpt re-raised as a bare ``Exception`` of its traceback
    text (``role_raise_decorator``); any other error as it is."""
    cause = exc.__context__
    return cause if type(exc) is Exception and cause is not None else exc


def _requirement(team: Team) -> str | None:
    """What a ``Team.run`` without an idea works on: the human requirements (``UserRequirement``
    messages, ``run_project``'s or any the app published through ``team.env.publish_message``)
    waiting for a role, each once, in order; else the team's ``idea`` (a run that continues the
    project, or a team deserialized with one)."""
    waiting: dict[str, str] = {}
    try:
        for role in team.env.roles.values():
            for message in list(role.rc.msg_buffer._queue._queue):  # metagpt 0.8.2's MessageQueue has no peek
                if message.cause_by == _USER_REQUIREMENT and (message.cause_by in role.rc.watch or role.name in message.send_to):
                    waiting.setdefault(message.id, message.content)
    except Exception:
        log_hook_error("team run task")
    return "\n".join(waiting.values()) or team.idea or None


async def _noting_swallowed(call: Awaitable[Any]) -> Any:
    """Await ``call``, noting its error for the team run around it (if any)."""
    try:
        return await call
    except Exception as exc:
        _note_swallowed(exc)
        raise


#: The LLM classes of metagpt 0.8.2 that count a streamed answer's tokens themselves (``_calc_usage``)
#: when the stream carries no usage.
_ESTIMATING = (OpenAILLM, MetaGPTLLM)

#: The codec of the ``aask`` call running in this task (for the usage hooks).
_ACTIVE_CALL: contextvars.ContextVar[MetaGPTCodec | None] = contextvars.ContextVar("aegis_metagpt_call", default=None)


def _task_text(message: Any) -> str | None:
    """The task text of a ``Role.run(with_message)`` argument (str, Message or list of str)."""
    if isinstance(message, Message):
        return message.content
    if isinstance(message, list):
        return "\n".join(map(str, message))
    return message or None


def _has_input(role: Role, with_message: Any) -> bool:
    """Whether ``Role.run`` can observe anything (else it returns None at once)."""
    return bool(with_message) or not role.rc.msg_buffer.empty() or bool(role.recovered and role.latest_observed_msg)


async def _in_run(run: "RunScope", call: Callable[[], Awaitable[Any]], swallowed: Sequence[BaseException] = ()) -> Any:
    """Await ``call()`` with ``run`` current, then finish the run (hook errors logged).

    A returning call whose ``swallowed`` errors are not empty fails the run with the first one,
    its outcome preset to failed (a judge's verdict, written when the run finishes, wins).
    """
    token = run.attach()
    try:
        result = await call()
    except BaseException as exc:
        try:
            run.finish(_original(exc))
        except Exception:
            log_hook_error("run end")
        raise
    finally:
        run.detach(token)
    try:
        if swallowed:
            run.span.set_attribute(sc.OUTCOME_SUCCESS, False)
        run.finish(swallowed[0] if swallowed else None)
    except Exception:
        log_hook_error("run end")
    return result


class MetaGPTAdapter(Adapter):
    """Traces metagpt ``Team`` runs and lone ``Role`` runs."""

    name = "metagpt"

    def __init__(self) -> None:
        super().__init__()
        self._patched: set[type] = set()  # Role subclasses whose own ``_act`` is wrapped

    def detect(self, app: Any) -> bool:
        return isinstance(app, (Team, Role))

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        self.registry.add(app, probe)
        self.sync()
        if isinstance(app, Team):
            return AppInfo(type(app).__name__, False, tuple(r.name for r in app.env.roles.values()))
        return AppInfo(app.name, True, (app.name,))

    def _instrument(self, patcher: Patcher) -> None:
        patcher.wrap(Team, "run", self._team_run)
        patcher.wrap(Team, "_check_balance", self._check_balance)
        patcher.wrap(Role, "run", self._role_run)
        patcher.wrap(Role, "react", self._react)
        patcher.wrap(Role, "_act", self._act)
        patcher.wrap(BaseLLM, "aask", self._aask)
        patcher.wrap(BaseLLM, "_update_costs", self._update_costs, enabled=_ACTIVE_CALL.get)  # only inside a traced ``aask``
        for llm_class in _ESTIMATING:
            patcher.wrap(llm_class, "_calc_usage", self._calc_usage, enabled=_ACTIVE_CALL.get)
        self._patched.clear()  # (left as it was by uninstall, which does not sync)
        self.sync_patches()

    def sync_patches(self, **_: Any) -> None:
        """Wrap the ``_act`` of every ``Role`` subclass that overrides it (metagpt's ``Engineer``, an
        app's ``SimpleCoder``), defined since the last call too: its action is the step's tool call."""
        for cls in subclasses(Role):
            if cls is not Role and cls not in self._patched and "_act" in vars(cls):
                self._patched.add(cls)  # tried once: a class that refuses the patch keeps its own
                try:
                    self._patcher.wrap(cls, "_act", self._own_act)
                except Exception:
                    log_hook_error(f"patching {cls.__qualname__}._act")

    # -- runs ------------------------------------------------------------------------------
    def _start(self, app: Any, name: str, task: str | None, lone: bool) -> "RunScope | None":
        if current_run() is not None:
            return None
        probe = self.run_probe(app)
        if probe is None:
            return None
        return start_run(probe, name, framework=self.name, task=task, lone_agent=lone)

    async def _team_run(self, wrapped: Callable[..., Any], instance: Team, args: tuple, kwargs: dict) -> Any:
        try:
            idea = args[1] if len(args) > 1 else kwargs.get("idea")
            run = self._start(instance, type(instance).__name__, idea or _requirement(instance), lone=False)
        except Exception:
            log_hook_error("team run start")
            run = None
        if run is None:
            return await wrapped(*args, **kwargs)
        self.sync()  # role classes defined after install (trace-every-app mode)
        errors: list[BaseException] = []
        token = _SWALLOWED.set(errors)
        try:
            return await _in_run(run, lambda: wrapped(*args, **kwargs), errors)
        finally:
            _SWALLOWED.reset(token)

    @staticmethod
    def _check_balance(wrapped: Callable[..., Any], instance: Team, args: tuple, kwargs: dict) -> Any:
        """``Team._check_balance``: its ``NoMoneyException`` ends the run, and ``Team.run`` swallows it."""
        try:
            return wrapped(*args, **kwargs)
        except Exception as exc:
            _note_swallowed(exc)
            raise

    def _role_run(self, wrapped: Callable[..., Any], instance: Role, args: tuple, kwargs: dict) -> Awaitable[Any]:
        """``Role.run``: a role of a traced team's round only has its error noted (no frame of this
        hook's own); any other may start a lone role's run."""
        if _SWALLOWED.get() is not None:
            return _noting_swallowed(wrapped(*args, **kwargs))
        return self._lone_run(wrapped, instance, args, kwargs)

    async def _lone_run(self, wrapped: Callable[..., Any], instance: Role, args: tuple, kwargs: dict) -> Any:
        try:
            message = args[0] if args else kwargs.get("with_message")
            idle = not _has_input(instance, message)
            run = None if idle else self._start(instance, instance.name, _task_text(message), lone=True)
        except Exception:
            log_hook_error("role run start")
            run = None
        if run is None:
            return await _noting_swallowed(wrapped(*args, **kwargs))
        self.sync()
        return await _in_run(run, lambda: wrapped(*args, **kwargs))

    # -- steps and actions -----------------------------------------------------------------
    # ``react`` and ``_act`` hooks return the awaitable (the wrapped coroutine, or the core's scope
    # around it) instead of awaiting it: no frame of their own. metagpt awaits both at once, so the
    # span starts when the awaiting starts, as before.
    def _react(self, wrapped: Callable[..., Any], instance: Role, args: tuple, kwargs: dict) -> Awaitable[Any]:
        run = current_run()
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            news = instance.rc.news
            step = start_step(
                run.probe, instance.name, run=run, agent_id=instance.role_id or None,
                description=instance.goal or None, role=instance.profile or None,
                # the news as neutral chat messages, the sender's role/profile as ``name`` (one call less per step)
                input_messages=lambda: [{"role": "user", "name": m.role, "content": m.content} for m in news],
            )
        except Exception:
            log_hook_error("step start")
            return wrapped(*args, **kwargs)

        def finish(rsp: Any) -> None:
            content = rsp.content if isinstance(rsp, Message) else None if rsp is None else str(rsp)
            step.finish(None if content is None else lambda: [{"role": "assistant", "name": instance.name, "content": content}])
            if content:  # a role that publishes nothing (an empty message) leaves the answer as it was
                run.answer = content

        return await_in_scope(step, lambda: wrapped(*args, **kwargs), finish, "step")

    def _act(self, wrapped: Callable[..., Any], instance: Role, args: tuple, kwargs: dict) -> Awaitable[Any]:
        step = current_step()
        if step is None or _ACTING.get() is instance:  # outside steps, or the action's span is open
            return wrapped(*args, **kwargs)
        try:
            todo = instance.rc.todo  # None: an overriding ``_act`` of a role without actions, nothing to record
            tool = None if todo is None else start_tool(step.probe, getattr(todo, "name", None) or type(todo).__name__,
                                                        description=getattr(todo, "desc", None) or None)
        except Exception:
            log_hook_error("action start")
            tool = None
        if tool is None:
            return wrapped(*args, **kwargs)
        return await_in_scope(tool, lambda: wrapped(*args, **kwargs),
                              lambda msg: tool.finish(msg.content if isinstance(msg, Message) else msg), "action")

    async def _own_act(self, wrapped: Callable[..., Any], instance: Role, args: tuple, kwargs: dict) -> Any:
        """A subclass's own ``_act``: the action's span (:meth:`_act`), once however many
        ``super()._act()`` calls (each an ``_act`` of a class up the chain) it makes."""
        if _ACTING.get() is instance:
            return await wrapped(*args, **kwargs)
        acting = self._act(wrapped, instance, args, kwargs)  # opens the span now, if any
        token = _ACTING.set(instance)
        try:
            return await acting
        finally:
            _ACTING.reset(token)

    # -- model calls -----------------------------------------------------------------------
    async def _aask(self, wrapped: Callable[..., Any], instance: BaseLLM, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None:
            return await wrapped(*args, **kwargs)
        if run.probe.interceptors:
            # A model request suspends the role, letting the round's other roles start (and observe)
            # before it publishes; an answer from an interceptor (replay, injection) must too.
            await asyncio.sleep(0)
        try:
            codec = MetaGPTCodec(instance)
        except Exception:
            log_hook_error("llm call start")
            return await wrapped(*args, **kwargs)
        token = _ACTIVE_CALL.set(codec)
        try:
            if not run.probe.interceptors:  # nothing replayed: no order to keep, no pieces to hold
                return await acall_llm(run.probe, codec, wrapped, instance, args, kwargs)
            if metagpt_stream.streams(instance, args, kwargs, _AASK_PARAMS.index("stream")):
                return await self._held_aask(run.probe, codec, wrapped, instance, args, kwargs)
            return await in_recorded_order(acall_llm(run.probe, codec, wrapped, instance, args, kwargs))
        finally:
            _ACTIVE_CALL.reset(token)

    @staticmethod
    async def _held_aask(probe: "Probe", codec: "MetaGPTCodec", wrapped: Callable[..., Any], instance: BaseLLM,
                         args: tuple, kwargs: dict) -> Any:
        """A streamed ``aask`` under interceptors: its live pieces held while they decide, then
        passed on, or the new answer streamed instead (:mod:`~aegis_probe.adapters.metagpt_stream`)."""
        live: list[Any] = []

        async def call(*a: Any, **k: Any) -> Any:
            live.append(await wrapped(*a, **k))
            return live[-1]

        with metagpt_stream.held_pieces() as held:
            answer = await in_recorded_order(acall_llm(probe, codec, call, instance, args, kwargs))
        try:
            metagpt_stream.send(held if live and answer is live[0] else metagpt_stream.answer_pieces(answer))
        except Exception:
            log_hook_error("llm stream hand-on")
        return answer

    @staticmethod
    def _update_costs(wrapped: Callable[..., Any], instance: BaseLLM, args: tuple, kwargs: dict) -> Any:
        codec = _ACTIVE_CALL.get()
        if codec is not None and codec.llm is instance:
            try:
                codec.record_usage(args[0] if args else kwargs.get("usage"))
            except Exception:
                log_hook_error("usage")
        return wrapped(*args, **kwargs)

    @staticmethod
    def _calc_usage(wrapped: Callable[..., Any], instance: BaseLLM, args: tuple, kwargs: dict) -> Any:
        """``OpenAILLM._calc_usage``: metagpt's own count, noted so that it is not recorded as reported."""
        usage = wrapped(*args, **kwargs)
        codec = _ACTIVE_CALL.get()
        if codec is not None and codec.llm is instance:
            codec.estimate = usage
        return usage
