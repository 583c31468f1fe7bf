"""CrewAI (crewai 1.15) adapter: a ``Crew`` is the app.

Class-level patches, installed once:

- run entry: ``Crew.kickoff`` (``kickoff_async`` runs it in a thread that inherits the caller's
  context) and the native async ``Crew.akickoff`` of a registered crew: one run per call, ``invoke_workflow {crew.name}``, its task what
  the kickoff was given (:func:`run_task`), its answer the ``CrewOutput``'s ``raw`` text. A kickoff inside a run
  opens no run, and neither does the kickoff of a streaming crew (``stream=True``): iterating its
  streaming output kicks the crew off again, and that is the run. ``Crew.copy`` of a registered crew registers the copy with the same probe
  (``kickoff_for_each``/``kickoff_for_each_async``/``akickoff_for_each`` kick off a copy per input).
  ``Crew.replay(task_id)`` (re-running the last kickoff from one of its tasks) is a run too, its
  task that of the kickoff's inputs;
- agent step: ``Agent.execute_task/aexecute_task``, one agent's turn on a task ->
  ``invoke_agent {agent.role}``; its input the task's description (and the context handed to it),
  its output the agent's result. In a hierarchical crew the manager agent's turns are steps, and
  a coworker's turn it delegates (the delegation tools call ``execute_task``) is a step nested in
  the manager's. A failed turn CrewAI retries (``max_retry_limit``: ``_handle_execution_error``
  calls ``execute_task`` again from inside it) ends failed there, and the retry is a step beside it;
- LLM call: CrewAI's own model abstraction, ``BaseLLM.call/acall`` of every model class (native
  providers, the LiteLLM fallback, a user's own subclass) inside a run
  (:class:`~aegis_probe.adapters.crewai_llm.CrewAILLMSeam`; classes defined after ``instrument()``
  are wrapped when a run starts);
- tool call: ``BaseTool.run`` and ``Tool.run`` (what ``@tool`` makes) -> ``execute_tool {tool}``,
  named as the model sees the tool (CrewAI's ``sanitize_tool_name``: ``delegate_work_to_coworker``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

from opentelemetry import context as otel_context

from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, call_arg
from aegis_probe.adapters.crewai_llm import CrewAILLMSeam
from aegis_probe.capture.jsontext import json_text
from aegis_probe.capture.spans import (
    RunScope,
    StepScope,
    call_in_scope,
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

FRAMEWORK = "crewai"
_NO_RUN = object()
#: In a turn's step context: the context the step was opened in (where a retry of the turn goes).
_OPENED_IN = otel_context.create_key("aegis_crewai_opened_in")


def run_task(crew: Any, inputs: Any) -> str | None:
    """A kickoff's task: the value of its one input, its inputs as JSON, or (none) the first task's description."""
    if isinstance(inputs, dict) and inputs:
        values = list(inputs.values())
        if len(values) == 1 and isinstance(values[0], str):
            return values[0]
        return json_text(inputs)
    return crew.tasks[0].description if crew.tasks else None


class CrewAIAdapter(Adapter):
    """Traces CrewAI crews: one step per agent's turn on a task."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.seam = CrewAILLMSeam(FRAMEWORK)
        self._tool_name: Callable[[str], str] = str
        self._kickoff, self._akickoff = scoped_wrappers(self._start, self._run_finisher, "crewai run")
        self._replay, _ = scoped_wrappers(self._start_replay, self._run_finisher, "crewai run")
        self._turn, self._aturn = scoped_wrappers(self._open_step, self._turn_finisher, "crewai step")

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        crew_type = getattr(sys.modules.get("crewai"), "Crew", None)
        return isinstance(crew_type, type) and isinstance(app, crew_type)

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        self.registry.add(app, probe)
        roles = [a.role for a in app.agents]
        if app.manager_agent is not None:
            roles.append(app.manager_agent.role)
        return AppInfo(name=app.name or "crew", lone_agent=False, agents=tuple(dict.fromkeys(roles)))

    def _instrument(self, patcher: Patcher) -> None:
        from crewai import Agent, Crew
        from crewai.tools.base_tool import BaseTool, Tool
        from crewai.utilities.string_utils import sanitize_tool_name

        self._tool_name = sanitize_tool_name

        patcher.wrap(Crew, "kickoff", self._kickoff)
        patcher.wrap(Crew, "akickoff", self._akickoff)
        patcher.wrap(Crew, "replay", self._replay)
        patcher.wrap(Crew, "copy", self.register_copy)
        patcher.wrap(Agent, "execute_task", self._turn)
        patcher.wrap(Agent, "aexecute_task", self._aturn)
        patcher.wrap(Agent, "_handle_execution_error", self._retry)
        patcher.wrap(Agent, "_handle_execution_error_async", self._aretry)
        patcher.wrap(BaseTool, "run", self._tool)
        patcher.wrap(Tool, "run", self._tool)
        self.seam.install(patcher)

    def sync_patches(self, **_: Any) -> None:
        """Wrap the model classes defined since :meth:`install` (a user's ``BaseLLM`` subclass, a
        native provider imported late)."""
        self.seam.sync(self._patcher)

    # -- runs ------------------------------------------------------------------------------
    def _start(self, crew: Any, args: tuple, kwargs: dict) -> RunScope | None:
        # A streaming crew's kickoff only returns its streaming output; iterating it kicks the crew
        # off again with ``stream`` off, and that kickoff is the run.
        return None if crew.stream else self._open_run(crew, lambda: call_arg(args, kwargs, "inputs", 0))

    def _start_replay(self, crew: Any, args: tuple, kwargs: dict) -> RunScope | None:
        """``replay(task_id, inputs=None)`` re-runs the stored kickoff from ``task_id``: its inputs
        are those given, else those stored with the task. An unknown task (replay raises) opens no run."""
        def inputs() -> Any:
            task_id = str(call_arg(args, kwargs, "task_id", 0))
            stored = next((o for o in crew._task_output_handler.load() or () if o.get("task_id") == task_id), None)
            if stored is None:
                return _NO_RUN
            given = call_arg(args, kwargs, "inputs", 1)
            return stored.get("inputs") if given is None else given

        return self._open_run(crew, inputs)

    def _open_run(self, crew: Any, inputs: Callable[[], Any]) -> RunScope | None:
        """A run of ``crew`` (none inside a run) with the task of the kickoff's ``inputs()`` (``_NO_RUN``: no run)."""
        probe = self.run_probe(crew)
        if probe is None or current_run() is not None:
            return None
        try:
            given = inputs()
            if given is _NO_RUN:
                return None
            self.sync()  # model classes defined since instrument()
            return start_run(probe, crew.name or "crew", framework=self.name, task=run_task(crew, given))
        except Exception:
            log_hook_error("crewai run start")
            return None

    @staticmethod
    def _run_finisher(run: RunScope) -> Callable[[Any], None]:
        def finish(output: Any) -> None:
            raw = getattr(output, "raw", None)
            if isinstance(raw, str):
                run.answer = raw
            run.finish()

        return finish

    # -- steps (an agent's turn on a task) -------------------------------------------------
    def _open_step(self, agent: Any, args: tuple, kwargs: dict) -> StepScope | None:
        run = current_run()
        if run is None or run.framework != self.name or not run.probe.active:
            return None
        try:
            task = call_arg(args, kwargs, "task", 0)
            context = call_arg(args, kwargs, "context", 1)
            text = str(getattr(task, "description", "") or "")
            if context:
                text = f"{text}\n\n{context}"
            opened_in = otel_context.get_current()
            step = start_step(run.probe, agent.role, run=run, agent_id=str(agent.id),
                              description=agent.goal, input_messages=[{"role": "user", "content": text}])
            step.ctx = otel_context.set_value(_OPENED_IN, opened_in, step.ctx)
            return step
        except Exception:
            log_hook_error("crewai step start")
            return None

    @staticmethod
    def _end_failed_turn(agent: Any, args: tuple, kwargs: dict) -> otel_context.Context | None:
        """In ``agent._handle_execution_error(e, task, ...)``: fail the turn's step with ``e`` and return
        the context it was opened in, for the retry (None: not in a step of ``agent``)."""
        step, opened_in = current_step(), otel_context.get_value(_OPENED_IN)
        if step is None or step.agent != agent.role or not isinstance(opened_in, otel_context.Context):
            return None
        try:
            step.fail(call_arg(args, kwargs, "e", 0))
        except Exception:
            log_hook_error("crewai step retry")
        return opened_in

    def _retry(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        opened_in = self._end_failed_turn(instance, args, kwargs)
        if opened_in is None:
            return wrapped(*args, **kwargs)
        token = otel_context.attach(opened_in)
        try:
            return wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    async def _aretry(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        opened_in = self._end_failed_turn(instance, args, kwargs)
        if opened_in is None:
            return await wrapped(*args, **kwargs)
        token = otel_context.attach(opened_in)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    @staticmethod
    def _turn_finisher(step: StepScope) -> Callable[[Any], None]:
        def finish(result: Any) -> None:
            step.finish([{"role": "assistant", "content": str(result)}])

        return finish

    # -- tools -----------------------------------------------------------------------------
    def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = current_run()
        if run is None or run.framework != self.name or not run.probe.active:
            return wrapped(*args, **kwargs)
        try:
            scope = start_tool(run.probe, self._tool_name(instance.name), arguments=kwargs or list(args),
                               description=instance.description, tool_type="function")
        except Exception:
            log_hook_error("crewai tool start")
            return wrapped(*args, **kwargs)
        return call_in_scope(scope, lambda: wrapped(*args, **kwargs), lambda result: scope.finish(result), "crewai tool")
