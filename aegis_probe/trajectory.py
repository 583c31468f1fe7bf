"""The ``Trajectory`` contract: what every later capability (injection, replay, training) reads.

A trajectory is one run of a multi-agent app, rebuilt from its trace: the task, the agent steps in
the order they happened, and what is known about the outcome and its faults. Steps come from the
``invoke_agent`` spans carrying ``aegis.step.index``; LLM calls and tool calls from the ``chat`` and
``execute_tool`` spans beneath them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

import msgspec
from pydantic import BaseModel, Field, model_validator

from .capture import semconv as sc
from .capture import session as ss
from .errors import validation_summary
from .storage import fastjson
from .storage.otlp_json import SpanRecord
from .redact import encodable, redact_secrets

logger = logging.getLogger(__name__)


class Message(BaseModel):
    """One chat message, flattened to text (tool calls and results kept as text parts)."""

    role: str
    content: str = ""
    name: str | None = None


class ToolCall(BaseModel):
    """A tool invocation made during a step."""

    name: str
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error: str | None = None
    span_id: str | None = None


class LLMCall(BaseModel):
    """One model call made during a step."""

    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    cost_usd: float | None = Field(default=None, description="priced from aegis_probe.pricing; None: unknown model")
    output: str | None = None
    span_id: str | None = None


class Usage(BaseModel):
    """Token usage summed over a step's LLM calls (None when no call reported usage).

    ``input_tokens`` counts every input token; the cache and reasoning counts are parts of the
    input and output counts."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    cost_usd: float | None = None  #: of the calls that were priced


class Step(BaseModel):
    """One agent step: one ``invoke_agent`` span."""

    index: int = Field(description="0-based, contiguous, in the order steps started")
    agent: str
    role: str | None = None
    path: list[str] = Field(default_factory=list, description="teams from the app down to the agent")
    next_speaker: str | None = Field(default=None, description="a manager step's choice of the next speaker")
    input_messages: list[Message] = Field(default_factory=list)
    output: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    llm_calls: list[LLMCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    events: list[dict[str, Any]] = Field(default_factory=list)
    span_id: str | None = None
    trace_id: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None


class Outcome(BaseModel):
    """Whether the run succeeded, when the caller or a judge said so."""

    success: bool | None = None
    answer: str | None = None
    expected: str | None = None


class Fault(BaseModel):
    """One labelled fault; every field is optional because sources label at different grains."""

    agent: str | None = None
    step: int | None = None
    span_id: str | None = None
    mode: str | None = Field(default=None, description="MAST failure-mode id, e.g. 'FM-1.3'")
    strategy: str | None = None
    reason: str | None = None


class LabelSet(BaseModel):
    """The faults one source labelled: ``injection``, ``blame:scan``, ``attribution:<model>``, a dataset."""

    source: str | None = None
    faults: list[Fault] = Field(default_factory=list)


class Labels(BaseModel):
    """Every label of a run, by source; labels are append-only facts, none replaces another.

    ``faults``/``source`` are the *primary* set: the first recorded one that is not a model's
    attribution (for an injected run, the injection: the label by construction). Training reads
    these; :meth:`of` gives any source's set, e.g. a blame finding next to an injection.
    """

    faults: list[Fault] = Field(default_factory=list)
    source: str | None = None
    flags: list[str] = Field(default_factory=list, description="e.g. 'suspicious' labels")
    sets: list[LabelSet] = Field(default_factory=list, description="every source's faults, first recorded first")

    @model_validator(mode="after")
    def _primary_is_a_set(self) -> "Labels":
        if not self.sets and (self.faults or self.source):
            self.sets = [LabelSet(source=self.source, faults=list(self.faults))]
        return self

    @classmethod
    def from_sets(cls, sets: list[LabelSet]) -> "Labels":
        primary = next((s for s in sets if not (s.source or "").startswith(ATTRIBUTION_SOURCE)), None)
        if primary is None:
            return cls(sets=sets)
        return cls(faults=list(primary.faults), source=primary.source, sets=sets)

    def of(self, source: str) -> list[Fault]:
        """The faults labelled by ``source`` (``"blame"`` matches ``"blame:scan"`` and ``"blame:bisect"``)."""
        return [f for s in self.sets if s.source == source or (s.source or "").startswith(source + ":") for f in s.faults]

    @property
    def sources(self) -> list[str | None]:
        return [s.source for s in self.sets]


#: Source prefix of a trained attributor's verdict (``attribution:<model>``): never the primary label.
ATTRIBUTION_SOURCE = "attribution"


def label_attributes(spans: Iterable[SpanRecord], source: str, faults: list[Fault]) -> dict[str, str]:
    """Root-span attributes that add ``faults`` as ``source``'s label of a stored trace, append-only.

    Each source has its own attribute, ``aegis.labels.<source>``; faults it recorded before are
    kept (new ones appended), and no other source's label is touched. Reasons are redacted.
    """
    root = _root(list(spans))
    key = sc.LABELS_PREFIX + source
    known = [Fault(**f) for f in json.loads(root.attributes[key])] if key in root.attributes else []
    merged = known + [f for f in faults if f not in known]
    return {key: redact_secrets(json.dumps([f.model_dump() for f in merged], ensure_ascii=False))}


class Trajectory(BaseModel):
    """One run of a multi-agent app."""

    trace_id: str | None = None
    run_id: str | None = None
    start_ns: int | None = None
    framework: str | None = None
    app: str | None = None
    task: str | None = None
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = Field(default_factory=Outcome)
    labels: Labels = Field(default_factory=Labels)
    error: str | None = None
    source: Literal["trace", "import"] | str = "trace"
    cost_usd: float | None = Field(default=None, description="USD of the run's priced model calls")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="e.g. replay_of, and session: session_id, user_id, tags, metadata")

    @property
    def agents(self) -> list[str]:
        """Agent names in order of first appearance."""
        return list(dict.fromkeys(s.agent for s in self.steps))

    @classmethod
    def from_spans(cls, spans: Iterable[SpanRecord]) -> "Trajectory":
        """Rebuild a trajectory from the spans of one trace.

        Raises ``ValueError`` naming the trace when an aegis attribute (messages, step index,
        labels) is malformed.
        """
        spans = list(spans)
        if not spans:
            raise ValueError("a trajectory needs at least one span")
        try:
            return _build(spans, MODELS)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            reason = validation_summary(exc) or str(exc)
            raise ValueError(f"trace {spans[0].trace_id}: malformed aegis span attributes ({reason})") from exc


@dataclass(frozen=True)
class Kinds:
    """The classes :func:`_build` makes a trajectory of: the models (:data:`MODELS`), or plain
    structs of the same fields that ``train import`` writes out (``aegis_probe.train.importers.rows``)."""

    trajectory: Any
    step: Any
    message: Any
    tool_call: Any
    llm_call: Any
    usage: Any
    outcome: Any


MODELS = Kinds(Trajectory, Step, Message, ToolCall, LLMCall, Usage, Outcome)
_USAGE_FIELDS = tuple(Usage.model_fields)


def messages_from_json(raw: Any, message: Any = Message) -> list[Message]:
    """Messages from a ``gen_ai.input.messages``/``output.messages`` JSON attribute (made by
    ``message``, :class:`Message` or a struct of its fields).

    A text that is not JSON (cut by ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``, another producer's
    plain text) is one message of that text, without a role.
    """
    if not raw:
        return []
    if isinstance(raw, str):
        try:
            return [message(role=m.role, content=encodable("\n".join(_texts(m.parts))), name=m.name)
                    for m in _typed_messages(raw)]
        except (msgspec.MsgspecError, ValueError):  # not a list of message objects: read below, as any JSON
            pass
    try:
        data = fastjson.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return [message(role="", content=raw)]
    out = []
    for m in data:
        texts = []
        for part in m.get("parts", []):
            kind = part.get("type")
            if kind == "text":
                texts.append(str(part.get("content", "")))
            elif kind == "tool_call":
                texts.append(f"[tool_call {part.get('name')}({json.dumps(part.get('arguments'))})]")
            elif kind == "tool_call_response":
                texts.append(f"[tool_result {part.get('response')}]")
        out.append(message(role=m.get("role", ""), content=encodable("\n".join(texts)), name=m.get("name")))
    return out


class _Part(msgspec.Struct):
    type: Any = None
    content: Any = ""
    name: Any = None
    arguments: Any = None
    response: Any = None


class _Message(msgspec.Struct):
    role: Any = ""
    name: Any = None
    parts: list[_Part] = []


#: Messages decoded straight into structs (no dict per message and part); what is not a list of
#: message objects with lists of part objects is read as JSON by :func:`messages_from_json`.
_typed_messages = msgspec.json.Decoder(list[_Message]).decode


def _texts(parts: list[_Part]) -> list[str]:
    """The texts of a message's parts, as :func:`messages_from_json` makes them of dicts."""
    texts = []
    for part in parts:
        kind = part.type
        if kind == "text":
            texts.append(str(part.content))
        elif kind == "tool_call":
            texts.append(f"[tool_call {part.name}({json.dumps(part.arguments)})]")
        elif kind == "tool_call_response":
            texts.append(f"[tool_result {part.response}]")
    return texts


def _root(spans: list[SpanRecord]) -> SpanRecord:
    ids = {s.span_id for s in spans}
    return next((s for s in spans if s.parent_span_id not in ids), spans[0])


def _faults(raw: Any) -> list[Fault]:
    return [Fault(**f) for f in (json.loads(raw) if isinstance(raw, str) else raw)]


def _label_sets(attrs: dict[str, Any]) -> list[LabelSet]:
    """Every source's label on a root span, in the order recorded: the run's own label
    (``aegis.label.faults``/``.source``), each ``aegis.labels.<source>``, then an attributor's verdict."""
    sets = []
    if sc.LABEL_FAULTS in attrs:
        sets.append(LabelSet(source=attrs.get(sc.LABEL_SOURCE), faults=_faults(attrs[sc.LABEL_FAULTS])))
    sets += [LabelSet(source=key[len(sc.LABELS_PREFIX):], faults=_faults(value))
             for key, value in attrs.items() if key.startswith(sc.LABELS_PREFIX)]
    verdict = sc.ATTRIBUTION + "."
    if verdict + "step" in attrs:
        modes = attrs.get(verdict + "modes") or []
        sets.append(LabelSet(source=f"{ATTRIBUTION_SOURCE}:{attrs.get(verdict + 'model') or 'model'}", faults=[Fault(
            agent=attrs.get(verdict + "agent"), step=int(attrs[verdict + "step"]), mode=modes[0] if modes else None,
            reason=f"agent score {attrs.get(verdict + 'agent_score')}, step score {attrs.get(verdict + 'step_score')}")]))
    return sets


def _build(spans: list[SpanRecord], kinds: Kinds) -> Any:
    """The trajectory of one trace's spans, made of ``kinds``."""
    by_id = {s.span_id: s for s in spans}
    root = _root(spans)
    steps_by_span: dict[str, Any] = {}
    for s in spans:
        if s.attributes.get(sc.OPERATION) == sc.OP_AGENT and sc.STEP_INDEX in s.attributes:
            steps_by_span[s.span_id] = kinds.step(
                index=int(s.attributes[sc.STEP_INDEX]),
                agent=str(s.attributes.get(sc.AGENT_NAME, "")),
                role=s.attributes.get(sc.AGENT_ROLE),
                path=[str(p) for p in s.attributes.get(sc.AGENT_PATH) or ()],
                next_speaker=s.attributes.get(sc.STEP_NEXT_SPEAKER),
                input_messages=messages_from_json(s.attributes.get(sc.INPUT_MESSAGES), kinds.message),
                output="\n".join(m.content for m in messages_from_json(s.attributes.get(sc.OUTPUT_MESSAGES), kinds.message)),
                error=(s.status_message or s.attributes.get(sc.ERROR_TYPE) or "error") if s.status == "ERROR" else None,
                events=s.events,
                span_id=s.span_id,
                trace_id=s.trace_id,
                start_ns=s.start_ns,
                end_ns=s.end_ns,
                tool_calls=[],
                llm_calls=[],
                usage=kinds.usage(),
            )

    cyclic: list[str] = []

    def owning_step(span: SpanRecord) -> Any:
        parent = span.parent_span_id
        for _ in range(len(by_id)):  # as many hops as spans: the parents form a cycle
            if parent in steps_by_span:
                return steps_by_span[parent]
            if parent not in by_id:
                return None
            parent = by_id[parent].parent_span_id
        cyclic.append(span.span_id)
        return None

    for s in spans:
        op = s.attributes.get(sc.OPERATION)
        step = owning_step(s)
        if step is None:
            continue
        if op == sc.OP_TOOL:
            step.tool_calls.append(
                kinds.tool_call(
                    name=str(s.attributes.get(sc.TOOL_NAME, s.name)),
                    call_id=s.attributes.get(sc.TOOL_CALL_ID),
                    arguments=s.attributes.get(sc.TOOL_CALL_ARGUMENTS),
                    result=s.attributes.get(sc.TOOL_CALL_RESULT),
                    error=(s.status_message or "error") if s.status == "ERROR" else None,
                    span_id=s.span_id,
                )
            )
        elif op == sc.OP_CHAT:
            call = kinds.llm_call(
                model=s.attributes.get(sc.RESPONSE_MODEL) or s.attributes.get(sc.REQUEST_MODEL),
                provider=s.attributes.get(sc.PROVIDER),
                input_tokens=s.attributes.get(sc.USAGE_INPUT_TOKENS),
                output_tokens=s.attributes.get(sc.USAGE_OUTPUT_TOKENS),
                cache_read_input_tokens=s.attributes.get(sc.USAGE_CACHE_READ_INPUT_TOKENS),
                cache_creation_input_tokens=s.attributes.get(sc.USAGE_CACHE_CREATION_INPUT_TOKENS),
                reasoning_output_tokens=s.attributes.get(sc.USAGE_REASONING_OUTPUT_TOKENS),
                cost_usd=s.attributes.get(sc.COST_USD),
                output="\n".join(m.content for m in messages_from_json(s.attributes.get(sc.OUTPUT_MESSAGES), kinds.message))
                or None,
                span_id=s.span_id,
            )
            step.llm_calls.append(call)
            for field in _USAGE_FIELDS:
                value = getattr(call, field)
                if value is not None:
                    setattr(step.usage, field, (getattr(step.usage, field) or 0) + value)

    if cyclic:
        logger.warning("trace %s: span %s%s: its parents form a cycle; read as outside any step", root.trace_id,
                       cyclic[0], f" and {len(cyclic) - 1} more" if len(cyclic) > 1 else "")
    steps = sorted(steps_by_span.values(), key=lambda st: st.index)
    attrs = root.attributes
    run_root = root.span_id not in steps_by_span  # none when the run never ended (its process exited mid-run)
    return kinds.trajectory(
        trace_id=root.trace_id,
        run_id=attrs.get(sc.RUN_ID),
        start_ns=root.start_ns,
        framework=attrs.get(sc.FRAMEWORK),
        app=(attrs.get(sc.WORKFLOW_NAME) or attrs.get(sc.AGENT_NAME) or root.name.partition(" ")[2] or None) if run_root else None,
        task=attrs.get(sc.TASK),
        steps=steps,
        outcome=kinds.outcome(
            success=attrs.get(sc.OUTCOME_SUCCESS),
            answer=attrs.get(sc.OUTCOME_ANSWER),
            expected=attrs.get(sc.OUTCOME_EXPECTED),
        ),
        labels=Labels.from_sets(_label_sets(attrs)),
        error=(root.status_message or "error") if run_root and root.status == "ERROR" else None,
        source="trace",
        cost_usd=attrs.get(sc.COST_USD) if run_root else None,
        metadata={**({"replay_of": attrs[sc.REPLAY_OF]} if attrs.get(sc.REPLAY_OF) else {}),
                  **({"session": session} if (session := session_of(attrs)) else {})},
    )


def session_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The session, user, tags and metadata a run's root span carries (``aegis_probe.capture.session``)."""
    out: dict[str, Any] = {}
    for key, name in ((ss.SESSION_ID, "session_id"), (ss.USER_ID, "user_id"), (ss.TAGS, "tags")):
        if attrs.get(key) is not None:
            out[name] = list(attrs[key]) if key == ss.TAGS else attrs[key]
    if isinstance(attrs.get(ss.METADATA), str):
        try:
            out["metadata"] = json.loads(attrs[ss.METADATA])
        except ValueError:
            out["metadata"] = attrs[ss.METADATA]
    return out


def load_trajectories(source: Any = None) -> list[Trajectory]:
    """Trajectories from a store directory, an OTLP/JSON(-lines) file, or a :class:`TraceStore`.

    With no argument, reads the default store (``AEGIS_TRACE_DIR`` or ``./aegis-traces``).
    Ordered by the start time of each trace.
    """
    from .config import ProbeConfig
    from .storage.store import TraceStore, merge_records, read_span_file, span_files

    if source is None:
        source = ProbeConfig.resolve().trace_dir
    if isinstance(source, TraceStore):
        source, traces = source.path, source.traces()
    else:
        traces = merge_records(rec for f in span_files(source) for rec in read_span_file(f))
    try:
        out = [Trajectory.from_spans(spans) for spans in traces.values()]
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from exc
    out.sort(key=lambda t: t.start_ns or 0)
    return out
