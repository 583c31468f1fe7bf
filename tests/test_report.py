"""The HTML trace report: what it flags and escapes, the CLI, and what a real browser shows.

Traces come from real spans: a hand-driven run through the core span helpers (always available)
and each framework's demo team against the loopback model server (skipped until its demo module
is importable). Blame arrives the way attribution will write it: an ``aegis.attribution`` event
amended onto the step's span in the trace store. Browser tests open the report in headless
Chromium (``/usr/bin/chromium``) and assert on the DOM after the page's script ran.
"""

from __future__ import annotations

import importlib
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from opentelemetry.sdk.trace import TracerProvider

from aegis_probe.capture import semconv as sc
from aegis_probe.cli import main
from aegis_probe.config import ProbeConfig
from aegis_probe.demos import FRAMEWORKS, demo_module
from aegis_probe.demos.task import EXPRESSION, TASK, calculate, judge
from aegis_probe.capture.probe import Probe
from aegis_probe.report.html import ENV_JAEGER_URL, ENV_PHOENIX_URL, render_report, step_marks, trace_links, write_report
from aegis_probe.capture.spans import start_llm, start_run, start_step, start_tool
from aegis_probe.storage.store import StoreSpanProcessor, TraceStore
from aegis_probe.trajectory import Fault, Labels, Message, Step, Trajectory, Usage

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "report"
CHROMIUM = Path("/usr/bin/chromium")
browser = pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)")

# Content that would run if the report did not escape it: it marks <body> with data-pwned.
XSS = "<script>document.body.setAttribute('data-pwned','1')</script><img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"
BLAME = {"mode": "FM-3.3", "score": 0.91, "evidence": "approved the total without recomputing it"}
INJECTION = {"mode": "FM-2.4", "strategy": "prompt", "agent": "Solver", "instruction": "hide the notebook count"}


# -- traces ----------------------------------------------------------------------------------
def handmade_run(store_dir: Path) -> Trajectory:
    """A 3-agent run made of real spans through the core helpers, stored, then blamed by amendment."""
    store = TraceStore(store_dir)
    provider = TracerProvider()
    processor = StoreSpanProcessor(store)
    provider.add_span_processor(processor)
    config = ProbeConfig.resolve(trace_dir=store_dir)
    probe = Probe(None, config, provider.get_tracer("aegis_probe"), store, provider, judge)  # type: ignore[arg-type]
    script = [
        ("Planner", "Add pen and notebook prices, then multiply by 3.", None),
        ("Solver", f"calculate({EXPRESSION})", EXPRESSION),
        ("Solver", "The total is 126. " + XSS, None),
        ("Checker", "17*3+25 = 76. Approved: 76.", None),
    ]
    run = start_run(probe, "calc-team", framework="handmade", task=TASK)
    token = run.attach()
    try:
        for agent, text, expression in script:
            step = start_step(probe, agent, run=run, input_messages=[{"role": "user", "content": TASK}])
            step_token = step.attach()
            try:
                llm = start_llm(probe, "aegis-scripted", provider="openai", agent=agent, input_messages=[{"role": "user", "content": TASK}])
                llm.finish([{"role": "assistant", "content": text}], input_tokens=40 + 10 * step.index, output_tokens=len(text.split()))
                if expression:
                    tool = start_tool(probe, "calculate", call_id="call-1", arguments={"expression": expression})
                    tool.finish(calculate(expression))
                    step.span.add_event(sc.EVENT_INJECTION, INJECTION)
            finally:
                step.detach(step_token)
            step.finish([{"role": "assistant", "content": text}])
        run.answer = "76"
    finally:
        run.detach(token)
    run.finish()
    traj = Trajectory.from_spans(store.trace(run.trace_id))
    blame(store, traj, 3)
    return Trajectory.from_spans(store.trace(run.trace_id))


def blame(store: TraceStore, traj: Trajectory, index: int) -> None:
    """Append an attribution verdict for step ``index`` as an event amendment on its span."""
    store.amend(traj.trace_id, traj.steps[index].span_id, events=[{"name": "aegis.attribution", "time_ns": 1, "attributes": BLAME}])


def big_trajectory(n: int) -> Trajectory:
    agents = [f"agent_{i}" for i in range(6)]
    steps = [
        Step(index=i, agent=agents[i % 6], input_messages=[Message(role="user", content=f"message {i} " * 40)],
             output=f"reply {i} " * 60, usage=Usage(input_tokens=100 + i, output_tokens=20 + i % 7),
             start_ns=1_000_000_000 + i * 10**8, end_ns=1_050_000_000 + i * 10**8, span_id=f"{i:016x}",
             events=[{"name": "aegis.blame", "time_ns": 0, "attributes": {"aegis.blame.mode": "FM-1.3", "score": 0.7}}] if i == 417 else [])
        for i in range(n)
    ]
    return Trajectory(trace_id="ab" * 16, framework="synthetic", app="big", task="a long run", steps=steps, start_ns=1_000_000_000,
                      labels=Labels(faults=[Fault(agent="agent_1", step=241, mode="FM-2.3", reason="derailed")]))


# -- browser ---------------------------------------------------------------------------------
class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()


class DOM(HTMLParser):
    """A minimal tree of Chromium's serialized DOM (which closes every non-void element)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#document", {}, None)
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_endtag(self, tag):
        node = self.cur
        while node.parent is not None and node.tag != tag:
            node = node.parent
        if node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data):
        self.cur.children.append(data)

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        return [n for n in self.root.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def by_id(self, id_: str) -> Node:
        (node,) = self.find(id=id_)
        return node


def chromium(page: Path, tmp_path: Path, *, query: str = "", screenshot: Path | None = None, size: str = "1400,1600") -> tuple[DOM, float]:
    """Load ``page`` in headless Chromium; return its DOM after scripts ran, and the seconds taken."""
    args = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--hide-scrollbars", f"--window-size={size}"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    started = time.perf_counter()
    done = subprocess.run([*args, page.resolve().as_uri() + query], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    if screenshot:
        assert screenshot.stat().st_size > 10_000, "screenshot is empty"
        return DOM(""), elapsed
    return DOM(done.stdout), elapsed


def visible_steps(dom: DOM) -> list[Node]:
    return [n for n in dom.find("details", "step") if "hidden" not in n.attrs]


def artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


# -- tests: content --------------------------------------------------------------------------
def test_marks_from_injection_attribution_and_labels(tmp_path):
    traj = handmade_run(tmp_path / "store")
    marks = step_marks(traj)
    assert sorted(marks) == [1, 3]
    (inj,) = marks[1]
    assert (inj.kind, inj.mode, inj.details["strategy"], inj.details["agent"]) == ("injected", "FM-2.4", "prompt", "Solver")
    (att,) = marks[3]
    assert (att.kind, att.mode, att.source, att.details["score"]) == ("blamed", "FM-3.3", "aegis.attribution", 0.91)
    labelled = traj.model_copy(update={"labels": Labels(faults=[Fault(agent="Planner", step=0, mode="FM-1.1", reason="bad plan"),
                                                                Fault(agent="Checker", mode="FM-3.2")])})
    assert [(m.kind, m.mode, m.source) for m in step_marks(labelled)[0]] == [("blamed", "FM-1.1", "label")]
    assert 2 not in step_marks(labelled), "an agent-level fault names no step"


def test_report_shows_run_and_escapes_content(tmp_path):
    traj = handmade_run(tmp_path / "store")
    html = render_report(traj)
    assert XSS not in html and "<script>document" not in html and "<img src=x" not in html
    assert "&lt;script&gt;document.body.setAttribute(&#x27;data-pwned&#x27;" in html
    assert html.count("<script>") == 1, "only the report's own script"
    for text in (TASK.replace("?", ""), "failure", "126", "76", "FM-3.3", "FM-2.4", BLAME["evidence"], "calculate", "Planner", "Checker"):
        assert text in html
    assert 'id="step-3" data-agent="Checker" data-flagged="1"' in html
    assert "http://" not in html and "https://" not in html, "nothing to fetch, no links without an endpoint"
    evil = Trajectory(trace_id="cd" * 16, task="t", steps=[Step(index=0, agent='x" onmouseover="alert(1)', output="o")])
    assert 'data-agent="x&quot; onmouseover=&quot;alert(1)"' in render_report(evil)


def test_only_the_latest_verdict_of_each_model_marks_a_step():
    """A retrained model's new ``aegis.attribution`` verdict is appended beside its earlier one
    (the store is append-only): the earlier one is listed as such, not marked blamed (two steps
    showed as blamed by one model)."""
    def verdict(model: str, time_ns: int, mode: str) -> dict:
        return {"name": sc.EVENT_ATTRIBUTION, "time_ns": time_ns, "attributes": {"model": model, "mode": mode}}

    traj = Trajectory(trace_id="ab" * 16, task="t", steps=[
        Step(index=0, agent="a", output="x", events=[verdict("dcl", 1, "FM-1.1")]),
        Step(index=1, agent="b", output="y", events=[verdict("other", 1, "FM-2.2")]),
        Step(index=2, agent="a", output="z", events=[verdict("dcl", 2, "FM-3.3")]),
    ])
    assert {i: [(m.kind, m.mode) for m in ms] for i, ms in step_marks(traj).items()} == {
        1: [("blamed", "FM-2.2")], 2: [("blamed", "FM-3.3")]}
    html = render_report(traj)
    first = html[html.index('id="step-0"'):html.index('id="step-1"')]
    assert "data-flagged" not in first and "an earlier verdict of its model" in first and "FM-1.1" in first


def test_trace_links(monkeypatch):
    tid = "0123456789abcdef" * 2
    assert trace_links(tid) == {}
    monkeypatch.setenv(ENV_JAEGER_URL, "http://localhost:16686/")
    monkeypatch.setenv(ENV_PHOENIX_URL, "http://127.0.0.1:6006")
    assert trace_links(tid) == {"Jaeger": f"http://localhost:16686/trace/{tid}", "Phoenix": f"http://127.0.0.1:6006/redirects/traces/{tid}"}
    links = trace_links(tid, jaeger_url="https://jaeger.example/ui", phoenix_url="javascript:alert(1)")
    assert links == {"Jaeger": f"https://jaeger.example/ui/trace/{tid}"}, "flags override the environment; only http(s) links"
    html = render_report(Trajectory(trace_id=tid), jaeger_url="https://jaeger.example/ui")
    assert f'href="https://jaeger.example/ui/trace/{tid}"' in html


def test_cli_report_from_store_and_file(tmp_path, capsys):
    store_dir = tmp_path / "store"
    first = handmade_run(store_dir)
    out = tmp_path / "r.html"
    assert main(["report", first.trace_id[:10], "--dir", str(store_dir), "--out", str(out), "--jaeger-url", "http://jaeger:16686"]) == 0
    assert f"{first.trace_id} (4 steps) written to {out}" in capsys.readouterr().out
    html = out.read_text()
    assert f"http://jaeger:16686/trace/{first.trace_id}" in html and "FM-3.3" in html
    spans_file = store_dir / "spans.jsonl"
    assert main(["report", str(spans_file), "--out", str(tmp_path / "f.html")]) == 0
    assert (tmp_path / "f.html").read_text() == render_report(first)
    second = handmade_run(store_dir)
    assert main(["report", str(spans_file), "--out", str(tmp_path / "g.html")]) == 2
    assert "holds 2 traces" in capsys.readouterr().err
    assert main(["report", str(spans_file), "--trace", second.trace_id[:8], "--out", str(tmp_path / "g.html")]) == 0
    assert second.trace_id in (tmp_path / "g.html").read_text()
    assert main(["report", "ffffffff", "--dir", str(store_dir), "--out", str(tmp_path / "h.html")]) == 2
    assert "no trace matching" in capsys.readouterr().err


def test_render_500_steps(tmp_path):
    traj = big_trajectory(500)
    html = write_report(traj, tmp_path / "big.html").read_text()
    assert html.count('<details class="step') == 500
    assert html.count(" open>") == 2, "only the two flagged steps start open"


# -- tests: in the browser -------------------------------------------------------------------
@browser
def test_browser_shows_blamed_injected_and_filters(tmp_path):
    traj = handmade_run(tmp_path / "store")
    page = write_report(traj, tmp_path / "report.html", phoenix_url="http://127.0.0.1:6006")
    dom, seconds = chromium(page, tmp_path)
    print(f"chromium load + dump: {seconds:.2f}s")
    body = dom.find("body")[0]
    assert "data-pwned" not in body.attrs, "trace content ran as script"
    assert body.attrs["data-shown"] == "4" and dom.by_id("f-count").text() == "4 of 4 steps shown"
    assert len(visible_steps(dom)) == 4
    blamed = dom.by_id("step-3")
    assert {"step", "blamed"} <= blamed.classes and blamed.attrs["data-agent"] == "Checker" and "open" in blamed.attrs
    mark = next(n for n in blamed.iter() if "mark" in n.classes)
    assert "BLAMED" in mark.text() and "FM-3.3" in mark.text() and BLAME["evidence"] in mark.text()
    injected = dom.by_id("step-1")
    assert "injected" in injected.classes and "FM-2.4" in injected.text() and "hide the notebook count" in injected.text()
    assert XSS in dom.by_id("step-2").text(), "the payload is shown as text"
    assert [c.text() for c in dom.find("div", "tl-label")][:3] == ["Planner", "Solver", "Checker"]
    cells = dom.find("a", "tl-cell")
    assert [c.attrs["data-agent"] for c in cells] == ["Planner", "Solver", "Solver", "Checker"]
    assert "blamed" in cells[3].classes and "injected" in cells[1].classes and "tooled" in cells[1].classes
    (link,) = dom.find("a", "ext")
    assert link.attrs["href"] == f"http://127.0.0.1:6006/redirects/traces/{traj.trace_id}"
    assert dom.find("div", "verdict")[0].text() == "failure"

    solver, _ = chromium(page, tmp_path, query="?agent=Solver")
    assert [n.attrs["id"] for n in visible_steps(solver)] == ["step-1", "step-2"]
    assert solver.by_id("f-count").text() == "2 of 4 steps shown"
    assert all(("dim" in c.classes) == (c.attrs["data-agent"] != "Solver") for c in solver.find("a", "tl-cell"))
    flagged, _ = chromium(page, tmp_path, query="?flagged=1&q=approved")
    assert [n.attrs["id"] for n in visible_steps(flagged)] == ["step-3"]
    jumped, _ = chromium(page, tmp_path, query="?agent=Planner#step-2")
    assert "open" in jumped.by_id("step-2").attrs and "hidden" not in jumped.by_id("step-2").attrs

    chromium(page, tmp_path, screenshot=artifact("handmade.png"), size="1400,1500")


@browser
def test_browser_escapes_hostile_names(tmp_path):
    hostile = "Eve" + XSS
    traj = Trajectory(trace_id="ef" * 16, task=XSS, app=XSS, steps=[Step(index=0, agent=hostile, output=XSS, role=XSS)],
                      labels=Labels(faults=[Fault(agent=hostile, step=0, mode=XSS, reason=XSS)]))
    dom, _ = chromium(write_report(traj, tmp_path / "evil.html"), tmp_path, query="?agent=" + quote(hostile))
    assert "data-pwned" not in dom.find("body")[0].attrs
    assert len(dom.find("script")) == 1
    assert dom.by_id("f-count").text() == "1 of 1 steps shown", "the filter matches the name verbatim"
    assert dom.by_id("step-0").attrs["data-agent"] == hostile and "blamed" in dom.by_id("step-0").classes


@browser
def test_browser_shows_invisible_characters_as_escapes(tmp_path):
    """NUL (which an HTML parser drops), other C0/C1 controls, bidi overrides and noncharacters in
    trace content show as the terminal shows them (``\\x00``), in text and in the agent filter."""
    output = "total 1\x0026\x1b[2J \x85\u202eevil\ufdd0 tab\tend</script>"
    traj = Trajectory(trace_id="fe" * 16, task="t\x00ask", steps=[Step(index=0, agent="Ev\x00e", output=output),
                                                                     Step(index=1, agent="Bob", output="ok")])
    dom, _ = chromium(write_report(traj, tmp_path / "controls.html"), tmp_path, query="?agent=" + quote("Ev\\x00e"))
    shown = r"total 1\x0026\x1b[2J \x85\u202eevil\ufdd0 tab" + "\tend</script>"
    assert dom.find("pre", "out")[0].text() == shown
    assert dom.find("pre", "task")[0].text() == r"t\x00ask"
    assert dom.by_id("step-0").attrs["data-agent"] == r"Ev\x00e" and dom.by_id("f-count").text() == "1 of 2 steps shown"
    assert len(dom.find("script")) == 1


@browser
def test_browser_500_steps(tmp_path):
    page = write_report(big_trajectory(500), tmp_path / "big.html")
    dom, seconds = chromium(page, tmp_path)
    print(f"chromium: 500-step report ({page.stat().st_size / 1e6:.2f} MB) loaded and dumped in {seconds:.2f}s")
    assert dom.by_id("f-count").text() == "500 of 500 steps shown"
    assert len(dom.find("a", "tl-cell")) == 500 and len(visible_steps(dom)) == 500
    assert {"blamed"} <= dom.by_id("step-417").classes and {"blamed"} <= dom.by_id("step-241").classes
    assert sum("open" in n.attrs for n in dom.find("details", "step")) == 2, "only flagged steps start open"
    one, _ = chromium(page, tmp_path, query="?agent=agent_5")
    assert one.by_id("f-count").text() == "83 of 500 steps shown"
    chromium(page, tmp_path, screenshot=artifact("big-500.png"), size="1400,1200")


def _demo(framework: str):
    try:
        return importlib.import_module(demo_module(framework))
    except ImportError as exc:
        pytest.skip(f"{framework} demo not importable here: {exc}")


@browser
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_browser_demo_team(framework, tmp_path, model_server, monkeypatch):
    """Each framework's demo team runs for real; its report, with one step blamed, in Chromium."""
    import aegis_probe

    monkeypatch.chdir(tmp_path)  # metagpt writes logs/ and workspace/ into the cwd
    demo = _demo(framework)
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", "not-needed")
    store_dir = tmp_path / "store"
    probe = aegis_probe.instrument(app, judge=judge, store=store_dir)
    demo.run_app(app, demo.TASK)
    probe.flush()
    traj = probe.trajectory()
    probe.uninstrument()
    assert len(traj.steps) >= 2
    blamed = len(traj.steps) - 1
    blame(probe.store, traj, blamed)
    out = tmp_path / f"{framework}.html"
    assert main(["report", traj.trace_id, "--dir", str(store_dir), "--out", str(out)]) == 0
    dom, _ = chromium(out, tmp_path)
    assert dom.by_id("f-count").text() == f"{len(traj.steps)} of {len(traj.steps)} steps shown"
    assert [c.text() for c in dom.find("div", "tl-label")][:-1] == traj.agents
    assert set(traj.agents) <= set(demo.AGENTS)
    step = dom.by_id(f"step-{blamed}")
    assert "blamed" in step.classes and "FM-3.3" in step.text()
    assert dom.find("div", "verdict")[0].text() == {True: "success", False: "failure", None: "not judged"}[traj.outcome.success]
    assert any(c.attrs.get("class", "").count("tooled") for c in dom.find("a", "tl-cell")), "the demo calls its calculator tool"
    chromium(out, tmp_path, screenshot=artifact(f"demo-{framework}.png"), size="1400,1500")


def test_cli_report_on_a_full_disk_names_the_file_and_leaves_no_half_report(tmp_path):
    """A disk (here a file size limit) that fills up during the write: the error named no file
    ('[Errno 27] File too large') and a half-written report was left at --out."""
    import resource
    import signal
    import sys

    store_dir, out = tmp_path / "store", tmp_path / "r.html"
    first = handmade_run(store_dir)
    size = len(render_report(first).encode())

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))

    done = subprocess.run([sys.executable, "-m", "aegis_probe", "report", first.trace_id, "--dir", str(store_dir), "--out", str(out)],
                          capture_output=True, text=True, timeout=60, preexec_fn=limit)
    assert done.returncode == 2 and done.stderr.splitlines() == [f"error: [Errno 27] File too large: '{out}'"], done.stderr
    assert not out.exists(), "no half-written report"


def test_cli_report_that_fails_over_an_earlier_report_leaves_it_whole(tmp_path):
    """A report written again over a good one, the disk (a file size limit) filling up midway:
    the earlier report stays byte for byte (it was truncated and left half-written), no temporary
    file is left beside it, and a later write that succeeds replaces it, keeping its permissions."""
    import os
    import resource
    import signal
    import sys

    store_dir, out = tmp_path / "store", tmp_path / "reports" / "r.html"
    first = handmade_run(store_dir)
    command = [sys.executable, "-m", "aegis_probe", "report", first.trace_id, "--dir", str(store_dir), "--out", str(out)]
    assert subprocess.run(command, capture_output=True, text=True, timeout=60).returncode == 0
    os.chmod(out, 0o640)
    good = out.read_bytes()
    out.write_bytes(good.replace(b"</footer>", b"</footer><!-- the earlier report -->"))
    earlier = out.read_bytes()

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(good) // 2, len(good) // 2))

    done = subprocess.run(command, capture_output=True, text=True, timeout=60, preexec_fn=limit)
    assert done.returncode == 2 and done.stderr.splitlines() == [f"error: [Errno 27] File too large: '{out}'"], done.stderr
    assert out.read_bytes() == earlier, "the earlier report is whole"
    assert [p.name for p in out.parent.iterdir()] == ["r.html"], "no temporary file left"
    assert subprocess.run(command, capture_output=True, text=True, timeout=60).returncode == 0
    assert out.read_bytes() == good and oct(out.stat().st_mode & 0o777) == oct(0o640)


def test_cli_report_on_an_injection_campaign_folder_names_its_stores(tmp_path, capsys):
    campaign = tmp_path / "campaign"
    run = handmade_run(campaign / "traces")
    handmade_run(campaign / "baselines")
    (campaign / "runs.jsonl").write_text('{"task": "t1", "kept": true}\n')
    assert main(["report", str(campaign), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(campaign) in err
    assert f"give {campaign / 'traces'} (or {campaign / 'baselines'}) or a trace id" in err
    assert not (tmp_path / "r.html").exists()
    assert main(["report", str(campaign / "traces"), "--out", str(tmp_path / "r.html")]) == 0
    assert run.trace_id in (tmp_path / "r.html").read_text()
