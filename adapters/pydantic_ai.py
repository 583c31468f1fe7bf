"""Pydantic AI (pydantic-ai-slim 2.68) adapter: an ``Agent`` is the app.

Class-level patches, installed once:

- run entry: ``Agent.iter`` (``run``, ``run_sync``, ``run_stream``, ``run_stream_events`` all go
  through it) of a registered agent, outside any run: one run per call, ``invoke_workflow
  {agent.name}``, its task the user prompt, its answer the run's output. An ``iter`` inside a run (an
  agent another agent delegates to from a tool) opens no run: its turns are steps of the run,
  nested under the tool's ``execute_tool`` span;
- agent step: one turn of an agent run, ``invoke_agent {agent.name}``: a ``ModelRequestNode``
  (its model call, ``run`` or ``stream``) and the ``CallToolsNode`` that handles its response (the
  tools it called, ``stream``, which its ``run`` enters too). Its input is the turn's ``ModelRequest`` (the user prompt, or the tools'
  results of the turn before), its output the model's response;
- LLM call: ``pydantic_ai.models.Model.request`` / ``request_stream``, Pydantic AI's own model
  abstraction, on every subclass (every provider, ``FunctionModel``, ``TestModel``, a user's own
  model class, also one defined after ``instrument()``); a model delegating to another (a
  ``WrapperModel``, ``FallbackModel``) is one ``chat`` span, the outer call;
- tool call: ``ToolManager.execute_tool_call`` -> ``execute_tool {tool}``; a tool's exception (a
  ``ModelRetry`` too) fails the span.

Pydantic AI's own instrumentation (``Agent(instrument=True)``, ``Agent.instrument_all()``,
logfire) is kept out of instrumented runs: its ``Instrumentation`` capability gets, for such a run,
a tracer that records nothing (its spans would repeat our steps, model and tool calls) and
histograms that record nothing (its token counts would repeat ours). Outside instrumented runs it
works as configured.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Sequence

from opentelemetry.metrics import Histogram, NoOpHistogram

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, call_arg, subclasses
from aegis_probe.capture.coexist import SILENT
from aegis_probe.capture.interception import LLMResponse, acall_llm, aopen_llm_stream
from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import content_text
from aegis_probe.capture.spans import (
    RunScope,
    StepScope,
    attached,
    await_in_scope,
    current_run,
    in_llm_call,
    iterate_in_scope,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

FRAMEWORK = "pydantic-ai"

#: Pydantic AI's finish reasons that OpenAI (the value the other adapters record) names otherwise.
_FINISH_TO_OPENAI = {"tool_call": "tool_calls"}
_FINISH_FROM_OPENAI = {v: k for k, v in _FINISH_TO_OPENAI.items()}


# -- messages --------------------------------------------------------------------------------
def _content(content: Any) -> str:
    """Text of a user prompt: a string, or its parts by the shared rule (a part without text as ``[its type]``)."""
    if isinstance(content, str):
        return content
    parts: list[Any] = []
    for part in content or ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(getattr(part, "content", None), str):  # TextContent
            parts.append({"type": "text", "text": part.content})
        else:
            parts.append({"type": getattr(part, "kind", None) or type(part).__name__})
    return content_text(parts)


def _request_part(part: Any) -> dict[str, Any] | None:
    """The neutral message of one ``ModelRequest`` part (None for parts the model is not sent as a message)."""
    kind = getattr(part, "part_kind", None)
    if kind == "system-prompt":
        return {"role": "system", "content": str(part.content)}
    if kind == "user-prompt":
        return {"role": "user", "content": _content(part.content)}
    call_id = getattr(part, "tool_call_id", None)
    if hasattr(part, "model_response_str"):  # a tool's return
        return {"role": "tool", "content": part.model_response_str(), "tool_call_id": call_id}
    if hasattr(part, "model_response"):  # a retry prompt: to a tool call, else to the model's output
        text = part.model_response()
        if getattr(part, "tool_name", None) is not None and call_id:
            return {"role": "tool", "content": text, "tool_call_id": call_id}
        return {"role": "user", "content": text}
    return None


def response_message(response: Any) -> dict[str, Any]:
    """The neutral assistant message of a ``ModelResponse``: its text parts, and its tool calls."""
    from pydantic_ai.messages import TextPart, ToolCallPart

    texts = [p.content for p in response.parts if isinstance(p, TextPart)]
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    calls = [{"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_json_str()}
             for p in response.parts if isinstance(p, ToolCallPart)]
    if calls:
        message["tool_calls"] = calls
    return message


def _instructions(messages: Sequence[Any]) -> str | None:
    """The instructions the request is sent with: the last ``ModelRequest``'s."""
    return next((m.instructions for m in reversed(messages) if getattr(m, "kind", None) == "request"), None)


def request_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Neutral messages of a model request's ``ModelRequest``/``ModelResponse`` history (its
    instructions first, as the system message they are sent as)."""
    out: list[dict[str, Any]] = []
    instructions = _instructions(messages)
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if getattr(message, "kind", None) == "response":
            out.append(response_message(message))
            continue
        out.extend(m for m in map(_request_part, getattr(message, "parts", ())) if m is not None)
    return out


def _as_model_messages(neutral: Sequence[Any], original: Sequence[Any]) -> list[Any]:
    """Pydantic AI messages carrying ``neutral`` (an injected prompt): user, system and tool messages
    in a row make one ``ModelRequest``, an assistant message a ``ModelResponse``; the leading system
    message is the instructions when the original request had them."""
    from pydantic_ai.messages import ModelRequest, SystemPromptPart, ToolReturnPart, UserPromptPart

    neutral = list(neutral)
    instructions = _instructions(original)
    if instructions and neutral and neutral[0].get("role") == "system":
        instructions = str(neutral.pop(0).get("content") or "")
    tool_names: dict[Any, str] = {}
    out: list[Any] = []
    parts: list[Any] = []
    for message in neutral:
        role, text = message.get("role"), str(message.get("content") or "")
        if role == "assistant":
            if parts:
                out.append(ModelRequest(parts=parts))
                parts = []
            out.append(_response(None, _neutral_response(message)))
            tool_names.update((c.get("id"), str(c.get("name"))) for c in message.get("tool_calls") or ())
        elif role == "system":
            parts.append(SystemPromptPart(content=text))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            parts.append(ToolReturnPart(tool_name=tool_names.get(call_id, ""), content=text, tool_call_id=call_id))
        else:
            parts.append(UserPromptPart(content=text))
    if parts:
        out.append(ModelRequest(parts=parts))
    last = next((m for m in reversed(out) if m.kind == "request"), None)
    if last is not None:
        last.instructions = instructions
    return out


def _neutral_response(message: dict[str, Any]) -> LLMResponse:
    return LLMResponse(content=message.get("content"), tool_calls=list(message.get("tool_calls") or ()))


def _response(raw: Any, response: LLMResponse) -> Any:
    """A ``ModelResponse`` carrying ``response`` (``raw``, the model's own, keeps its other fields)."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.usage import RequestUsage

    parts: list[Any] = [TextPart(content=response.content)] if response.content else []
    parts += [ToolCallPart(tool_name=c["name"], args=c.get("arguments") or None, tool_call_id=str(c.get("id") or ""))
              for c in response.tool_calls]
    finish = _FINISH_FROM_OPENAI.get(response.finish_reason or "", response.finish_reason)
    fields: dict[str, Any] = {
        "parts": parts,
        "usage": RequestUsage(input_tokens=response.input_tokens or 0, output_tokens=response.output_tokens or 0),
        "finish_reason": finish,
        "provider_response_id": response.id,
    }
    if response.model:
        fields["model_name"] = response.model
    if raw is None:
        return ModelResponse(**fields)
    return dataclasses.replace(raw, **fields)


def _arguments(call: Any) -> Any:
    """A tool call's arguments as data (the model's JSON text, or a replayed answer's dict, read alike)."""
    try:
        return call.args_as_dict()
    except Exception:
        return call.args


class PydanticAICodec:
    """``Model.request(messages, model_settings, model_request_parameters)`` and its ``ModelResponse``."""

    provider = "pydantic_ai"

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        name = getattr(instance, "model_name", None)
        return name if isinstance(name, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        settings = call_arg(args, kwargs, "model_settings", 1)
        url = getattr(instance, "base_url", None)
        system = getattr(instance, "system", None)
        attrs = {**sc.request_attributes(settings or {}), **sc.server_attributes(url)}
        attrs[sc.PROVIDER] = sc.provider_name(url, system if isinstance(system, str) and system else self.provider)
        return attrs

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        return request_messages(call_arg(args, kwargs, "messages", 0) or ())

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        rebuilt = _as_model_messages(messages, call_arg(args, kwargs, "messages", 0) or ())
        if "messages" in kwargs:
            return args, {**kwargs, "messages": rebuilt}
        return (rebuilt, *args[1:]), kwargs

    def response(self, raw: Any) -> LLMResponse:
        message = response_message(raw)
        usage = raw.usage
        finish = raw.finish_reason
        return LLMResponse(
            content=message["content"], tool_calls=message.get("tool_calls", []),
            input_tokens=usage.input_tokens if usage is not None else None,
            output_tokens=usage.output_tokens if usage is not None else None,
            model=raw.model_name, finish_reason=_FINISH_TO_OPENAI.get(finish or "", finish), id=raw.provider_response_id,
        )

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        return _response(raw, response)


class StreamedResponses:
    """``Model.request_stream``'s ``StreamedResponse``: read by ``get()``; an answer given back as a
    ``CompletedStreamedResponse`` replaying it as events."""

    def final(self, stream: Any) -> Any:
        return stream.get()

    async def drain(self, stream: Any) -> Any:
        async for _ in stream:
            pass
        return stream.get()

    def as_stream(self, raw: Any, args: tuple, kwargs: dict) -> Any:
        from pydantic_ai.models import CompletedStreamedResponse

        params = call_arg(args, kwargs, "model_request_parameters", 2)
        return CompletedStreamedResponse(raw, model_request_parameters=params, replay_events=True)


# -- runs and steps ---------------------------------------------------------------------------
@dataclasses.dataclass
class _AgentRun:
    """One ``Agent.iter`` inside a run: its agent, and the step of its turn in progress."""

    name: str
    description: str | None
    step: StepScope | None = None
    response: Any = None  #: the model's response in the step in progress

    def close_step(self, exc: BaseException | None = None) -> None:
        step, self.step = self.step, None
        if step is None:
            return
        if exc is not None:
            step.fail(exc)
        else:
            response = self.response
            step.finish(None if response is None else lambda: [response_message(response)])
        self.response = None


_AGENT_RUN: ContextVar[_AgentRun | None] = ContextVar("aegis_pydantic_ai_agent_run", default=None)


def _task_text(prompt: Any) -> str | None:
    return None if prompt is None else _content(prompt)


class _TracedIter:
    """``Agent.iter``'s async context manager, inside a run: opens the run when it is the outermost
    (``run``), and makes the agent the one whose turns the run's nodes are steps of."""

    def __init__(self, manager: Any, agent: Any, run: RunScope | None) -> None:
        self.manager, self.agent, self.run = manager, agent, run
        self.agent_run = _AgentRun(agent.name or "agent", _description(agent))
        self.tokens: tuple[Any, Any] | None = None
        self.result: Any = None

    async def __aenter__(self) -> Any:
        self.tokens = (None if self.run is None else self.run.attach(), _AGENT_RUN.set(self.agent_run))
        try:
            self.result = await self.manager.__aenter__()
        except BaseException as exc:
            self._end(exc)
            raise
        return self.result

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            suppress = await self.manager.__aexit__(exc_type, exc, tb)
        except BaseException as raised:
            self._end(raised)
            raise
        self._end(None if suppress else exc)
        return suppress

    def _end(self, exc: BaseException | None) -> None:
        try:
            self.agent_run.close_step(exc)
        except Exception:
            log_hook_error("pydantic-ai step end")
        if self.tokens is not None:
            run_token, agent_token = self.tokens
            self.tokens = None
            try:
                _AGENT_RUN.reset(agent_token)
            except ValueError:  # entered in another context
                log_hook_error("pydantic-ai run context")
            if self.run is not None:
                self.run.detach(run_token)
        if self.run is None:
            return
        try:
            output = getattr(getattr(self.result, "result", None), "output", None)
            if output is not None:
                self.run.answer = output if isinstance(output, str) else json_text(output)
        except Exception:
            log_hook_error("pydantic-ai run end")
        self.run.finish(exc)


def _description(agent: Any) -> str | None:
    try:
        description = agent.description
    except Exception:
        return None
    return description if isinstance(description, str) else None


class _NodeStream:
    """A node's ``stream`` context manager with the turn's step current while it opens and closes."""

    def __init__(self, manager: Any, agent_run: _AgentRun, step: StepScope, node: Any, ends_turn: bool) -> None:
        self.manager, self.agent_run, self.step, self.node, self.ends_turn = manager, agent_run, step, node, ends_turn

    async def __aenter__(self) -> Any:
        try:
            with attached(self.step):
                entered = await self.manager.__aenter__()
        except BaseException as exc:
            self.agent_run.close_step(exc)
            raise
        # A CallToolsNode's events: its tools run as they are read, each with the step current.
        return iterate_in_scope(entered, self.step) if self.ends_turn else entered

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            with attached(self.step):
                suppress = await self.manager.__aexit__(exc_type, exc, tb)
        except BaseException as raised:
            self.agent_run.close_step(raised)
            raise
        try:
            if exc is not None and not suppress:
                self.agent_run.close_step(exc)
            elif self.ends_turn:
                self.agent_run.close_step()
            else:
                self.agent_run.response = getattr(self.node._result, "model_response", self.agent_run.response)
        except Exception:
            log_hook_error("pydantic-ai step end")
        return suppress


class PydanticAIAdapter(Adapter):
    """Traces Pydantic AI agent runs: one step per agent turn."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.codec = PydanticAICodec()
        self.streams = StreamedResponses()

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        agent_type = getattr(sys.modules.get("pydantic_ai.agent"), "AbstractAgent", None)
        return isinstance(agent_type, type) and isinstance(app, agent_type)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        agents = [app]
        while hasattr(agents[-1], "wrapped") and self.detect(agents[-1].wrapped):  # a WrapperAgent (durable execution)
            agents.append(agents[-1].wrapped)
        for agent in agents:
            self.registry.add(agent, probe)
        name = app.name or "agent"
        return AppInfo(name=name, lone_agent=False, agents=(name,))

    def _instrument(self, patcher: Patcher) -> None:
        from pydantic_ai import Agent
        from pydantic_ai._agent_graph import CallToolsNode, ModelRequestNode
        from pydantic_ai.capabilities.instrumentation import Instrumentation
        from pydantic_ai.tool_manager import ToolManager

        patcher.wrap(Agent, "iter", self._iter)
        patcher.wrap(ModelRequestNode, "run", self._model_request_node)
        patcher.wrap(ModelRequestNode, "stream", self._model_request_stream)
        patcher.wrap(CallToolsNode, "stream", self._call_tools_stream)
        patcher.wrap(ToolManager, "execute_tool_call", self._tool)
        patcher.wrap(Instrumentation, "for_run", self._own_instrumentation)
        self.sync_patches()

    def sync_patches(self, **options: Any) -> None:
        """Wrap ``request``/``request_stream`` of every ``Model`` class that defines its own (a
        class defined after ``instrument()`` too: synced when a run starts)."""
        from pydantic_ai.models import Model

        for cls in subclasses(Model):
            own = vars(cls)
            if "request" in own and not getattr(own["request"], "__isabstractmethod__", False):
                self._patcher.wrap(cls, "request", self._request)
            if "request_stream" in own:
                self._patcher.wrap(cls, "request_stream", self._request_stream)

    @staticmethod
    def _probe() -> "Probe | None":
        run = current_run()
        return run.probe if run is not None and run.framework == FRAMEWORK and run.probe.active else None

    # -- runs ------------------------------------------------------------------------------
    def _iter(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        manager = wrapped(*args, **kwargs)
        try:
            outer = current_run()
            if outer is not None:
                return _TracedIter(manager, instance, None) if outer.framework == FRAMEWORK else manager
            probe = self.run_probe(instance)
            if probe is None:
                return manager
            self.sync()
            conversation = kwargs.get("conversation_id")
            run = start_run(probe, instance.name or "agent", framework=self.name,
                            task=_task_text(call_arg(args, kwargs, "user_prompt", 0)),
                            conversation_id=None if conversation in (None, "new") else str(conversation))
            return _TracedIter(manager, instance, run)
        except Exception:
            log_hook_error("pydantic-ai run start")
            return manager

    # -- steps (agent turns) ---------------------------------------------------------------
    def _open_turn(self, node: Any) -> tuple[_AgentRun, StepScope] | None:
        """The agent run and a new step for a ``ModelRequestNode`` (closing the one before, a retried turn)."""
        agent_run, run = _AGENT_RUN.get(), current_run()
        if agent_run is None or run is None or run.framework != FRAMEWORK or node._result is not None:
            return None
        try:
            agent_run.close_step()
            request = node.request
            agent_run.step = start_step(run.probe, agent_run.name, run=run, description=agent_run.description,
                                        input_messages=lambda: request_messages([request]))
            return agent_run, agent_run.step
        except Exception:
            log_hook_error("pydantic-ai step start")
            return None

    def _turn_of_tools(self) -> tuple[_AgentRun, StepScope] | None:
        """The agent run and its step in progress for a ``CallToolsNode`` (a new one when there is none:
        a run resumed with tool results)."""
        agent_run, run = _AGENT_RUN.get(), current_run()
        if agent_run is None or run is None or run.framework != FRAMEWORK:
            return None
        if agent_run.step is None:
            try:
                agent_run.step = start_step(run.probe, agent_run.name, run=run, description=agent_run.description)
            except Exception:
                log_hook_error("pydantic-ai step start")
                return None
        return agent_run, agent_run.step

    async def _model_request_node(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        turn = self._open_turn(instance)
        if turn is None:
            return await wrapped(*args, **kwargs)
        agent_run, step = turn
        try:
            with attached(step):
                result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            agent_run.close_step(exc)
            raise
        agent_run.response = getattr(result, "model_response", None)
        return result

    def _model_request_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        turn = self._open_turn(instance)
        manager = wrapped(*args, **kwargs)
        return manager if turn is None else _NodeStream(manager, turn[0], turn[1], instance, ends_turn=False)

    def _call_tools_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``CallToolsNode.stream`` (``run`` enters it too): the tools run as its events are read."""
        manager = wrapped(*args, **kwargs)
        if instance._next_node is not None:  # streamed already (run_stream, then the graph's run)
            return manager
        turn = self._turn_of_tools()
        if turn is None:
            return manager
        turn[0].response = instance.model_response
        return _NodeStream(manager, turn[0], turn[1], instance, ends_turn=True)

    # -- model and tool calls --------------------------------------------------------------
    async def _request(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None or in_llm_call():  # outside runs, or a model delegating to another
            return await wrapped(*args, **kwargs)
        return await acall_llm(probe, self.codec, wrapped, instance, args, kwargs)

    def _request_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None or in_llm_call():
            return wrapped(*args, **kwargs)
        return aopen_llm_stream(probe, self.codec, self.streams, wrapped, instance, args, kwargs)

    async def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        try:
            validated = call_arg(args, kwargs, "validated", 0)
            call = validated.call
            tool = validated.tool
            scope = start_tool(probe, call.tool_name, call_id=call.tool_call_id, arguments=_arguments(call),
                               description=tool.tool_def.description if tool is not None else None,
                               tool_type="function")
        except Exception:
            log_hook_error("pydantic-ai tool start")
            return await wrapped(*args, **kwargs)
        return await await_in_scope(scope, lambda: wrapped(*args, **kwargs), scope.finish, "pydantic-ai tool")

    async def _own_instrumentation(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``Instrumentation.for_run``: in an instrumented run, its copy for the run records no span
        and no metric (its token counts would repeat ours)."""
        inst = await wrapped(*args, **kwargs)
        if self._probe() is not None:
            try:
                settings = copy.copy(inst.settings)
                settings.tracer = SILENT
                for name, value in list(vars(settings).items()):
                    if isinstance(value, Histogram):
                        setattr(settings, name, NoOpHistogram(name))
                inst.settings = settings
            except Exception:
                log_hook_error("pydantic-ai instrumentation")
        return inst
