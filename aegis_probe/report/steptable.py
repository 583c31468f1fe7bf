"""Plain-text rendering of trajectories for the terminal."""

from __future__ import annotations

import shutil

from ..capture import evaluations as ev
from ..capture.evaluations import EVENT as EVALUATION_EVENT
from ..trajectory import ATTRIBUTION_SOURCE, Trajectory


#: Characters a terminal acts on (C0/C1 controls: escape sequences that recolour, retitle or
#: rewrite the screen; bidirectional overrides that reorder text), shown escaped instead.
UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} | {
    c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def printable(text: str) -> str:
    """``text`` safe to print to a terminal: trace content comes from models and other writers."""
    return text.translate(UNPRINTABLE)


def _clip(text: str, width: int) -> str:
    text = printable(" ".join(text.split()))
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def step_table(traj: Trajectory, width: int | None = None) -> str:
    """A readable table of a trajectory's steps: index, agent, tools, tokens, output."""
    width = width or shutil.get_terminal_size((120, 20)).columns
    agents = [printable(s.agent) for s in traj.steps]
    agent_w = max([5] + [len(a) for a in agents])
    head = f"{'step':>4}  {'agent':<{agent_w}}  {'tools':<18}  {'tokens':>9}  output"
    lines = [head, "-" * min(width, len(head) + 40)]
    out_w = max(20, width - len(head) + len("output"))
    for s, agent in zip(traj.steps, agents):
        tools = ",".join(t.name for t in s.tool_calls) or "-"
        tokens = "-" if s.usage.input_tokens is None else f"{s.usage.input_tokens}/{s.usage.output_tokens or 0}"
        status = " [error]" if s.error else ""
        lines.append(f"{s.index:>4}  {agent:<{agent_w}}  {_clip(tools, 18):<18}  {tokens:>9}  {_clip(s.output, out_w)}{status}")
    return "\n".join(lines)


def summary(traj: Trajectory) -> str:
    """One header block: trace id, framework, task, outcome, labels."""
    out = traj.outcome
    verdict = {True: "success", False: "failure", None: "not judged"}[out.success]
    lines = [
        f"trace    {traj.trace_id}",
        f"app      {traj.app} ({traj.framework})",
        f"task     {_clip(traj.task or '-', 100)}",
        f"outcome  {verdict}" + (f": answer {out.answer!r}" if out.answer else "") + (f", expected {out.expected!r}" if out.expected else ""),
        f"steps    {len(traj.steps)} by {', '.join(traj.agents) or '-'}",
    ]
    if traj.cost_usd is not None:
        lines.append(f"cost     USD {cost_text(traj.cost_usd)}")
    if traj.metadata.get("session"):
        lines.append(f"session  {session_text(traj.metadata['session'])}")
    if traj.metadata.get("replay_of"):  # a replayed run, not one the app made on its own
        lines.insert(1, f"replay   of trace {traj.metadata['replay_of']}")
    for label in traj.labels.sets:  # every label source, side by side
        source = label.source or "-"
        for f in label.faults:
            if source.startswith(ATTRIBUTION_SOURCE + ":"):  # a trained attributor's verdict
                by = source.partition(":")[2]
                lines.append(f"verdict  agent={f.agent} step={f.step} mode={f.mode or '-'} by {by}" + (f" ({f.reason})" if f.reason else ""))
            else:
                lines.append(f"fault    agent={f.agent} step={f.step} mode={f.mode or '-'} strategy={f.strategy or '-'} source={source}")
    for step in traj.steps:  # verdicts as GenAI evaluation events on the steps they judge
        for event in step.events:
            if event.get("name") == EVALUATION_EVENT:
                attrs = event.get("attributes") or {}
                lines.append(f"eval     step {step.index} {attrs.get(ev.NAME)} {attrs.get(ev.SCORE_LABEL)} "
                             f"score={attrs.get(ev.SCORE_VALUE)}" + (f" ({attrs[ev.EXPLANATION]})" if attrs.get(ev.EXPLANATION) else ""))
    return "\n".join(map(printable, lines))


def cost_text(usd: float | None) -> str:
    """A cost in USD as ``traces ls`` and the report show it (``-``: no call was priced)."""
    return "-" if usd is None else f"{usd:.4f}" if usd >= 0.01 else f"{usd:.6f}"


def session_text(session: dict) -> str:
    """A run's session, user, tags and metadata on one line."""
    parts = [f"{key}={session[key]}" for key in ("session_id", "user_id") if session.get(key)]
    if session.get("tags"):
        parts.append("tags=" + ",".join(session["tags"]))
    if session.get("metadata"):
        parts.append(f"metadata={session['metadata']}")
    return " ".join(parts)


def transcript(traj: Trajectory) -> str:
    """The steps as ``Step i - agent: output`` lines (the text analyzers and judges read)."""
    return "\n".join(f"Step {s.index} - {s.agent}: {s.output}" for s in traj.steps)
