"""A self-contained HTML report of one trajectory: task, outcome, timeline, steps, faults.

One file, inline CSS and JS, nothing fetched at view time. Every piece of trace content is
HTML-escaped. Steps are collapsed ``<details>`` elements with a filter bar (agent, text, flagged
only), so traces of hundreds of steps stay usable. Steps are *flagged* when they are blamed (an
``aegis.attribution``/``aegis.blame`` event, or a labelled fault naming the step) or injected (an
``aegis.injection`` event); flagged steps show their mode and evidence, and every label is shown
with its source. Content is redacted again before it is escaped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from ..capture import semconv as sc
from ..redact import redact_secrets
from ..storage.outputs import replacing
from .assets import CSS, JS
from .graph import GRAPH_CSS, agent_graph, graph_svg
from .steptable import UNPRINTABLE, cost_text, session_text
from ..trajectory import Step, Trajectory

ENV_JAEGER_URL = "AEGIS_JAEGER_URL"
ENV_PHOENIX_URL = "AEGIS_PHOENIX_URL"
BLAME_EVENTS = ("aegis.attribution", "aegis.blame")
MAX_TEXT = 20_000  # characters of one content block before it is clipped
_PALETTE = 10  # agent colour classes a0..a9 in the CSS


@dataclass
class Mark:
    """Why a step is flagged: blamed or injected, with the mode and the evidence given."""

    kind: str  # "blamed" | "injected"
    source: str  # the event name and/or "label <source>"
    mode: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


#: Label sources whose faults were put there on purpose (the others found a fault after the fact).
INJECTION_SOURCES = ("injection", "replay-injection")
#: How blame searched (``aegis.blame`` events of older traces kept it under ``mode``): never a failure mode.
SEARCH_MODES = ("scan", "bisect")


def _short_key(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _event_mark(event: dict[str, Any]) -> Mark | None:
    name = event.get("name")
    kind = "blamed" if name in BLAME_EVENTS else "injected" if name == sc.EVENT_INJECTION else None
    if kind is None:
        return None
    attrs = {_short_key(k): v for k, v in (event.get("attributes") or {}).items()}
    mode = attrs.pop("mode", None)
    if name == sc.EVENT_BLAME and mode in SEARCH_MODES:
        attrs["search"], mode = mode, None
    return Mark(kind, str(name), None if mode is None else str(mode), attrs)


def _label_source(source: str | None) -> str:
    return f"label {source}" if source else "label"


def superseded_verdicts(traj: Trajectory) -> set[int]:
    """The ``id()`` of each ``aegis.attribution`` event a later one of the same model replaced
    (the store is append-only: a retrained model's new verdict does not remove its earlier one)."""
    latest: dict[str, dict[str, Any]] = {}
    verdicts = [e for s in traj.steps for e in s.events
                if e.get("name") == sc.EVENT_ATTRIBUTION and (e.get("attributes") or {}).get("model") is not None]
    for event in verdicts:
        model = str(event["attributes"]["model"])
        if model not in latest or int(event.get("time_ns") or 0) >= int(latest[model].get("time_ns") or 0):
            latest[model] = event
    kept = {id(e) for e in latest.values()}
    return {id(e) for e in verdicts if id(e) not in kept}


def step_marks(traj: Trajectory) -> dict[int, list[Mark]]:
    """The marks of each flagged step, keyed by step index.

    Each label source marks its steps (an injection's as injected, the others' as blamed); a
    label that restates an event already marking the step (same kind and mode; each event once,
    in order) is added to that mark's source instead of marking the step twice. Of one model's
    ``aegis.attribution`` events only the latest marks a step (:func:`superseded_verdicts`).
    """
    marks: dict[int, list[Mark]] = {}
    superseded = superseded_verdicts(traj)
    for step in traj.steps:
        for event in step.events:
            mark = None if id(event) in superseded else _event_mark(event)
            if mark is not None:
                marks.setdefault(step.index, []).append(mark)
    from_events = {index: list(ms) for index, ms in marks.items()}
    by_span = {s.span_id: s.index for s in traj.steps if s.span_id}
    known = {s.index for s in traj.steps}
    for label in traj.labels.sets:
        kind = "injected" if label.source in INJECTION_SOURCES else "blamed"
        for fault in label.faults:
            index = by_span.get(fault.span_id) if fault.span_id else fault.step
            if index is None or index not in known:
                continue
            same = next((m for m in from_events.get(index, []) if m.kind == kind and fault.mode in (None, m.mode)), None)
            if same is not None:  # each event restated by one label, in the order both were recorded
                from_events[index].remove(same)
                same.source += " + " + _label_source(label.source)
                continue
            details = {k: v for k, v in fault.model_dump(include={"agent", "strategy", "reason"}).items() if v is not None}
            marks.setdefault(index, []).append(Mark(kind, _label_source(label.source), fault.mode, details))
    return marks


def _safe_url(url: str | None) -> str | None:
    """``url`` without a trailing slash when it is http(s), else None (no ``javascript:`` links)."""
    if not url:
        return None
    return url.rstrip("/") if urlsplit(url).scheme in {"http", "https"} else None


def trace_links(trace_id: str | None, *, jaeger_url: str | None = None, phoenix_url: str | None = None) -> dict[str, str]:
    """Links to the trace in Jaeger and Phoenix, for the endpoints given or set in the environment."""
    if not trace_id:
        return {}
    tid = quote(trace_id, safe="")
    links = {}
    jaeger = _safe_url(jaeger_url or os.environ.get(ENV_JAEGER_URL))
    phoenix = _safe_url(phoenix_url or os.environ.get(ENV_PHOENIX_URL))
    if jaeger:
        links["Jaeger"] = f"{jaeger}/trace/{tid}"
    if phoenix:
        links["Phoenix"] = f"{phoenix}/redirects/traces/{tid}"
    return links


# -- rendering helpers ---------------------------------------------------------------------------
#: Characters shown as escapes (``\\x00``, ``\\u202e``), as the terminal shows them: an HTML parser
#: drops NUL from text, the other controls and noncharacters render as nothing (or a box), bidi
#: overrides reorder what follows. Tab, newline and carriage return stay.
_HIDDEN = {c: e for c, e in UNPRINTABLE.items() if chr(c) not in "\t\n\r"} | {
    c: f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"
    for c in (*range(0xFDD0, 0xFDF0), *(plane | low for plane in range(0, 0x110000, 0x10000) for low in (0xFFFE, 0xFFFF)))}


def _e(value: Any) -> str:
    """Trace content as HTML text: secrets redacted (a trace may come from elsewhere), invisible
    characters shown as escapes, then escaped."""
    return escape(redact_secrets("" if value is None else str(value)).translate(_HIDDEN), quote=True)


def _block(text: str | None, cls: str = "") -> str:
    text = text or ""
    more = ""
    if len(text) > MAX_TEXT:
        text, more = text[:MAX_TEXT], f'<div class="clip">… {len(text) - MAX_TEXT:,} more characters clipped</div>'
    return f'<pre class="{cls}">{_e(text)}</pre>{more}'


def _preview(text: str, width: int = 140) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _tokens(step: Step) -> int:
    return (step.usage.input_tokens or 0) + (step.usage.output_tokens or 0)


def _secs(ns: int | None) -> str:
    if ns is None:
        return ""
    return f"{ns / 1e6:.0f} ms" if ns < 10**9 else f"{ns / 1e9:.2f} s"


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)


def _mark_html(mark: Mark) -> str:
    label = "BLAMED" if mark.kind == "blamed" else "INJECTED"
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_block(_value(v))}</dd>" for k, v in mark.details.items())
    return (
        f'<div class="mark {mark.kind}"><div class="mark-head"><b>{label}</b> '
        f'<span class="mode">{_e(mark.mode or "mode not given")}</span> '
        f'<span class="src">from {_e(mark.source)}</span></div>'
        + (f"<dl>{rows}</dl>" if rows else "")
        + "</div>"
    )


def _kinds(step: Step, marks: list[Mark]) -> list[str]:
    """CSS classes of a step: ``blamed``, ``injected``, ``errored``."""
    return sorted({m.kind for m in marks}) + (["errored"] if step.error else [])


def _badges(marks: list[Mark], step: Step) -> str:
    out = [f'<span class="badge {m.kind}">{"blamed" if m.kind == "blamed" else "injected"} {_e(m.mode or "")}</span>' for m in marks]
    if step.error:
        out.append('<span class="badge error">error</span>')
    return "".join(out)


def _step_html(step: Step, marks: list[Mark], agent_cls: str, t0: int | None, open_: bool, superseded: set[int]) -> str:
    kinds = _kinds(step, marks)
    tools = ", ".join(t.name for t in step.tool_calls)
    tokens = f"{step.usage.input_tokens or 0}→{step.usage.output_tokens or 0} tok" if step.usage.input_tokens is not None or step.usage.output_tokens is not None else ""
    if step.usage.cost_usd is not None:
        tokens += f" · ${cost_text(step.usage.cost_usd)}"
    dur = _secs(step.end_ns - step.start_ns) if step.start_ns and step.end_ns else ""
    body = [_mark_html(m) for m in marks]
    if step.error:
        body.append(f'<h4>Error</h4>{_block(step.error, "err")}')
    if step.input_messages:
        msgs = "".join(
            f'<div class="msg"><span class="role">{_e(m.role)}{" · " + _e(m.name) if m.name else ""}</span>{_block(m.content)}</div>'
            for m in step.input_messages
        )
        n = len(step.input_messages)
        body.append(f"<h4>Input ({n} message{'s' if n > 1 else ''})</h4>{msgs}")
    body.append(f"<h4>Output</h4>{_block(step.output, 'out')}")
    for t in step.tool_calls:
        status = f'<span class="badge error">{_e(t.error)}</span>' if t.error else ""
        body.append(
            f'<div class="tool"><h4>Tool <code>{_e(t.name)}</code> {status}</h4>'
            + "".join(f'<div class="kv">{k}</div>{_block(v)}' for k, v in (("arguments", t.arguments), ("result", t.result)) if v)
            + "</div>"
        )
    if step.llm_calls:
        rows = "".join(
            f"<tr><td>{_e(c.model)}</td><td>{_e(c.provider)}</td><td>{_e(c.input_tokens)}</td><td>{_e(c.output_tokens)}</td>"
            f"<td>{_e(c.cache_read_input_tokens)}</td><td>{_e(c.reasoning_output_tokens)}</td><td>{cost_text(c.cost_usd)}</td></tr>"
            for c in step.llm_calls
        )
        body.append("<h4>LLM calls</h4><table><tr><th>model</th><th>provider</th><th>in</th><th>out</th><th>cached in</th>"
                    f"<th>reasoning</th><th>USD</th></tr>{rows}</table>")
    other = [e for e in step.events if e.get("name") not in (*BLAME_EVENTS, sc.EVENT_INJECTION) or id(e) in superseded]
    if other:
        items = "".join(f"<li><code>{_e(e.get('name'))}</code>{' (an earlier verdict of its model)' if id(e) in superseded else ''}"
                        f"{_block(_value(e.get('attributes') or {}))}</li>" for e in other)
        body.append(f"<h4>Other events</h4><ul>{items}</ul>")
    start = f" · t+{_secs(step.start_ns - t0)}" if step.start_ns and t0 else ""
    flag_attrs = (' data-flagged="1"' if marks else "") + (" open" if open_ else "")
    body.append(f'<div class="meta">span {_e(step.span_id)}{" · role " + _e(step.role) if step.role else ""}{start}</div>')
    return (
        f'<details class="step {" ".join(kinds)}" id="step-{step.index}" data-agent="{_e(step.agent)}"'
        f'{flag_attrs}>'
        f'<summary><span class="idx">#{step.index}</span><span class="chip {agent_cls}">{_e(step.agent)}</span>'
        f'{_badges(marks, step)}<span class="tools">{_e(tools)}</span><span class="tok">{tokens}</span>'
        f'<span class="dur">{dur}</span><span class="pv">{_e(_preview(step.output))}</span></summary>'
        f'<div class="body">{"".join(body)}</div></details>'
    )


def _timeline_html(traj: Trajectory, marks: dict[int, list[Mark]], agent_cls: dict[str, str]) -> str:
    n = len(traj.steps)
    if not n:
        return '<p class="empty">no steps recorded</p>'
    cell = 28 if n <= 40 else 14 if n <= 120 else 7
    rows = {a: i + 1 for i, a in enumerate(traj.agents)}
    peak = max((_tokens(s) for s in traj.steps), default=0) or 1
    out = [f'<div class="tl" style="grid-template-columns:max-content repeat({n},{cell}px);grid-template-rows:repeat({len(rows) + 1},auto)">']
    out += [f'<div class="tl-label" style="grid-row:{r}"><span class="chip {agent_cls[a]}">{_e(a)}</span></div>' for a, r in rows.items()]
    out.append(f'<div class="tl-label tl-tok" style="grid-row:{len(rows) + 1}">tokens</div>')
    for col, s in enumerate(traj.steps, start=2):
        kinds = " ".join(_kinds(s, marks.get(s.index, [])) + (["tooled"] if s.tool_calls else []))
        tip = f"#{s.index} {s.agent}" + (f" · tools: {', '.join(t.name for t in s.tool_calls)}" if s.tool_calls else "") + (f" · {_tokens(s)} tokens" if _tokens(s) else "")
        tip += "".join(f" · {m.kind} {m.mode or ''}" for m in marks.get(s.index, []))
        label = str(s.index) if cell >= 28 else ""
        out.append(
            f'<a class="tl-cell {agent_cls[s.agent]} {kinds}" href="#step-{s.index}" data-agent="{_e(s.agent)}" '
            f'style="grid-row:{rows[s.agent]};grid-column:{col}" title="{_e(tip)}">{label}</a>'
        )
        height = round(100 * _tokens(s) / peak)
        out.append(f'<div class="tl-bar" style="grid-row:{len(rows) + 1};grid-column:{col}"><i style="height:{height}%"></i></div>')
    out.append("</div>")
    return "".join(out)


def _summary_html(traj: Trajectory, marks: dict[int, list[Mark]], links: dict[str, str], agent_cls: dict[str, str]) -> str:
    o = traj.outcome
    verdict, cls = {True: ("success", "ok"), False: ("failure", "bad"), None: ("not judged", "na")}[o.success]
    tin = sum(s.usage.input_tokens or 0 for s in traj.steps)
    tout = sum(s.usage.output_tokens or 0 for s in traj.steps)
    ends = [s.end_ns for s in traj.steps if s.end_ns]
    duration = _secs(max(ends) - traj.start_ns) if ends and traj.start_ns else "-"
    started = datetime.fromtimestamp(traj.start_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if traj.start_ns else "-"
    link_html = " ".join(f'<a class="ext" href="{_e(url)}" target="_blank" rel="noopener noreferrer">open in {_e(name)}</a>' for name, url in links.items())
    agents = " ".join(f'<span class="chip {agent_cls[a]}">{_e(a)}</span>' for a in traj.agents) or "-"
    faults = ""
    if any(label.faults for label in traj.labels.sets):
        rows = "".join(
            f"<tr><td>{_e(label.source or '-')}</td><td>{_e(f.agent)}</td><td>{_e(f.step)}</td><td>{_e(f.mode)}</td>"
            f"<td>{_e(f.strategy)}</td><td>{_e(f.reason)}</td></tr>"
            for label in traj.labels.sets for f in label.faults
        )
        faults = ("<h3>Labelled faults</h3><table><tr><th>source</th><th>agent</th><th>step</th><th>mode</th>"
                  f"<th>strategy</th><th>reason</th></tr>{rows}</table>")
    agent_of = {s.index: s.agent for s in traj.steps}
    flagged = "".join(
        f'<li><a href="#step-{i}">step #{i}</a> <span class="chip {agent_cls[agent_of[i]]}">{_e(agent_of[i])}</span> '
        + " ".join(f'<span class="badge {m.kind}">{m.kind} {_e(m.mode or "")}</span>' for m in ms)
        + "</li>"
        for i, ms in sorted(marks.items())
    )
    return (
        f'<section class="summary"><div class="grid">'
        f'<div class="card wide"><h3>Task</h3>{_block(traj.task or "-", "task")}</div>'
        f'<div class="card"><h3>Outcome</h3><div class="verdict {cls}">{verdict}</div>'
        f'<div class="kv">answer</div>{_block(o.answer or "-")}<div class="kv">expected</div>{_block(o.expected or "-")}</div>'
        f'<div class="card"><h3>Run</h3><table class="facts">'
        f"<tr><th>trace</th><td><code>{_e(traj.trace_id or '-')}</code></td></tr>"
        f"<tr><th>framework</th><td>{_e(traj.framework or '-')}</td></tr><tr><th>started</th><td>{started}</td></tr>"
        f"<tr><th>duration</th><td>{duration}</td></tr><tr><th>steps</th><td>{len(traj.steps)}</td></tr>"
        f"<tr><th>tokens</th><td>{tin} in / {tout} out</td></tr><tr><th>agents</th><td>{agents}</td></tr>"
        + (f"<tr><th>cost</th><td>USD {cost_text(traj.cost_usd)}</td></tr>" if traj.cost_usd is not None else "")
        + (f"<tr><th>session</th><td>{_e(session_text(traj.metadata['session']))}</td></tr>" if traj.metadata.get("session") else "")
        + (f'<tr><th>error</th><td class="err">{_e(traj.error)}</td></tr>' if traj.error else "")
        + f"</table>{link_html}</div></div>"
        + (f'<h3>Flagged steps</h3><ul class="flagged">{flagged}</ul>' if flagged else "")
        + faults
        + "</section>"
    )


def render_report(traj: Trajectory, *, jaeger_url: str | None = None, phoenix_url: str | None = None) -> str:
    """The report of ``traj`` as one self-contained HTML document."""
    marks = step_marks(traj)
    agent_cls = {a: f"a{i % _PALETTE}" for i, a in enumerate(traj.agents)}
    links = trace_links(traj.trace_id, jaeger_url=jaeger_url, phoenix_url=phoenix_url)
    t0 = traj.start_ns
    open_flagged = len(marks) <= 10
    superseded = superseded_verdicts(traj)
    steps = "".join(_step_html(s, marks.get(s.index, []), agent_cls[s.agent], t0, open_flagged and s.index in marks, superseded)
                    for s in traj.steps)
    options = "".join(f'<option value="{_e(a)}">{_e(a)}</option>' for a in traj.agents)
    title = f"{traj.app or 'run'} ({traj.framework or 'unknown framework'}) · {(traj.trace_id or '')[:12]}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">"
        f"<title>aegis-probe · {_e(title)}</title><style>{CSS}{GRAPH_CSS}</style></head><body>"
        f"<header><h1>aegis-probe trace report</h1><div class=\"sub\">{_e(title)}</div></header>"
        + _summary_html(traj, marks, links, agent_cls)
        + '<section><h2>Agents</h2><p class="hint">one box per agent (its steps), arrows: hand-overs to the next agent to act, '
        '#order of the first one, ×how often; a nested team\'s agents are boxed under its name; red outline: blamed, '
        f'orange: injected.</p><div class="graph-wrap">{graph_svg(agent_graph(traj, {i: [m.kind for m in ms] for i, ms in marks.items()}), agent_cls)}</div></section>'
        + f'<section><h2>Timeline</h2><p class="hint">one column per step, one row per agent; outlined red: blamed, '
        f"orange: injected, dot: tool call; bars: tokens. Click a cell to open its step.</p>"
        f'<div class="tl-wrap">{_timeline_html(traj, marks, agent_cls)}</div></section>'
        f'<section><h2>Steps</h2><div class="filters"><label>agent <select id="f-agent"><option value="">all agents</option>{options}</select></label>'
        '<input id="f-text" type="search" placeholder="filter by text…"><label><input id="f-flagged" type="checkbox"> flagged only</label>'
        '<button id="f-open" type="button">expand shown</button><button id="f-close" type="button">collapse all</button>'
        f'<span id="f-count">{len(traj.steps)} steps</span></div><div id="steps">{steps}</div></section>'
        f"<footer>generated by aegis-probe</footer><script>{JS}</script></body></html>"
    )


def write_report(
    trajectory: Trajectory, path: str | os.PathLike[str], *, jaeger_url: str | None = None, phoenix_url: str | None = None
) -> Path:
    """Write the HTML report of ``trajectory`` to ``path`` (parents created) and return the path.

    The report is written to a temporary file beside ``path`` and moved over it once whole, so a
    write that fails (a full disk, a file size limit) or a crash leaves the previous report (or
    none) as it was; the error names ``path``.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    html = render_report(trajectory, jaeger_url=jaeger_url, phoenix_url=phoenix_url).encode("utf-8")
    write_atomically(out, html)
    return out


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` (through a symlink: its target) with ``data`` at once: written and synced to
    a temporary file in the same directory, then renamed over it; the file keeps its permissions
    (a new one gets the umask's). A device or FIFO is written in place, never replaced
    (:func:`~aegis_probe.storage.outputs.replacing`). An ``OSError`` names ``path`` and leaves no
    temporary file."""
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        if tmp != path:
            os.fsync(fh.fileno())
