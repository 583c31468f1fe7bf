"""The report's agent graph: nodes per agent with step counts, hand-overs in order with counts,
nested teams boxed, injected and blamed agents marked; drawn by headless Chromium."""

from __future__ import annotations

from pathlib import Path

from aegis_probe.report.graph import PER_ROW, agent_graph
from aegis_probe.report.html import render_report, step_marks, write_report
from aegis_probe.trajectory import Step, Trajectory
from test_report import DOM, XSS, artifact, browser, chromium, handmade_run


def _traj(agents: list[str], paths: list[list[str]] | None = None) -> Trajectory:
    steps = [Step(index=i, agent=a, path=(paths[i] if paths else []), output=f"turn {i}") for i, a in enumerate(agents)]
    return Trajectory(trace_id="cd" * 16, framework="synthetic", app="g", task="t", steps=steps)


def test_hand_overs_are_counted_in_the_order_they_first_happened():
    graph = agent_graph(_traj(["A", "B", "A", "B", "C", "C", "A"]))
    assert {a: n.steps for a, n in graph.nodes.items()} == {"A": 3, "B": 2, "C": 2}
    assert [(e.source, e.target, e.count, e.first, e.steps) for e in graph.edges.values()] == [
        ("A", "B", 2, 1, [1, 3]), ("B", "A", 1, 2, [2]), ("B", "C", 1, 3, [4]), ("C", "A", 1, 4, [6])]
    # C -> C (an agent acting twice running) is no hand-over


def test_nested_teams_are_boxes_of_their_own_and_wide_teams_wrap():
    agents = ["manager", "inner1", "inner2", "manager"] + [f"w{i}" for i in range(PER_ROW + 2)]
    paths = [["outer"], ["outer", "inner"], ["outer", "inner"], ["outer"]] + [["outer", "wide"]] * (PER_ROW + 2)
    graph = agent_graph(_traj(agents, paths))
    assert [(t.path, t.rows, t.cols) for t in graph.teams] == [
        (("outer",), 1, 1), (("outer", "inner"), 1, 2), (("outer", "wide"), 2, PER_ROW)]
    assert graph.nodes["inner1"].y == graph.nodes["inner2"].y != graph.nodes["manager"].y
    assert graph.nodes["w0"].y < graph.nodes[f"w{PER_ROW}"].y, "the seventh agent of a team starts a new row"


def test_report_marks_the_injected_and_blamed_agents_and_escapes_names(tmp_path):
    traj = handmade_run(tmp_path / "store")  # Solver's step 1 injected, Checker's step 3 blamed
    html = render_report(traj)
    svg = html[html.index('<svg class="agent-graph"'):html.index("</svg>")]
    dom = DOM(svg)
    (solver,) = dom.find("g", data_agent="Solver")
    (checker,) = dom.find("g", data_agent="Checker")
    assert "g-injected" in solver.classes and solver.attrs["data-injected"] == "1"
    assert "g-blamed" in checker.classes and checker.attrs["data-blamed"] == "3"
    assert solver.attrs["data-steps"] == "2"
    kinds = {i: [m.kind for m in ms] for i, ms in step_marks(traj).items()}
    assert agent_graph(traj, kinds).nodes["Checker"].blamed == [3]
    hostile = agent_graph(_traj(["A", XSS]))
    assert XSS not in render_report(_traj(["A", XSS])) and XSS in hostile.nodes


@browser
def test_browser_draws_the_graph(tmp_path):
    traj = handmade_run(tmp_path / "store")
    page = write_report(traj, tmp_path / "graph.html")
    dom, _ = chromium(page, tmp_path)
    assert "data-pwned" not in dom.find("body")[0].attrs
    nodes = dom.find("g", "g-node")
    assert [n.attrs["data-agent"] for n in nodes] == ["Planner", "Solver", "Checker"]
    edges = dom.find("g", "g-edge")
    assert [(e.attrs["data-source"], e.attrs["data-target"], e.attrs["data-first"]) for e in edges] == [
        ("Planner", "Solver", "1"), ("Solver", "Checker", "2")]
    assert [e.text().strip() for e in edges] == [
        "Planner → Solver: 1 hand-over(s), first #1, to steps 1#1 ×1", "Solver → Checker: 1 hand-over(s), first #2, to steps 3#2 ×1"]
    chromium(page, tmp_path, screenshot=artifact("graph.png"), size="1200,900")
    assert Path(artifact("graph.png")).stat().st_size > 10_000


def test_step_spans_carry_the_graph_and_hand_over_attributes(tmp_path):
    from aegis_probe.capture import semconv as sc
    from aegis_probe.storage.store import TraceStore

    traj = handmade_run(tmp_path / "store")  # Planner, Solver, Solver, Checker
    records = TraceStore(tmp_path / "store").trace(traj.trace_id)
    root = next(r for r in records if r.attributes.get(sc.WORKFLOW_NAME))
    steps = sorted((r for r in records if sc.STEP_INDEX in r.attributes), key=lambda r: r.attributes[sc.STEP_INDEX])
    assert root.attributes[sc.GRAPH_NODE_ID] == "calc-team"
    assert [(r.attributes[sc.GRAPH_NODE_ID], r.attributes[sc.GRAPH_NODE_PARENT_ID]) for r in steps] == [
        ("Planner", "calc-team"), ("Solver", "calc-team"), ("Solver", "calc-team"), ("Checker", "calc-team")]
    assert [(r.attributes.get(sc.HANDOFF_SOURCE), r.attributes.get(sc.HANDOFF_TARGET)) for r in steps] == [
        (None, None), ("Planner", "Solver"), (None, None), ("Solver", "Checker")]
