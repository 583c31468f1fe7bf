"""OpenAI Agents SDK (openai-agents 0.24) adapter: the starting ``Agent`` is the app.

Class- and module-level patches, installed once:

- run entry: ``AgentRunner.run`` (``Runner.run`` and ``Runner.run_sync`` go through it) of a
  registered starting agent (or a clone of one, ``Agent.clone``): one run per call,
  ``invoke_workflow {agent.name}``, its answer the result's ``final_output``, its conversation id
  the run's ``conversation_id`` or ``session``'s id when it has one. The SDK's own tracing is switched off for that run
  (``RunConfig.tracing_disabled``), so each turn is one span here and nothing is sent to the
  SDK's trace backend. A ``Runner.run`` inside a run (an agent used as a tool) opens no run;
- agent step: ``agents.run.run_single_turn``, one turn of the current agent (its model call,
  then the tools it called and the handoff it chose) -> ``invoke_agent {agent.name}``, its input
  what the agent has not seen: the run's items after its own model's last output (its tools'
  results), all of the conversation on its first turn in the run. A handoff
  makes the next turn the new agent's; turns of a nested run belong to the step they run in. A run
  resumed from its ``RunState`` (after tool approvals, ``needs_approval``) is a run too: the
  interrupted turn it finishes (``resolve_interrupted_turn``: the approved tools) is its first step;
- LLM call: ``get_response``/``stream_response`` of every ``agents.models.interface.Model`` class
  inside a run (:class:`~aegis_probe.adapters.openai_agents_model.ModelSeam`): the default
  ``OpenAIResponsesModel`` (the Responses API), ``OpenAIChatCompletionsModel``, LiteLLM's and
  any-llm's, a user's own (a class defined after ``instrument()`` is patched at the next
  ``instrument()`` or run start);
- tool call: ``agents.run_internal.tool_execution._invoke_function_tool_with_metadata`` ->
  ``execute_tool {tool}``; a tool's exception that the SDK turns into its output
  (``agents.tool.maybe_invoke_function_tool_failure_error_function``) fails the span.

``Runner.run_streamed`` (``AgentRunner.run_streamed`` and ``run_loop.run_single_turn_streamed``)
is traced the same way: its turns run in a background task created while the run is current, and
the run ends when that task does; streamed model calls are ``chat`` spans too. A streamed run
stopped before its final output (``result.cancel()``, either mode; its reader cancelled; its event
loop ending, or closed and the result dropped, with the run unfinished) ends cancelled: ERROR,
``error.type`` ``CancelledError``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import weakref
from asyncio import CancelledError
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Callable

from aegis_probe.adapters.openai_agents_items import OWN_ITEMS, _parts, _text, run_item_messages, unseen_messages
from aegis_probe.adapters.openai_agents_model import ModelSeam
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher
from aegis_probe.capture.spans import (
    RunScope,
    StepScope,
    ToolScope,
    await_in_scope,
    current_run,
    current_step,
    log_hook_error,
    scoped_wrappers,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

FRAMEWORK = "openai-agents"


def _task_text(task: Any) -> str | None:
    """A run's task: its input text, or the last user message of its input items (which may carry
    the conversation so far, ``result.to_input_list()``); for a resumed run (a ``RunState``, after
    tool approvals), of the interrupted run's input."""
    from agents import RunState

    if isinstance(task, RunState):
        task = task._original_input
    if isinstance(task, str):
        return task
    return next((m["content"] for m in reversed(run_item_messages(task or (), None)) if m["role"] == "user"), None)


def _conversation(kwargs: dict) -> str | None:
    """The conversation a run continues: the OpenAI conversation it names, else its session's id
    (``session=SQLiteSession("user-42")``: the runs of one session are one conversation)."""
    conversation = kwargs.get("conversation_id") or getattr(kwargs.get("session"), "session_id", None)
    return None if conversation is None else str(conversation)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data: a structured output (``output_type``: a pydantic model, a dataclass) by its fields."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str)


def _streamed_error(result: Any, task: Any) -> BaseException | None:
    """The error a streamed run ended with: its loop task's, else the one the SDK keeps for
    ``stream_events`` to raise (``max_turns`` exceeded is only found there, the task ends normally);
    a ``CancelledError`` where the run stopped before its final output: its task cancelled (by
    ``result.cancel()``, a cancelled ``stream_events`` reader, or the event loop ending with the run
    unfinished), or ``cancel(mode="after_turn")`` ending it after a turn without one."""
    if task.cancelled():
        return CancelledError("the streamed run was cancelled before its final output")
    exc = task.exception() or getattr(result, "_stored_exception", None)
    if (exc is None and getattr(result, "_cancel_mode", None) == "after_turn" and result.final_output is None
            and not getattr(result, "interruptions", None)):
        return CancelledError("the streamed run was cancelled after a turn, before its final output")
    max_turns = getattr(result, "max_turns", None)
    if exc is None and max_turns is not None and result.current_turn > max_turns and not result._max_turns_handled:
        from agents import MaxTurnsExceeded

        exc = MaxTurnsExceeded(f"Max turns ({max_turns}) exceeded")
    return exc


def _finish_run(run: RunScope, result: Any, task: Any = None) -> None:
    """End ``run`` with ``result``'s final output as its answer (``task``: a streamed run's loop task)."""
    try:
        exc = None if task is None else _streamed_error(result, task)
        output: Any = getattr(result, "final_output", None)
        if output is not None:
            answer: Any = output if isinstance(output, str) else json.dumps(output, default=_jsonable, ensure_ascii=False)
            run.answer = answer
    except Exception:
        log_hook_error("openai-agents run end")
        exc = None
    run.finish(exc)


def _end_abandoned(run: RunScope) -> None:
    """End a streamed run whose result went with its loop task never done (the event loop closed first)."""
    try:
        run.finish(CancelledError("the streamed run was dropped unfinished, its event loop closed"))
    except Exception:
        log_hook_error("openai-agents run end")


def _watch_streamed(run: RunScope, result: Any) -> None:
    """End ``run`` when ``result``'s loop task is done, else, its loop closed first (the task's callbacks
    never run), when ``result`` is garbage-collected: cancelled, touching no loop."""
    abandoned = weakref.finalize(result, _end_abandoned, run)
    abandoned.atexit = False

    def done(task: Any) -> None:
        if abandoned.detach() is not None:
            _finish_run(run, result, task)

    result.run_loop_task.add_done_callback(done)


@dataclasses.dataclass
class _ToolCall:
    """The span of the tool call running in this context, and whether the tool raised."""

    scope: ToolScope
    failed: bool = False


_TOOL_CALL: ContextVar[_ToolCall | None] = ContextVar("aegis_openai_agents_tool", default=None)


class OpenAIAgentsAdapter(Adapter):
    """Traces OpenAI Agents SDK runs: one step per agent turn."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.seam = ModelSeam(FRAMEWORK)
        self._turn = scoped_wrappers(self._open_single_turn, self._turn_finisher, "openai-agents step")[1]
        self._resumed_turn = scoped_wrappers(self._open_resumed_turn, self._turn_finisher, "openai-agents step")[1]
        self._streamed_turn = scoped_wrappers(self._open_streamed_turn, self._turn_finisher, "openai-agents step")[1]

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        agent_type = getattr(sys.modules.get("agents"), "Agent", None)  # another top-level "agents" has none
        return isinstance(agent_type, type) and isinstance(app, agent_type)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        agents = self._reachable(app)
        for agent in agents:
            self.registry.add(agent, probe)
        self.sync()
        return AppInfo(name=app.name, lone_agent=False, agents=tuple(dict.fromkeys(a.name for a in agents)))

    @staticmethod
    def _reachable(agent: Any) -> list[Any]:
        """``agent`` and every agent its handoffs lead to: an agent itself, or the one a
        ``handoff(agent, ...)`` object holds (by a weak reference)."""
        from agents import Agent

        seen: list[Any] = []
        todo = [agent]
        while todo:
            current = todo.pop()
            if any(current is s for s in seen):
                continue
            seen.append(current)
            for handoff in getattr(current, "handoffs", ()):
                ref = getattr(handoff, "_agent_ref", None)
                target = handoff if isinstance(handoff, Agent) else ref() if callable(ref) else None
                if isinstance(target, Agent):
                    todo.append(target)
        return seen

    def _instrument(self, patcher: Patcher) -> None:
        import agents.run as run_module
        import agents.tool as tool_module
        from agents import Agent
        from agents.run import AgentRunner
        from agents.run_internal import run_loop, tool_execution

        patcher.wrap(Agent, "clone", self.register_copy)
        patcher.wrap(AgentRunner, "run", self._run)
        patcher.wrap(AgentRunner, "run_streamed", self._run_streamed)
        patcher.wrap(run_module, "run_single_turn", self._turn)
        patcher.wrap(run_loop, "run_single_turn_streamed", self._streamed_turn)
        patcher.wrap(run_module, "resolve_interrupted_turn", self._resumed_turn)
        patcher.wrap(run_loop, "resolve_interrupted_turn", self._resumed_turn)
        patcher.wrap(tool_execution, "_invoke_function_tool_with_metadata", self._tool)
        patcher.wrap(tool_module, "maybe_invoke_function_tool_failure_error_function", self._tool_failed)
        self.seam.sync(patcher)

    def sync_patches(self, **_: Any) -> None:
        """Patch the ``Model`` classes defined since (a user's own model class)."""
        self.seam.sync(self._patcher)

    def uninstall(self) -> None:
        super().uninstall()
        self.seam.clear()

    # -- runs ------------------------------------------------------------------------------
    def _start(self, args: tuple, kwargs: dict) -> RunScope | None:
        try:
            agent = kwargs["starting_agent"] if "starting_agent" in kwargs else args[0]
        except (IndexError, KeyError):
            return None
        probe = self.run_probe(agent)
        if probe is None or current_run() is not None:
            return None
        try:
            self.sync()  # a Model class defined since instrument(): its calls are chat spans too
        except Exception:
            log_hook_error("openai-agents model classes")
        try:
            task = kwargs["input"] if "input" in kwargs else args[1] if len(args) > 1 else None
            return start_run(probe, agent.name, framework=self.name, task=_task_text(task),
                             conversation_id=_conversation(kwargs))
        except Exception:
            log_hook_error("openai-agents run start")
            return None

    @staticmethod
    def _untraced(kwargs: dict) -> dict:
        """``kwargs`` with the SDK's own tracing off for this run. No config or a dict (the SDK takes
        both) stays a dict: the SDK then still owns, and closes, the model provider it makes."""
        config = kwargs.get("run_config")
        if config is None or isinstance(config, dict):
            return {**kwargs, "run_config": {**(config or {}), "tracing_disabled": True}}
        return {**kwargs, "run_config": dataclasses.replace(config, tracing_disabled=True)}

    async def _run(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = self._start(args, kwargs)
        if run is None:
            return await wrapped(*args, **kwargs)
        try:
            kwargs = self._untraced(kwargs)
        except Exception:
            log_hook_error("openai-agents run config")
        # a guardrail's tripwire, max_turns: await_in_scope fails the run through RunScope.fail (the probe's last run, judged)
        return await await_in_scope(run, lambda: wrapped(*args, **kwargs), lambda r: _finish_run(run, r), "openai-agents run")

    def _run_streamed(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``run_streamed`` returns at once; its turns run in a task that inherits the run's context."""
        run = self._start(args, kwargs)
        if run is None:
            return wrapped(*args, **kwargs)
        try:
            kwargs = self._untraced(kwargs)
        except Exception:
            log_hook_error("openai-agents run config")
        token = run.attach()
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            run.finish(exc)
            raise
        finally:
            run.detach(token)
        try:
            _watch_streamed(run, result)
        except Exception:
            log_hook_error("openai-agents streamed run")
            run.finish()
        return result

    # -- steps (agent turns) ---------------------------------------------------------------
    def _open_turn(self, bindings: Any, original_input: Any, generated_items: Any) -> StepScope | None:
        run = current_run()
        if run is None or run.framework != self.name or current_step() is not None:
            return None
        try:
            agent = bindings.public_agent
            shown = lambda: unseen_messages(original_input, generated_items, agent.name, run)  # noqa: E731  # content only
            return start_step(run.probe, agent.name, run=run, input_messages=shown,
                              description=agent.handoff_description)
        except Exception:
            log_hook_error("openai-agents step start")
            return None

    @staticmethod
    def _turn_finisher(step: StepScope) -> Callable[[Any], None]:
        def finish(result: Any) -> None:
            output = run_item_messages(getattr(result, "new_step_items", ()), step.run)
            next_step = getattr(result, "next_step", None)
            new_agent = getattr(next_step, "new_agent", None)
            if new_agent is not None:
                step.span.set_attribute(sc.STEP_NEXT_SPEAKER, new_agent.name)
            step.finish(output)

        return finish

    def _open_single_turn(self, instance: Any, args: tuple, kwargs: dict) -> StepScope | None:
        """``run_single_turn``."""
        return self._open_turn(kwargs.get("bindings"), kwargs.get("original_input"), kwargs.get("generated_items", ()))

    def _open_resumed_turn(self, instance: Any, args: tuple, kwargs: dict) -> StepScope | None:
        """``resolve_interrupted_turn``: a run resumed from its state (after tool approvals) finishes the
        interrupted turn (the approved tools) without ``run_single_turn``: a step of its own, whose
        input is the interrupted turn's (the items before that turn's model output)."""
        before = kwargs.get("original_pre_step_items", ())
        try:
            processed = kwargs.get("processed_response")
            output = [i.to_input_item() for i in getattr(processed, "new_items", ()) if i.type in OWN_ITEMS]
            before = [i for i in before if getattr(i, "type", None) not in OWN_ITEMS or i.to_input_item() not in output]
        except Exception:
            log_hook_error("openai-agents resumed turn")
        return self._open_turn(kwargs.get("bindings"), kwargs.get("original_input"), before)

    def _open_streamed_turn(self, instance: Any, args: tuple, kwargs: dict) -> StepScope | None:
        """``run_single_turn_streamed(streamed_result, bindings, ...)``: the turn's input is the run's so far."""
        streamed = kwargs["streamed_result"] if "streamed_result" in kwargs else args[0] if args else None
        bindings = kwargs["bindings"] if "bindings" in kwargs else args[1] if len(args) > 1 else None
        return self._open_turn(bindings, getattr(streamed, "input", ()), getattr(streamed, "new_items", ()))

    # -- tools and model calls -------------------------------------------------------------
    @staticmethod
    def _probe() -> "Probe | None":
        run = current_run()
        return run.probe if run is not None and run.framework == FRAMEWORK and run.probe.active else None

    async def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        probe = self._probe()
        if probe is None:
            return await wrapped(*args, **kwargs)
        try:
            tool = kwargs["function_tool"]
            call = _ToolCall(start_tool(probe, tool.name, call_id=getattr(kwargs.get("context"), "tool_call_id", None),
                                        arguments=kwargs.get("arguments"), description=tool.description,
                                        tool_type="function"))
        except Exception:
            log_hook_error("openai-agents tool start")
            return await wrapped(*args, **kwargs)

        async def invoke() -> Any:
            token = _TOOL_CALL.set(call)
            try:
                return await wrapped(*args, **kwargs)
            finally:
                _TOOL_CALL.reset(token)

        def finish(result: Any) -> None:
            output: Any = getattr(result, "output", None)
            call.scope.finish(_text(list(output)) if _parts(output) else output, is_error=call.failed)

        return await await_in_scope(call.scope, invoke, finish, "openai-agents tool")

    async def _tool_failed(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """The SDK turns a tool's exception into its output here: record it on the tool's span."""
        call = _TOOL_CALL.get()
        if call is not None:
            try:
                call.scope.record_error(kwargs["error"])
                call.failed = True
            except Exception:
                log_hook_error("openai-agents tool error")
        return await wrapped(*args, **kwargs)
