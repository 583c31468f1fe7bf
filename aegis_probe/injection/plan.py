"""What to inject: :class:`InjectionPlan` (targets) and the MAST failure modes they name."""

from __future__ import annotations

import json
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..capture.interception import ModelCall
from ..mast import MODES
from ..trajectory import Fault


Strategy = Literal["prompt_injection", "response_corruption"]
STRATEGIES: tuple[Strategy, ...] = ("prompt_injection", "response_corruption")
OperatorKind = Literal["deterministic", "llm"]

#: ``predicate(call) -> bool`` on a model call; selects the step to manipulate.
Predicate = Callable[[ModelCall], bool]


class Target(BaseModel):
    """One fault to inject: which agent, when, which mode, how.

    ``when`` is exactly one of ``nth`` (the agent's n-th step that calls the model, 0-based),
    ``step`` (the global ``aegis.step.index``) or ``predicate`` (a Python callable on the
    :class:`~aegis_probe.capture.interception.ModelCall`; not serialised). With none given, ``nth=0``.
    A target fires at most once per run, at the first model call of the selected step the
    manipulator can act on.
    """

    model_config = ConfigDict(frozen=True)

    agent: str
    mode: str
    strategy: Strategy = "response_corruption"
    operator: OperatorKind = "deterministic"
    nth: int | None = Field(default=None, ge=0)
    step: int | None = Field(default=None, ge=0)
    predicate: Predicate | None = Field(default=None, exclude=True, description="not serialisable")

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, mode: str) -> str:
        if mode not in MODES:
            raise ValueError(f"unknown failure mode {mode!r}; expected one of {', '.join(MODES)}")
        return mode

    @model_validator(mode="after")
    def _one_when(self) -> "Target":
        given = sum(x is not None for x in (self.nth, self.step, self.predicate))
        if given > 1:
            raise ValueError("give at most one of nth, step, predicate")
        return self

    @property
    def serialisable(self) -> bool:
        return self.predicate is None

    def matches(self, call: ModelCall, agent_step_no: int) -> bool:
        """Whether ``call`` (in the agent's ``agent_step_no``-th step) is where this target fires."""
        if call.agent != self.agent:
            return False
        if self.predicate is not None:
            return bool(self.predicate(call))
        if self.step is not None:
            return call.step_index == self.step
        return agent_step_no == (self.nth or 0)


class InjectionPlan(BaseModel):
    """One or more targets applied during one run."""

    targets: list[Target] = Field(min_length=1)

    def to_json(self) -> str:
        """JSON of the plan; refuses plans with predicate targets (callables do not serialise)."""
        if not all(t.serialisable for t in self.targets):
            raise ValueError("a plan with predicate targets cannot be serialised")
        return self.model_dump_json()

    @classmethod
    def single(cls, agent: str, mode: str, strategy: Strategy = "response_corruption", **when: Any) -> "InjectionPlan":
        """A one-target plan."""
        return cls(targets=[Target(agent=agent, mode=mode, strategy=strategy, **when)])


class AppliedFault(Fault):
    """A target as it was applied: the label the run carries."""

    operator: OperatorKind = "deterministic"
    call_index: int | None = None


def faults_json(faults: list[AppliedFault]) -> str:
    """``aegis.label.faults`` value: a JSON list of :class:`~aegis_probe.trajectory.Fault` records."""
    return json.dumps([f.model_dump(include=set(Fault.model_fields)) for f in faults])
