"""Single-step fault injection on a successful recorded run.

Replace the recorded action of one step by a faulty one (a deterministic injection operator of
the chosen MAST mode), replay the steps before it from the recording, run the rest live, and keep
the result only if the run now fails (not because the model endpoint failed a live call). The
kept run carries the label on its own trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..capture import semconv as sc
from ..apps import AppSpec, Endpoint
from ..injection.operators import Context, DeterministicManipulator
from ..capture.probe import Judge
from ..storage.store import TraceStore
from ..trajectory import Fault, Trajectory
from .recording import load_recording
from .replayer import STEP_INJECTION_SOURCE, ReplayResult, replay

STRATEGY = "response_corruption"


@dataclass
class StepInjection:
    """The outcome of one single-step injection."""

    kept: bool
    fault: Fault
    result: ReplayResult


def inject_step(
    trace_id: str,
    app: AppSpec,
    step: int,
    mode: str,
    *,
    endpoint: Endpoint,
    judge: Judge,
    store: TraceStore,
) -> StepInjection:
    """Corrupt step ``step`` of a successful run with ``mode``'s operator and re-run the rest live."""
    spans = store.trace(trace_id)
    original = Trajectory.from_spans(spans)
    if original.outcome.success is not True:
        raise ValueError(f"trace {original.trace_id}: single-step injection needs a successful run")
    target = original.steps[step]
    calls = sorted((c for c in load_recording(spans).values() if c.step_index == step), key=lambda c: c.call_index)
    if not calls:
        raise ValueError(f"step {step} ({target.agent}) made no model call to replace")
    ctx = Context(agent=target.agent, task=original.task, agents=tuple(original.agents),
                  history=[m.model_dump() for m in target.input_messages])
    faulty = DeterministicManipulator().corrupt(mode, calls[0].response, ctx)
    if faulty is None:
        raise ValueError(f"mode {mode} has no operator for this action")
    result = replay(spans, app, until_step=step, substitute=faulty,
                    endpoint=endpoint, judge=judge, store=store)
    fault = Fault(agent=target.agent, step=step, mode=mode, strategy=STRATEGY,
                  reason=f"recorded action of step {step} replaced by the {mode} operator")
    new = result.trajectory
    # A live call the endpoint never answered (down, key refused): the failure is not the fault's.
    kept = new is not None and new.outcome.success is False and not result.live_failed
    if new is not None and kept:
        fault.span_id = new.steps[step].span_id if len(new.steps) > step else None
        carried = new.labels.faults  # injected faults of the replayed steps before it (see replay)
        store.amend(new.trace_id or "", attributes={sc.LABEL_FAULTS: json.dumps([f.model_dump() for f in [*carried, fault]]),
                                                    sc.LABEL_SOURCE: STEP_INJECTION_SOURCE})
    return StepInjection(kept, fault, result)
