"""The :class:`Injector`: an interceptor that applies an :class:`InjectionPlan` to a run's model calls.

Prompt injection edits the request messages in ``before`` (the ``chat`` span has already captured
the original input, so the manipulation itself never shows in the trace); response corruption
replaces the response in ``after`` (what the app, the agent's memory and the trace all see).
Each application is labelled as it happens: ``aegis.label.faults`` on the run's root span (every
fault the run got, from all the injectors that applied to it) and an ``aegis.injection`` event on
the step's span.

An injector applies only to the runs made in the context that made it: ``probe.inject``'s thread
or asyncio task, the tasks and copied contexts it starts (``asyncio.to_thread``,
``contextvars.copy_context().run``) and the threads its adapter hands a run's context to; never to
the runs other threads or tasks make at once under the same probe (with a plan of their own, or
none). A run started in a thread without that context (``ThreadPoolExecutor.submit``) is not
injected.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from opentelemetry import context as otel_context

from ..capture import evaluations, semconv as sc
from ..capture.interception import ModelCall, LLMResponse
from ..capture.spans import current_step, log_hook_error
from .operators import Context, DeterministicManipulator, Manipulator
from .plan import AppliedFault, InjectionPlan, Target, faults_json

T = TypeVar("T")
LABEL_SOURCE = "injection"

#: The injectors made in this context and its children (weakly): whose plans its runs get. Also kept
#: in the OpenTelemetry context, which adapters hand to the threads a framework runs steps in.
_MADE_HERE: ContextVar[tuple["weakref.ref[Injector]", ...]] = ContextVar("aegis_injectors", default=())
_OTEL_KEY = "aegis.injectors"
#: Guards each run's list of applied faults (``RunScope.caches[_FAULTS]``), shared by its injectors.
_FAULTS_LOCK = threading.Lock()
_FAULTS = "injection"


@dataclass
class _RunState:
    mine: bool = True  # the run was made in this injector's context (see the module docstring)
    steps: dict[str, list[int]] = field(default_factory=dict)  # agent -> its step indices, in order
    fired: set[int] = field(default_factory=set)  # indices of targets already applied
    applied: list[AppliedFault] = field(default_factory=list)

    def agent_step_no(self, agent: str, step_index: int) -> int:
        seen = self.steps.setdefault(agent, [])
        if step_index not in seen:
            seen.append(step_index)
        return seen.index(step_index)


class Injector:
    """Applies ``plan`` to every instrumented run while it sits in ``probe.interceptors``.

    ``manipulators`` maps operator kinds to manipulators (``"deterministic"`` is built in; add
    ``"llm": LLMManipulator(...)`` for LLM targets). ``agents``, ``termination`` and
    ``task_type`` tell the operators about the app.
    """

    def __init__(
        self,
        plan: InjectionPlan,
        manipulators: dict[str, Manipulator] | None = None,
        *,
        agents: tuple[str, ...] = (),
        termination: str = "TERMINATE",
        task_type: str = "generic",
    ) -> None:
        self.plan = plan
        self.manipulators: dict[str, Manipulator] = {"deterministic": DeterministicManipulator(), **(manipulators or {})}
        missing = {t.operator for t in plan.targets} - set(self.manipulators)
        if missing:
            raise ValueError(f"no manipulator for operator(s) {sorted(missing)}; pass manipulators={{'llm': LLMManipulator(...)}}")
        self.agents, self.termination, self.task_type = agents, termination, task_type
        self._runs: dict[str, _RunState] = {}
        self._last: _RunState | None = None
        self._lock = threading.Lock()

    @contextmanager
    def here(self) -> Iterator[None]:
        """Inside the block, the runs this context makes (and the tasks, copied contexts and threads
        it hands its context to) are this injector's (see the module docstring)."""
        made_here = (*(ref for ref in _MADE_HERE.get() if ref() is not None), weakref.ref(self))
        token = _MADE_HERE.set(made_here)
        otel_token = otel_context.attach(otel_context.set_value(_OTEL_KEY, made_here))
        try:
            yield
        finally:
            otel_context.detach(otel_token)
            _MADE_HERE.reset(token)

    @property
    def applied(self) -> list[AppliedFault]:
        """The faults applied in the most recent run this injector applies to."""
        return list(self._last.applied) if self._last else []

    def applied_in(self, run_id: str) -> list[AppliedFault]:
        state = self._runs.get(run_id)
        return list(state.applied) if state else []

    # -- the interceptor protocol ----------------------------------------------------------
    def before(self, call: ModelCall) -> LLMResponse | None:
        for i, target in self._due(call, "prompt_injection"):
            new = self.manipulators[target.operator].inject(target.mode, [dict(m) for m in call.messages], self._context(call))
            if new is not None:
                call.messages = new
                self._record(call, i, target)
        return None

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        for i, target in self._due(call, "response_corruption"):
            new = self.manipulators[target.operator].corrupt(target.mode, response, self._context(call))
            if new is not None:
                response = new
                self._record(call, i, target)
        return response

    # -- internals -----------------------------------------------------------------------
    def _due(self, call: ModelCall, strategy: str) -> list[tuple[int, Target]]:
        if call.run is None or call.agent is None or call.step_index is None:
            return []
        with self._lock:
            state = self._runs.get(call.run.run_id)
            if state is None:
                state = self._runs[call.run.run_id] = _RunState(mine=self._made_here())
            if not state.mine:
                return []
            self._last = state
            n = state.agent_step_no(call.agent, call.step_index)
            return [
                (i, t) for i, t in enumerate(self.plan.targets)
                if i not in state.fired and t.strategy == strategy and t.matches(call, n)
            ]

    def _made_here(self) -> bool:
        """Whether the calling context (a run's first model call) is one this injector was made in."""
        refs = (*_MADE_HERE.get(), *(otel_context.get_value(_OTEL_KEY) or ()))  # type: ignore[misc]
        return any(ref() is self for ref in refs)

    def _context(self, call: ModelCall) -> Context:
        state = self._runs[call.run.run_id]  # type: ignore[union-attr]
        agents = tuple(dict.fromkeys([*self.agents, *state.steps]))
        return Context(agent=call.agent or "", task=call.run.task if call.run else None, history=[dict(m) for m in call.messages],
                       agents=agents, termination=self.termination, task_type=self.task_type)

    def _record(self, call: ModelCall, index: int, target: Target) -> None:
        step = current_step()
        fault = AppliedFault(
            agent=target.agent, step=call.step_index, mode=target.mode, strategy=target.strategy,
            operator=target.operator, call_index=call.call_index,
            span_id=format(step.span.get_span_context().span_id, "016x") if step else None,
        )
        with self._lock:
            state = self._runs[call.run.run_id]  # type: ignore[union-attr]
            state.fired.add(index)
            state.applied.append(fault)
        with _FAULTS_LOCK:  # the label holds the faults of every injector of the run, not only this one's
            faults = call.run.caches.setdefault(_FAULTS, [])  # type: ignore[union-attr]
            faults.append(fault)
            label = faults_json(faults)
        try:
            call.run.span.set_attributes({sc.LABEL_FAULTS: label, sc.LABEL_SOURCE: LABEL_SOURCE})  # type: ignore[union-attr]
            judged = evaluations.fault_evaluation(LABEL_SOURCE, {"agent": target.agent, "step": call.step_index,
                                                                  "mode": target.mode, "strategy": target.strategy})
            (step.span if step is not None else call.run.span).add_event(evaluations.EVENT, judged)  # type: ignore[union-attr]
            if step is not None:
                step.span.add_event(sc.EVENT_INJECTION, {
                    sc.AGENT_NAME: target.agent, "aegis.injection.mode": target.mode,
                    "aegis.injection.strategy": target.strategy, "aegis.injection.operator": target.operator,
                    sc.STEP_INDEX: call.step_index, sc.AGENT_CALL_INDEX: call.call_index if call.call_index is not None else -1,
                })
        except Exception:
            log_hook_error("injection label")


def run_with_plan(probe: Any, plan: InjectionPlan, run: Callable[[], T], **injector_options: Any) -> tuple[T, list[AppliedFault]]:
    """Call ``run()`` (one run of ``probe``'s app) with ``plan`` applied; return its result and the applied faults."""
    with probe.inject(plan, **injector_options) as injector:
        result = run()
    return result, injector.applied
