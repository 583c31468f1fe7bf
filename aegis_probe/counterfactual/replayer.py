"""Exact and counterfactual replay of a recorded run.

``replay(trace, app)`` rebuilds the app, instruments it, and answers every model call from the
recording. Without a substitution the replayed run must equal the original step for step; the
first difference (a request that does not match the recording, a call the recording lacks, or a
step whose agent/output differs afterwards) is reported, never silently continued (values the
app draws afresh on each run, UUIDs and timestamps, match up to a consistent renaming: :mod:`.fresh_ids`): the replayer
keeps the first :class:`ReplayDivergence` it raised, so the result reports it even when the app
swallows the exception (CAMEL's streaming, MetaGPT's ``Team.run`` do). With
``until_step=t`` and a ``substitute``, calls before step t come from the recording, the action at
step t is replaced, and everything after it runs live against the app's endpoint.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..capture import semconv as sc
from ..apps import AppSpec, Endpoint
from ..config import ProbeConfig
from ..capture.interception import InterceptAbort, LLMResponse, ModelCall, UnansweredCalls
from ..storage.otlp_json import SpanRecord
from ..capture.probe import Judge, instrument
from ..capture.spans import encode_messages
from ..storage.store import TraceStore
from ..trajectory import Step, Trajectory
from .fresh_ids import FreshIds
from .order import RecordedOrder
from .recording import Key, RecordedCall, load_recording

STEP_INJECTION_SOURCE = "replay-injection"

#: Where a pure replay points the app: nothing listens on the discard port, so an unexpected
#: live call fails loudly instead of reaching a real model.
DEAD_ENDPOINT = "http://127.0.0.1:9/v1"


class ReplayDivergence(InterceptAbort):
    """The replayed run asked the model something the recording does not hold."""

    def __init__(self, step: int | None, agent: str, detail: str) -> None:
        super().__init__(f"replay diverged at step {step} ({agent or 'outside any step'}): {detail}")
        self.step, self.agent, self.detail = step, agent, detail


class RecordedFailure(InterceptAbort):
    """A replayed call whose recorded call got no answer (the client or the endpoint failed it):
    the replay fails it too, with the recorded error, so the app ends as the recorded run did."""


class Replayer:
    """Interceptor answering model calls from a recording until the run goes live; ``divergence``:
    the first :class:`ReplayDivergence` it raised, whatever the app did with it."""

    def __init__(self, recording: dict[Key, RecordedCall], redact: Callable[[str], str], *,
                 until_step: int | None, substitute: str | LLMResponse | None) -> None:
        self.recording, self.redact = recording, redact
        self.until_step, self.substitute = until_step, substitute
        self.live = False
        self.replayed = 0
        self.live_calls = 0
        self.divergence: ReplayDivergence | None = None
        self.ids = FreshIds()
        self.order = RecordedOrder(recording)
        self._answered: dict[int, Key] = {}  # id(call) -> its recorded call, until the app has the answer
        self._used: set[Key] = set()  # recorded calls already answered
        self._of_agent: dict[str, list[Key]] = {}
        for agent, index in sorted(recording):
            self._of_agent.setdefault(agent, []).append((agent, index))
        self._lock = threading.Lock()

    def _diverged(self, call: ModelCall, agent: str, detail: str) -> ReplayDivergence:
        exc = ReplayDivergence(call.step_index, agent, detail)
        if self.divergence is None:
            self.divergence = exc
        return exc

    def _goes_live(self, call: ModelCall) -> bool:
        if self.live:
            return True
        if self.until_step is not None and call.step_index is not None and call.step_index >= self.until_step:
            self.live = True
            self.order.stop()
        return self.live

    def before(self, call: ModelCall) -> LLMResponse | None:
        if self._goes_live(call):
            if self.substitute is not None and call.step_index == self.until_step:
                action, self.substitute = self.substitute, None
                return action if isinstance(action, LLMResponse) else LLMResponse(content=action, finish_reason="stop")
            self.live_calls += 1
            return None
        key = (call.agent or "", call.call_index or 0)
        self.order.moved()
        request = encode_messages(call.messages, self.redact)
        found = self._recorded_as(key, request)
        if found is None:
            raise self._diverged(call, key[0], f"request of call #{key[1]} differs from the recording" if key in self.recording
                                 else f"call #{key[1]} of this agent is not in the recording")
        key, recorded = found, self.recording[found]
        self.replayed += 1
        if recorded.failure is not None:
            raise RecordedFailure(f"call #{key[1]} of {key[0] or 'the app'} failed when recorded: {recorded.failure}")
        self._answered[id(call)] = key
        return self.ids.response(recorded.response)

    def _recorded_as(self, key: Key, request: str) -> Key | None:
        """The recorded call answering this one: the agent's call of the same number when its request
        matches, else the agent's first unanswered call whose request does (copies of one agent
        working at once, CAMEL's workforce workers, number their calls in the order they make them)."""
        with self._lock:
            candidates = [key] if key in self.recording else []
            for other in (*candidates, *(k for k in self._of_agent.get(key[0], ()) if k != key)):
                if other not in self._used and self.ids.match(self.recording[other].request, request):
                    self._used.add(other)
                    return other
        return None

    def after(self, call: ModelCall, response: LLMResponse) -> LLMResponse:
        key = self._answered.pop(id(call), None)
        if key is not None:
            self.order.hand_over(key)
        return response


def first_difference(original: Trajectory, replayed: Trajectory, upto: int | None = None,
                     ids: FreshIds | None = None) -> str | None:
    """Describe the first step where two trajectories differ (agent, output, tools), or None;
    ``ids`` renames the replay's fresh ids back to the recorded ones first."""
    steps_a, steps_b = original.steps[:upto], replayed.steps[:upto]
    renamed = ids.to_recorded if ids is not None else str

    def view(s: Step, rename: Callable[[str], str] = str) -> tuple[Any, ...]:
        tools = json.dumps([(t.name, t.arguments, t.result) for t in s.tool_calls], sort_keys=True, default=str)
        return (s.agent, rename(s.output), rename(tools))

    for a, b in zip(steps_a, steps_b):
        if view(a) != view(b, renamed):
            if sorted(map(view, steps_a)) == sorted(view(s, renamed) for s in steps_b):
                break  # the same steps, begun in another order: agents working at once (a CAMEL workforce's subtasks)
            what = "agent" if a.agent != b.agent else "output" if a.output != b.output else "tool calls"
            return f"step {a.index}: {what} differs ({a.agent}: {a.output[:80]!r} vs {b.agent}: {b.output[:80]!r})"
    if upto is None and len(steps_a) != len(steps_b):
        return f"step {min(len(steps_a), len(steps_b))}: the original has {len(steps_a)} steps, the replay {len(steps_b)}"
    return None


#: Label sources that hold by construction: a fault made in a step is in every faithful copy of it.
BY_CONSTRUCTION = ("injection", STEP_INJECTION_SOURCE)


def _replayed_labels(original: Trajectory, replayed: Trajectory, until_step: int | None) -> dict[str, str]:
    """Root attributes giving a faithful replay the original's labels by construction (injected
    faults) for the steps it replayed from the recording (all, or those before ``until_step``),
    each on the replay's own step span: the recorded faulty actions are replayed as they were, so
    an unlabelled copy would pass an injected failure for a clean run."""
    if original.labels.source not in BY_CONSTRUCTION:
        return {}
    spans = {s.index: s.span_id for s in replayed.steps}
    faults = [f.model_copy(update={"span_id": spans.get(f.step)}) for f in original.labels.faults
              if f.step is not None and f.step in spans and (until_step is None or f.step < until_step)]
    if not faults:
        return {}
    return {sc.LABEL_FAULTS: json.dumps([f.model_dump() for f in faults]), sc.LABEL_SOURCE: original.labels.source or ""}


def _check_until_step(original: Trajectory, recording: dict[Key, RecordedCall], until_step: int | None,
                      substitute: str | LLMResponse | None) -> None:
    """``ValueError`` unless ``until_step`` is a step of the run and, with a ``substitute``, one
    that called the model (else the substitute would go unused, the rest of the run live)."""
    if until_step is None:
        return
    steps = {s.index: s for s in original.steps}
    if until_step not in steps:
        raise ValueError(f"trace {original.trace_id}: until_step {until_step} is not a step of the run "
                         f"(steps 0..{len(steps) - 1})")
    if substitute is not None and all(c.step_index != until_step for c in recording.values()):
        raise ValueError(f"trace {original.trace_id}: step {until_step} ({steps[until_step].agent}) made no model "
                         "call, so there is no model answer to substitute")


@dataclass
class ReplayResult:
    """What a replay produced."""

    original: Trajectory
    trajectory: Trajectory | None
    answer: str | None
    divergence: str | None
    replayed_calls: int
    live_calls: int
    error: str | None = None
    tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    live_failed: int = 0  # live model calls that got no answer (the endpoint failed them)

    @property
    def exact(self) -> bool:
        return self.divergence is None and self.error is None


def replay(
    trace: str | list[SpanRecord],
    app: AppSpec,
    *,
    until_step: int | None = None,
    substitute: str | LLMResponse | None = None,
    endpoint: Endpoint | None = None,
    judge: Judge | None = None,
    store: TraceStore | None = None,
) -> ReplayResult:
    """Re-run ``app`` on the recorded trace's task with recorded model responses.

    ``until_step`` and ``substitute`` make it counterfactual (see the module docstring); the
    replayed run is stored as a new trace carrying ``aegis.replay.of``.
    """
    if substitute is not None and until_step is None:
        raise ValueError("substitute needs until_step: the step whose action it replaces")
    store = store or TraceStore(ProbeConfig.resolve().trace_dir)
    spans = list(trace) if isinstance(trace, list) else store.trace(trace)
    original = Trajectory.from_spans(spans)
    if original.task is None:
        raise ValueError(f"trace {original.trace_id} has no captured task; replay needs capture_content on")
    recording = load_recording(spans)
    _check_until_step(original, recording, until_step, substitute)
    target = app.build(endpoint or Endpoint(DEAD_ENDPOINT, "replay", "replay"), task=original.task)
    probe = instrument(target, store=store, judge=judge)
    replayer = Replayer(recording, probe.redact, until_step=until_step, substitute=substitute)
    unanswered = UnansweredCalls()  # live calls the endpoint failed: after the replayer, which answers the rest
    answer, error = None, None
    try:
        with probe.intercept(replayer), probe.intercept(unanswered):
            answer = app.run_app(target, original.task)
    except ReplayDivergence:
        pass  # the replayer keeps it
    except Exception as exc:  # the app failed in the live part: a result, not a crash
        error = probe.redact(f"{type(exc).__name__}: {exc}")
    finally:
        probe.flush()
        probe.uninstrument()
    run_id = probe.last_trace_id  # this probe's own replay run, whichever thread the app ran it in
    replayed = probe.trajectory(run_id) if run_id is not None else None
    divergence = str(replayer.divergence) if replayer.divergence is not None else None
    if divergence is None and replayer.substitute is not None and error is None:
        divergence = f"step {until_step}: the replay made no model call there, so the substitute was never used"
    if divergence is None and replayed is not None:
        divergence = first_difference(original, replayed, upto=until_step, ids=replayer.ids)
    if replayed is not None:
        attributes: dict[str, Any] = {sc.REPLAY_OF: original.trace_id or "",
                                      sc.REPLAY_UNTIL_STEP: -1 if until_step is None else until_step}
        if divergence is None:
            attributes.update(_replayed_labels(original, replayed, until_step))
        store.amend(replayed.trace_id or "", attributes=attributes)
        replayed = probe.trajectory(run_id)
    tokens = sum((s.usage.input_tokens or 0) + (s.usage.output_tokens or 0)
                 for s in (replayed.steps if replayed else []) if until_step is not None and s.index > until_step)
    return ReplayResult(original, replayed, answer, divergence, replayer.replayed, replayer.live_calls,
                        error=error, tokens=tokens, live_failed=len(unanswered))
