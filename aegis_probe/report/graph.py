"""The agents of a run as a graph: one node per agent (its step count), one edge per hand-over
between two agents (how often, and when it first happened), the agents of a nested team boxed
together under the team's name, and the agents of injected and blamed steps marked. Drawn as an
inline SVG for the HTML report; nothing is fetched at view time and every name is escaped."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from html import escape
from typing import Sequence

from ..trajectory import Trajectory
from .assets import CSS

NODE_W, NODE_H = 150, 44  # a node's box
COL_W, ROW_H = 190, 120  # space given to a node, and to a team's row
PAD = 24  # around a team's box
PER_ROW = 6  # agents of a team on one row; a larger team takes several rows
MAX_BEND = 60  # how far a hand-over's curve leaves the straight line, at most
MAX_NAME = 18  # characters of a name shown in a box (the title holds it whole)
#: The graph's stylesheet: a node takes its agent's colour (the report's ``.aN`` classes).
GRAPH_CSS = (
    ".graph-wrap{overflow:auto;border:1px solid #dde1ea;border-radius:8px;background:#fff;padding:4px}"
    ".agent-graph text{font:12px system-ui,sans-serif;text-anchor:middle;dominant-baseline:middle}"
    ".g-team rect{fill:#f5f7fb;stroke:#c9cfdc;stroke-dasharray:4 3}.g-team text{text-anchor:start;fill:#5b6272;font-weight:600}"
    ".g-node rect{stroke:#fff;stroke-width:2}.g-node text{fill:#fff;font-weight:600}.g-node .g-count{font-weight:400;font-size:11px}"
    ".g-node.g-injected rect{stroke:#f08c00;stroke-width:4}.g-node.g-blamed rect{stroke:#d42a2a;stroke-width:4}"
    ".g-node .g-mark{text-anchor:end;font-size:10px;fill:#fff}"
    ".g-edge path{fill:none;stroke:#7a8194}.g-edge text{fill:#3a3f4b;font-size:11px;paint-order:stroke;stroke:#fff;stroke-width:3px}"
    "#g-arrow path{fill:#7a8194}"
    + "".join(f".g-node.a{n} rect{{fill:{colour}}}" for n, colour in re.findall(r"\.a(\d)\{background:(#[0-9a-fA-F]{3,6})\}", CSS))
)


@dataclass
class Node:
    """One agent: where it sits, how many steps it took, which of them are marked."""

    agent: str
    team: tuple[str, ...]
    steps: int = 0
    blamed: list[int] = field(default_factory=list)
    injected: list[int] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0


@dataclass
class Edge:
    """Hand-overs from one agent to the next one to act, in the order they first happened."""

    source: str
    target: str
    count: int = 0
    first: int = 0  # 1-based rank of its first hand-over among the run's edges
    steps: list[int] = field(default_factory=list)  # the index of each step that received it


@dataclass
class Team:
    """A team's box: its name path, its first row and how many rows and columns it takes."""

    path: tuple[str, ...]
    row: int
    rows: int
    cols: int


@dataclass
class AgentGraph:
    """Nodes by agent, edges by (source, target), teams in the order their first agent acted."""

    nodes: dict[str, Node]
    edges: dict[tuple[str, str], Edge]
    teams: list[Team]


def agent_graph(traj: Trajectory, marks: dict[int, Sequence[str]] | None = None) -> AgentGraph:
    """The graph of ``traj``'s steps; ``marks`` maps a step index to the kinds of its marks
    (``blamed``, ``injected``), as the report computes them."""
    nodes: dict[str, Node] = {}
    edges: dict[tuple[str, str], Edge] = {}
    teams: list[tuple[str, ...]] = []
    previous: str | None = None
    for step in traj.steps:
        team = tuple(step.path)
        node = nodes.get(step.agent)
        if node is None:
            node = nodes[step.agent] = Node(step.agent, team)
            if team not in teams:
                teams.append(team)
        node.steps += 1
        for kind in (marks or {}).get(step.index, ()):
            if kind == "blamed":
                node.blamed.append(step.index)
            elif kind == "injected":
                node.injected.append(step.index)
        if previous is not None and previous != step.agent:
            edge = edges.get((previous, step.agent))
            if edge is None:
                edge = edges[(previous, step.agent)] = Edge(previous, step.agent, first=len(edges) + 1)
            edge.count += 1
            edge.steps.append(step.index)
        previous = step.agent
    return AgentGraph(nodes, edges, _place(nodes, teams))


def _place(nodes: dict[str, Node], teams: list[tuple[str, ...]]) -> list[Team]:
    """Each team's agents left to right in the order they first acted, :data:`PER_ROW` a row; the
    teams one below the other."""
    boxes, row = [], 0
    for path in teams:
        members = [n for n in nodes.values() if n.team == path]
        for i, node in enumerate(members):
            node.x = PAD + (i % PER_ROW) * COL_W + NODE_W / 2
            node.y = PAD + (row + i // PER_ROW) * ROW_H + 28 + NODE_H / 2
        rows = -(-len(members) // PER_ROW)
        boxes.append(Team(path, row, rows, min(len(members), PER_ROW)))
        row += rows
    return boxes


def _short(name: str) -> str:
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"


def _steps_text(indexes: list[int]) -> str:
    shown = ", ".join(str(i) for i in indexes[:5])
    return shown + (f" and {len(indexes) - 5} more" if len(indexes) > 5 else "")


def _edge_svg(edge: Edge, nodes: dict[str, Node]) -> str:
    a, b = nodes[edge.source], nodes[edge.target]
    dx, dy = b.x - a.x, b.y - a.y
    length = math.hypot(dx, dy) or 1.0
    bend = min(0.18 * length + 18, MAX_BEND)  # to the left of the direction: a -> b and b -> a take two curves
    cx, cy = (a.x + b.x) / 2 - dy / length * bend, (a.y + b.y) / 2 + dx / length * bend
    # end at the target box's edge: stop short along the last tangent by about half a box
    tx, ty = b.x - cx, b.y - cy
    t_len = math.hypot(tx, ty) or 1.0
    reach = min(NODE_W / 2 / max(abs(tx) / t_len, 1e-6), NODE_H / 2 / max(abs(ty) / t_len, 1e-6)) + 4
    ex, ey = b.x - tx / t_len * reach, b.y - ty / t_len * reach
    width = 1.2 + min(edge.count, 20) * 0.25
    label = f"#{edge.first} ×{edge.count}"
    title = escape(f"{edge.source} → {edge.target}: {edge.count} hand-over(s), first #{edge.first}, "
                   f"to steps {_steps_text(edge.steps)}")
    lx, ly = 0.25 * a.x + 0.5 * cx + 0.25 * b.x, 0.25 * a.y + 0.5 * cy + 0.25 * b.y  # the curve's middle
    return (f'<g class="g-edge" data-source="{escape(edge.source)}" data-target="{escape(edge.target)}" '
            f'data-count="{edge.count}" data-first="{edge.first}"><title>{title}</title>'
            f'<path d="M{a.x:.1f},{a.y:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}" stroke-width="{width:.2f}" '
            'marker-end="url(#g-arrow)"/>'
            f'<text x="{lx:.1f}" y="{ly:.1f}">{escape(label)}</text></g>')


def _node_svg(node: Node, cls: str) -> str:
    kinds = (["blamed"] if node.blamed else []) + (["injected"] if node.injected else [])
    classes = " ".join(["g-node", cls] + [f"g-{k}" for k in kinds])
    marks = "".join(f" {k} at step {_steps_text(getattr(node, k))};" for k in kinds)
    title = escape(f"{node.agent}: {node.steps} step(s);{marks}".rstrip(";"))
    x, y = node.x - NODE_W / 2, node.y - NODE_H / 2
    badge = ""
    if kinds:
        badge = (f'<text class="g-mark" x="{x + NODE_W - 6:.1f}" y="{y + 13:.1f}">'
                 + escape(" ".join("B" if k == "blamed" else "I" for k in kinds)) + "</text>")
    return (f'<g class="{classes}" data-agent="{escape(node.agent)}" data-steps="{node.steps}"'
            f' data-blamed="{",".join(map(str, node.blamed))}" data-injected="{",".join(map(str, node.injected))}">'
            f"<title>{title}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="8"/>'
            f'<text x="{node.x:.1f}" y="{node.y - 3:.1f}">{escape(_short(node.agent))}</text>'
            f'<text class="g-count" x="{node.x:.1f}" y="{node.y + 13:.1f}">{node.steps} step{"s" if node.steps != 1 else ""}</text>'
            f"{badge}</g>")


def graph_svg(graph: AgentGraph, agent_cls: dict[str, str]) -> str:
    """``graph`` as an inline SVG element (classes for the report's stylesheet)."""
    if not graph.nodes:
        return '<p class="hint">no agent steps</p>'
    widest = max(team.cols for team in graph.teams)
    width = 2 * PAD + (widest - 1) * COL_W + NODE_W
    height = 2 * PAD + sum(team.rows for team in graph.teams) * ROW_H
    boxes = []
    for team in graph.teams:
        name = " / ".join(team.path) if team.path else "run"
        top = PAD / 2 + team.row * ROW_H
        boxes.append(f'<g class="g-team" data-team="{escape(name)}"><rect x="{PAD / 2:.1f}" y="{top:.1f}" '
                     f'width="{(team.cols - 1) * COL_W + NODE_W + PAD:.1f}" height="{team.rows * ROW_H - 8}" rx="10"/>'
                     f'<text x="{PAD:.1f}" y="{top + 16:.1f}">{escape(_short(name) if len(name) > 60 else name)}</text></g>')
    edges = "".join(_edge_svg(e, graph.nodes) for e in graph.edges.values())
    nodes = "".join(_node_svg(n, agent_cls.get(n.agent, "")) for n in graph.nodes.values())
    return (f'<svg class="agent-graph" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="agents and their hand-overs">'
            '<defs><marker id="g-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>'
            + "".join(boxes) + edges + nodes + "</svg>")
