"""One span contract for every framework and team type: the same checks on each demo team.

Each framework's demo module (aegis_probe.demos.<framework>) builds a 2-3 agent app with a tool
and a scripted model; so does each team type's (``demos.TEAMS``: AutoGen's Magentic-One,
SelectorGroupChat, nested teams). The app runs unmodified through the real framework and the real
openai client against the loopback model server.
"""

from __future__ import annotations

import importlib
import json

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import _MISSING, get_adapter
from aegis_probe.demos import FRAMEWORKS, TEAMS, demo_module

API_KEY = "sk-test-key-do-not-leak-1234567890"
#: Every demo: one per framework, then one per team type.
DEMOS = (*FRAMEWORKS, *TEAMS.values())


def _demo(framework: str):
    try:
        return importlib.import_module(demo_module(framework))
    except ImportError as exc:  # pragma: no cover - depends on installed extras
        pytest.skip(f"{framework} demo not importable: {exc}")


@pytest.fixture(params=DEMOS)
def demo(request, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # metagpt writes logs/ and workspace/ into the cwd
    return _demo(request.param)


def _run(demo, model_server, provider, tmp_path, **kwargs):
    app, probe, answer, _ = _run_counting(demo, model_server, provider, tmp_path, **kwargs)
    return app, probe, answer


def _run_counting(demo, model_server, provider, tmp_path, **kwargs):
    """One instrumented run of the demo app: (app, probe, answer, model requests the server got)."""
    server = model_server(demo.policy)
    app = demo.build_app(server.base_url, "aegis-scripted", API_KEY)
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store", **kwargs)
    answer = demo.run_app(app, demo.TASK)
    probe.flush()
    return app, probe, answer, len(server.requests)


def _by_id(spans):
    return {s.context.span_id: s for s in spans}


def test_span_tree(demo, model_server, provider, exporter, tmp_path):
    _, probe, answer, requests = _run_counting(demo, model_server, provider, tmp_path)
    assert demo.EXPECTED in (answer or "")
    spans = exporter.get_finished_spans()
    ours = [s for s in spans if s.instrumentation_scope.name == "aegis_probe"]
    assert len({s.context.trace_id for s in ours}) == 1, "one run must be one trace"
    roots = [s for s in ours if s.parent is None]
    assert len(roots) == 1
    root = roots[0]
    assert root.name.startswith((sc.OP_WORKFLOW + " ", sc.OP_AGENT + " "))
    assert root.attributes[sc.FRAMEWORK] == demo.FRAMEWORK

    steps = sorted((s for s in ours if s.attributes.get(sc.STEP_INDEX) is not None), key=lambda s: s.start_time)
    indices = [s.attributes[sc.STEP_INDEX] for s in steps]
    assert indices == list(range(len(steps))), "step indices are 0-based, contiguous, in start order"
    assert {s.attributes[sc.AGENT_NAME] for s in steps} <= set(demo.AGENTS)
    assert len({s.attributes[sc.AGENT_NAME] for s in steps}) >= 2
    for s in steps:
        assert s.name == f"invoke_agent {s.attributes[sc.AGENT_NAME]}"
        assert s.parent is not None and s.context.trace_id == root.context.trace_id

    by_id = _by_id(ours)
    step_ids = {s.context.span_id for s in steps}

    def step_of(span):
        """The nearest step above ``span``, if any."""
        parent = span.parent
        while parent is not None:
            if parent.span_id in step_ids:
                return by_id[parent.span_id]
            parent = by_id[parent.span_id].parent if parent.span_id in by_id else None
        return None

    def under_step(span) -> bool:
        return step_of(span) is not None

    chats = [s for s in ours if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert chats and all(s.name == "chat aegis-scripted" for s in chats)
    assert len(chats) == requests, "every model request is one chat span"
    # Every model call a step made is beneath that step; outside steps only a manager's speaker
    # selection, which names the manager (it adds no turn to the conversation).
    for chat in chats:
        step = step_of(chat)
        if step is None:
            assert chat.attributes.get(sc.LLM_PURPOSE) == sc.PURPOSE_SPEAKER_SELECTION, f"{chat.attributes} outside steps"
            assert chat.attributes.get(sc.AGENT_NAME) and chat.attributes[sc.AGENT_NAME] not in demo.AGENTS
        elif sc.AGENT_NAME in chat.attributes:
            assert chat.attributes[sc.AGENT_NAME] == step.attributes[sc.AGENT_NAME]
    if demo.TOOL:
        tools = [s for s in ours if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
        assert [s.attributes[sc.TOOL_NAME] for s in tools].count(demo.TOOL) >= 1
        assert all(under_step(s) for s in tools)
    # No duplicate agent-step spans from the framework's own instrumentation.
    assert not [s for s in spans if s.instrumentation_scope.name != "aegis_probe" and s.name.startswith("invoke_agent")]


def test_trajectory_round_trip(demo, model_server, provider, tmp_path):
    _, probe, answer = _run(demo, model_server, provider, tmp_path)
    traj = probe.trajectory()
    assert traj.framework == demo.FRAMEWORK
    assert [s.index for s in traj.steps] == list(range(len(traj.steps)))
    assert set(traj.agents) <= set(demo.AGENTS)
    assert traj.task == demo.TASK
    assert any(s.output for s in traj.steps)
    assert any(call.input_tokens for s in traj.steps for call in s.llm_calls)
    if demo.TOOL:
        assert any(t.name == demo.TOOL for s in traj.steps for t in s.tool_calls)
    assert aegis_probe.load_trajectories(tmp_path / "store")[-1].model_dump() == traj.model_dump()


def _steps(spans) -> list[tuple[int, str]]:
    return sorted((s.attributes[sc.STEP_INDEX], s.attributes[sc.AGENT_NAME])
                  for s in spans if s.attributes.get(sc.STEP_INDEX) is not None)


def test_content_capture_off_and_secrets(demo, model_server, provider, exporter, tmp_path):
    _run(demo, model_server, provider, tmp_path, capture_content=False)
    quiet = exporter.get_finished_spans()
    for s in quiet:
        assert sc.INPUT_MESSAGES not in s.attributes and sc.OUTPUT_MESSAGES not in s.attributes
        assert sc.TASK not in s.attributes and sc.TOOL_CALL_RESULT not in s.attributes
    exporter.clear()
    aegis_probe.uninstrument()
    _run(demo, model_server, provider, tmp_path)
    spans = exporter.get_finished_spans()
    assert any(sc.INPUT_MESSAGES in s.attributes for s in spans)
    assert _steps(quiet) == _steps(spans), "content capture changes no step"
    dump = json.dumps([dict(s.attributes) for s in spans], default=str)
    assert API_KEY not in dump


def test_uninstrument_restores(demo, model_server, provider, exporter, tmp_path):
    adapter = get_adapter(demo.FRAMEWORK)
    _run(demo, model_server, provider, tmp_path)  # a run: the classes patched when the app registers or runs too
    patched = adapter._patcher.patched()
    aegis_probe.uninstrument()
    assert patched, "the adapter patched nothing"
    for owner, name, saved in patched:
        if saved is _MISSING:
            assert name not in vars(owner), f"{owner.__qualname__}.{name} left behind"
        else:
            assert vars(owner).get(name) is saved, f"{owner.__qualname__}.{name} not restored"
    # Uninstrumented, the app runs untouched and makes no span.
    exporter.clear()
    server = model_server(demo.policy)
    assert demo.EXPECTED in (demo.run_app(demo.build_app(server.base_url, "aegis-scripted", API_KEY), demo.TASK) or "")
    assert not [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "aegis_probe"]
    # Instrument again after uninstrument: steps again.
    _, probe, answer = _run(demo, model_server, provider, tmp_path)
    assert demo.EXPECTED in (answer or "")
    assert _steps(exporter.get_finished_spans())


def test_hook_errors_never_reach_app(demo, model_server, provider, tmp_path, monkeypatch, caplog):
    import aegis_probe.capture.spans as spans

    def boom(*args, **kwargs):
        raise RuntimeError("hook failure")

    monkeypatch.setattr(spans, "encode_messages", boom)
    _, probe, answer = _run(demo, model_server, provider, tmp_path)
    assert demo.EXPECTED in (answer or "")
