"""smolagents (1.26) adapter: a ``MultiStepAgent`` (``ToolCallingAgent``, ``CodeAgent``, a user's
subclass) is the app.

Class-level patches, installed once:

- run entry: ``MultiStepAgent.run`` of a registered agent, outside any run: one run per call,
  ``invoke_workflow {agent.name}``, its task the task given, its answer the final answer (with
  ``stream=True`` the run lasts as long as the app reads the steps it yields). A ``run`` inside a
  run (a managed agent its manager calls) opens no run: its steps are steps of the same run;
- managed agent: ``MultiStepAgent.__call__`` inside a run (how a manager calls a member of its
  team, as a tool) -> ``execute_tool {agent.name}`` in the manager's step; the managed agent's
  steps nest under it and carry the managers above them as ``aegis.agent.path``;
- agent step: one ``invoke_agent {agent.name}`` per ``ActionStep`` (``_step_stream`` of every
  agent class defining it), per ``PlanningStep`` (``_generate_planning_step``) and for the final
  answer asked for when ``max_steps`` ran out (``provide_final_answer``). Its input is what the
  agent's memory gained since its last model output (the task, or the observations and errors of
  the step before), its output the model's message;
- LLM call: ``smolagents.models.Model.generate`` / ``generate_stream``, smolagents' own model
  abstraction, on every subclass that defines them (``OpenAIServerModel``, ``LiteLLMModel``,
  ``InferenceClientModel``, ``TransformersModel``, ..., a user's own model class, also one
  defined after ``instrument()``); a model delegating to another is one ``chat`` span, the outer;
- tool call: ``Tool.__call__`` (of every class defining it) -> ``execute_tool {tool.name}``:
  ``ToolCallingAgent``'s tool calls and the tools a ``CodeAgent``'s generated code calls through
  its local Python executor (run in a worker thread: ``local_python_executor.timeout`` gives it
  the caller's context); a tool's exception fails the span and reaches the agent unchanged.

smolagents has no telemetry of its own (its ``Monitor`` counts tokens and logs); OpenInference's
``SmolagentsInstrumentor`` is a separate, opt-in package (see docs/adapters.md).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from contextvars import ContextVar, copy_context
from typing import TYPE_CHECKING, Any, Sequence

from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, call_arg, subclasses
from aegis_probe.capture.interception import LLMResponse, call_llm, call_llm_chunks, text_pieces
from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.messages import content_text
from aegis_probe.capture.spans import (
    StepScope,
    call_in_scope,
    current_run,
    current_step,
    in_llm_call,
    iterate_sync_in_scope,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

FRAMEWORK = "smolagents"

#: Whether the model call in progress offers the ``final_answer`` tool (a ``ToolCallingAgent``'s does).
_ANSWER_TOOL: ContextVar[bool] = ContextVar("aegis_smolagents_answer_tool", default=False)

#: smolagents' message roles as the model is sent them (``tool-call``/``tool-response``: its
#: records of a step's tool calls and observations, sent as assistant and user messages).
_ROLES = {"tool-call": "assistant", "tool-response": "user"}


# -- messages --------------------------------------------------------------------------------
def _role(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
    role = str(getattr(role, "value", role) or "user")
    return _ROLES.get(role, role)


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    """Neutral tool calls of a ``ChatMessage``'s ``ChatMessageToolCall`` list (arguments as JSON text)."""
    out = []
    for call in calls or ():
        function = call.function
        arguments = function.arguments
        out.append({"id": call.id, "name": function.name,
                    "arguments": arguments if isinstance(arguments, str) else json_text(arguments)})
    return out


def neutral_message(message: Any) -> dict[str, Any]:
    """The neutral form of a smolagents ``ChatMessage`` (or a message dict)."""
    content = message.get("content") if isinstance(message, dict) else message.content
    out: dict[str, Any] = {"role": _role(message), "content": content_text(content)}
    calls = None if isinstance(message, dict) else message.tool_calls
    if calls:
        out["tool_calls"] = _tool_calls(calls)
    return out


def _chat_message(message: dict[str, Any]) -> Any:
    """A smolagents ``ChatMessage`` carrying a neutral message (a changed or added one of a prompt)."""
    from smolagents.models import ChatMessage, MessageRole

    role = str(message.get("role") or "user")
    text = str(message.get("content") or "")
    if role == "tool":  # an observation, as smolagents sends them
        return ChatMessage(role=MessageRole.TOOL_RESPONSE, content=[{"type": "text", "text": text}])
    return ChatMessage(role=MessageRole(role if role in MessageRole.roles() else "user"),
                       content=[{"type": "text", "text": text}])


def _response_message(response: LLMResponse, raw: Any) -> Any:
    """A ``ChatMessage`` carrying ``response`` (``raw``: the model's own, whose provider response it keeps)."""
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole
    from smolagents.monitoring import TokenUsage

    calls = [ChatMessageToolCall(function=ChatMessageToolCallFunction(name=str(c["name"]), arguments=c.get("arguments") or "{}"),
                                 id=str(c.get("id") or ""), type="function") for c in response.tool_calls]
    usage = None
    if response.input_tokens is not None or response.output_tokens is not None:
        usage = TokenUsage(input_tokens=response.input_tokens or 0, output_tokens=response.output_tokens or 0)
    return ChatMessage(role=MessageRole.ASSISTANT, content=response.content, tool_calls=calls or None,
                       raw=getattr(raw, "raw", None), token_usage=usage)


def _as_answer(response: LLMResponse) -> LLMResponse:
    """A given answer (substituted, injected) of text alone, to a call offering ``final_answer``: that
    tool's call with the text (a ``ToolCallingAgent`` ends a run only so; text alone fails its step)."""
    if response.tool_calls or not response.content or not _ANSWER_TOOL.get():
        return response
    call = {"id": "call_final_answer", "name": "final_answer", "arguments": json_text({"answer": response.content})}
    return dataclasses.replace(response, content=None, tool_calls=[call], finish_reason="tool_calls")


def _provider_response(raw: Any) -> tuple[str | None, str | None, str | None]:
    """(model, finish reason, id) of the provider's response a ``ChatMessage`` keeps (an OpenAI-style one)."""
    provider = getattr(raw, "raw", None)
    model, rid = getattr(provider, "model", None), getattr(provider, "id", None)
    choices = getattr(provider, "choices", None)
    finish = getattr(choices[0], "finish_reason", None) if isinstance(choices, list) and choices else None
    return (model if isinstance(model, str) else None, finish if isinstance(finish, str) else None,
            rid if isinstance(rid, str) else None)


class SmolagentsCodec:
    """``Model.generate(messages, stop_sequences, response_format, tools_to_call_from, **kwargs)`` and
    its ``ChatMessage``; for ``generate_stream`` its ``ChatMessageStreamDelta`` chunks."""

    provider = "smolagents"

    def model(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        name = getattr(instance, "model_id", None)
        return name if isinstance(name, str) else None

    def request_attributes(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        own = getattr(instance, "kwargs", None)
        params = {**(own if isinstance(own, dict) else {}), **kwargs}
        stop = call_arg(args, kwargs, "stop_sequences", 1)
        if stop:
            params["stop"] = stop
        client_kwargs = getattr(instance, "client_kwargs", None)
        url = (client_kwargs.get("base_url") if isinstance(client_kwargs, dict) else None) or getattr(instance, "api_base", None)
        attrs = {**sc.request_attributes(params), **sc.server_attributes(url)}
        attrs[sc.PROVIDER] = sc.provider_name(url, "openai" if url else self.provider)
        return attrs

    def request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        return [neutral_message(m) for m in call_arg(args, kwargs, "messages", 0) or ()]

    def with_request(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], messages: Sequence[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        original = list(call_arg(args, kwargs, "messages", 0) or ())
        neutral = [neutral_message(m) for m in original]
        # An unchanged message stays the app's own (its images, its role); a changed or new one is rebuilt.
        rebuilt = [original[i] if i < len(original) and dict(m) == neutral[i] else _chat_message(dict(m))
                   for i, m in enumerate(messages)]
        if "messages" in kwargs:
            return args, {**kwargs, "messages": rebuilt}
        return (rebuilt, *args[1:]), kwargs

    def response(self, raw: Any) -> LLMResponse:
        usage = raw.token_usage
        model, finish, rid = _provider_response(raw)
        return LLMResponse(
            content=None if raw.content is None else content_text(raw.content), tool_calls=_tool_calls(raw.tool_calls),
            input_tokens=usage.input_tokens if usage is not None else None,
            output_tokens=usage.output_tokens if usage is not None else None,
            model=model, finish_reason=finish, id=rid,
        )

    def with_response(self, raw: Any | None, response: LLMResponse) -> Any:
        return _response_message(_as_answer(response), raw)

    # -- generate_stream (ChunkCodec) ----------------------------------------------------------
    def from_chunks(self, chunks: Sequence[Any]) -> LLMResponse:
        from smolagents.models import agglomerate_stream_deltas

        return self.response(agglomerate_stream_deltas(list(chunks)))

    def to_chunks(self, response: LLMResponse) -> list[Any]:
        from smolagents.models import ChatMessageStreamDelta, ChatMessageToolCallFunction, ChatMessageToolCallStreamDelta
        from smolagents.monitoring import TokenUsage

        response = _as_answer(response)
        chunks: list[Any] = [ChatMessageStreamDelta(content=piece) for piece in text_pieces(response.content)]
        chunks += [ChatMessageStreamDelta(tool_calls=[ChatMessageToolCallStreamDelta(
            index=i, id=str(c.get("id") or ""), type="function",
            function=ChatMessageToolCallFunction(name=str(c["name"]), arguments=c.get("arguments") or "{}"))])
            for i, c in enumerate(response.tool_calls)]
        chunks.append(ChatMessageStreamDelta(content="", token_usage=TokenUsage(
            input_tokens=response.input_tokens or 0, output_tokens=response.output_tokens or 0)))
        return chunks

    def is_last(self, chunk: Any) -> bool:
        return False  # no chunk says so for every model class: the span ends with the stream


# -- runs, steps, managed agents -------------------------------------------------------------
#: The managers above the agent running now (outermost first): a managed agent's steps' path.
_MANAGERS: ContextVar[tuple[str, ...]] = ContextVar("aegis_smolagents_managers", default=())


def _offers_final_answer(args: tuple, kwargs: dict) -> bool:
    tools = call_arg(args, kwargs, "tools_to_call_from", 3) or ()
    return any(getattr(t, "name", None) == "final_answer" for t in tools)


def _name(agent: Any) -> str:
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else "agent"


def _description(agent: Any) -> str | None:
    description = getattr(agent, "description", None)
    return description if isinstance(description, str) and description else None


def _answer(output: Any) -> str | None:
    output = getattr(output, "output", output)  # a RunResult (return_full_result=True)
    if output is None:
        return None
    return output if isinstance(output, str) else json_text(output) if isinstance(output, (dict, list)) else str(output)


def _after_last_output(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    start = next((i + 1 for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] in ("assistant", "system")), 0)
    return messages[start:]


def _new_input(agent: Any) -> list[dict[str, Any]]:
    """What the agent's memory gained since its last model output: the task (first step), or the
    observations and errors of the step before. With smolagents' own ``write_memory_to_messages``
    (the system prompt, then each memory step's messages) only the memory steps since that output
    are read: reading the whole memory each step cost a run of n steps O(n**2) (a 200-turn run took
    2.5 times as long as uninstrumented)."""
    from smolagents.agents import MultiStepAgent

    memory = getattr(agent, "memory", None)
    if memory is None or getattr(type(agent), "write_memory_to_messages", None) is not MultiStepAgent.write_memory_to_messages:
        return _after_last_output([neutral_message(m) for m in agent.write_memory_to_messages()])
    gained: list[dict[str, Any]] = []
    for memory_step in (*reversed(memory.steps), memory.system_prompt):
        added = [neutral_message(m) for m in memory_step.to_messages()]
        gained[:0] = added
        if any(m["role"] in ("assistant", "system") for m in added):
            break
    return _after_last_output(gained)


class SmolagentsAdapter(Adapter):
    """Traces smolagents agent runs: one step per agent step, managed agents' steps included."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.codec = SmolagentsCodec()

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        agent_type = getattr(sys.modules.get("smolagents.agents"), "MultiStepAgent", None)
        return isinstance(agent_type, type) and isinstance(app, agent_type)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        agents, seen = [app], list[Any]()
        while agents:  # the app and its managed agents, all levels down
            agent = agents.pop()
            if any(agent is s for s in seen):
                continue
            seen.append(agent)
            self.registry.add(agent, probe)
            agents.extend((getattr(agent, "managed_agents", None) or {}).values())
        names = tuple(dict.fromkeys(_name(a) for a in seen))
        return AppInfo(name=_name(app), lone_agent=False, agents=names)

    def _instrument(self, patcher: Patcher) -> None:
        from smolagents import local_python_executor
        from smolagents.agents import MultiStepAgent

        patcher.wrap(MultiStepAgent, "run", self._run)
        patcher.wrap(local_python_executor, "timeout", self._executor_timeout)
        patcher.wrap(MultiStepAgent, "__call__", self._managed_agent)
        patcher.wrap(MultiStepAgent, "_generate_planning_step", self._planning_step)
        patcher.wrap(MultiStepAgent, "provide_final_answer", self._final_answer_step)
        self.sync_patches()

    def sync_patches(self, **options: Any) -> None:
        """Wrap the step method of every agent class, ``generate``/``generate_stream`` of every model
        class and ``__call__`` of every tool class defining its own (classes defined after
        ``instrument()`` too: synced when a run starts)."""
        from smolagents.agents import MultiStepAgent
        from smolagents.models import Model
        from smolagents.tools import Tool

        for cls in subclasses(MultiStepAgent):
            if "_step_stream" in vars(cls):
                self._patcher.wrap(cls, "_step_stream", self._action_step)
        for cls in subclasses(Model):
            own = vars(cls)
            if "generate" in own:
                self._patcher.wrap(cls, "generate", self._generate)
            if "generate_stream" in own:
                self._patcher.wrap(cls, "generate_stream", self._generate_stream)
        for cls in subclasses(Tool):
            if "__call__" in vars(cls):
                self._patcher.wrap(cls, "__call__", self._tool)

    @staticmethod
    def _probe() -> "Probe | None":
        run = current_run()
        return run.probe if run is not None and run.framework == FRAMEWORK and run.probe.active else None

    # -- runs ------------------------------------------------------------------------------
    def _run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_run() is not None:  # a managed agent's run (or another framework's): its steps are the run's
            return wrapped(*args, **kwargs)
        probe = self.run_probe(instance)
        if probe is None:
            return wrapped(*args, **kwargs)
        try:
            self.sync()
            task = call_arg(args, kwargs, "task", 0)
            run = start_run(probe, _name(instance), framework=self.name, task=None if task is None else str(task))
        except Exception:
            log_hook_error("smolagents run start")
            return wrapped(*args, **kwargs)

        if not call_arg(args, kwargs, "stream", 1):
            def finish(output: Any) -> None:
                run.answer = _answer(output)
                run.finish()

            return call_in_scope(run, lambda: wrapped(*args, **kwargs), finish, "smolagents run")

        from smolagents.memory import FinalAnswerStep

        def final(item: Any) -> None:
            if isinstance(item, FinalAnswerStep):
                run.answer = _answer(item.output)

        token = run.attach()
        try:
            steps = wrapped(*args, **kwargs)  # run() prepares memory, then hands back the steps' generator
        except BaseException as exc:
            run.fail(exc)
            raise
        finally:
            run.detach(token)
        return iterate_sync_in_scope(iter(steps), run, on_item=final, on_done=run.finish)

    def _managed_agent(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``MultiStepAgent.__call__`` in a run: a manager calling a member of its team."""
        probe, step = self._probe(), current_step()
        if probe is None:
            return wrapped(*args, **kwargs)
        try:
            arguments = {"task": call_arg(args, kwargs, "task", 0), **{k: v for k, v in kwargs.items() if k != "task"}}
            scope = start_tool(probe, _name(instance), arguments=arguments, description=_description(instance),
                               tool_type="function")
            managers = _MANAGERS.get() + ((step.agent,) if step is not None else ())
        except Exception:
            log_hook_error("smolagents managed agent start")
            return wrapped(*args, **kwargs)
        token = _MANAGERS.set(managers)
        try:
            return call_in_scope(scope, lambda: wrapped(*args, **kwargs), scope.finish, "smolagents managed agent")
        finally:
            _MANAGERS.reset(token)

    # -- steps -----------------------------------------------------------------------------
    def _open_step(self, agent: Any) -> StepScope | None:
        run = current_run()
        if run is None or run.framework != FRAMEWORK or not run.probe.active:
            return None
        try:
            path = _MANAGERS.get()
            return start_step(run.probe, _name(agent), run=run, description=_description(agent),
                              input_messages=lambda: _new_input(agent),
                              attributes={sc.AGENT_PATH: list(path)} if path else None)
        except Exception:
            log_hook_error("smolagents step start")
            return None

    def _stepping(self, step: StepScope, steps: Any, output: Any) -> Any:
        """``steps`` (a step's generator) with ``step`` current while each item is made; the step ends
        with the generator, failed by its exception, else with ``output()``'s model message."""

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                step.fail(exc)
                return
            message = output()
            step.finish(None if message is None else lambda: [neutral_message(message)])

        return iterate_sync_in_scope(iter(steps), step, on_done=done)

    def _action_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_step_stream(memory_step)``: one ``ActionStep``."""
        step = self._open_step(instance)
        if step is None:
            return wrapped(*args, **kwargs)
        memory_step = call_arg(args, kwargs, "memory_step", 0)
        return self._stepping(step, wrapped(*args, **kwargs), lambda: getattr(memory_step, "model_output_message", None))

    def _planning_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_generate_planning_step``: one ``PlanningStep`` (the last item it yields)."""
        step = self._open_step(instance)
        if step is None:
            return wrapped(*args, **kwargs)
        last: list[Any] = [None]

        def items() -> Any:
            for item in wrapped(*args, **kwargs):
                last[0] = item
                yield item

        return self._stepping(step, items(), lambda: getattr(last[0], "model_output_message", None))

    def _final_answer_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``provide_final_answer``: the answer the agent is asked for when ``max_steps`` ran out."""
        step = self._open_step(instance)
        if step is None:
            return wrapped(*args, **kwargs)
        return call_in_scope(step, lambda: wrapped(*args, **kwargs),
                             lambda message: step.finish(lambda: [neutral_message(message)]), "smolagents step")

    # -- model and tool calls --------------------------------------------------------------
    def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None or in_llm_call():  # outside runs, or a model delegating to another
            return wrapped(*args, **kwargs)
        token = _ANSWER_TOOL.set(_offers_final_answer(args, kwargs))
        try:
            return call_llm(probe, self.codec, wrapped, instance, args, kwargs)
        finally:
            _ANSWER_TOOL.reset(token)

    def _generate_stream(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None or in_llm_call():
            return wrapped(*args, **kwargs)
        token = _ANSWER_TOOL.set(_offers_final_answer(args, kwargs))
        try:  # a given answer's chunks are made here (the model's own pass through as they come)
            return call_llm_chunks(probe, self.codec, wrapped, instance, args, kwargs)
        finally:
            _ANSWER_TOOL.reset(token)

    def _executor_timeout(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``local_python_executor.timeout``: in a run, the code it runs in its worker thread runs in
        the caller's context (the step current), so the tools the code calls are the step's."""
        decorate = wrapped(*args, **kwargs)
        if self._probe() is None:
            return decorate

        def in_context(func: Any) -> Any:
            context = copy_context()
            return decorate(functools.wraps(func)(lambda *a, **k: context.run(func, *a, **k)))

        return in_context

    def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return wrapped(*args, **kwargs)
        try:
            given = {k: v for k, v in kwargs.items() if k != "sanitize_inputs_outputs"}
            arguments: Any = given if given or not args else args[0] if len(args) == 1 else list(args)
            scope = start_tool(probe, str(getattr(instance, "name", None) or type(instance).__name__),
                               arguments=arguments, description=_description(instance), tool_type="function")
        except Exception:
            log_hook_error("smolagents tool start")
            return wrapped(*args, **kwargs)
        return call_in_scope(scope, lambda: wrapped(*args, **kwargs), scope.finish, "smolagents tool")
