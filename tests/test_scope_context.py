"""The contexts the span scopes make current, and detaching them where the app finishes them."""

from __future__ import annotations

import contextvars
import logging
import threading

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from aegis_probe.capture.spans import (  # pylint: disable=protected-access
    _STEP_KEY, attached, await_in_scope, call_in_scope, current_run, current_step, in_llm_call, scoped_wrappers,
    start_llm, start_run, start_step, start_tool,
)
from aegis_probe.storage.store import TraceStore
from toyrun import make_probe

APP_KEY = otel_context.create_key("the app's own")


@pytest.fixture
def probe(tmp_path):
    provider = TracerProvider()
    yield make_probe(provider, TraceStore(tmp_path / "s"))
    provider.shutdown()


def test_each_scope_is_its_parent_plus_its_span(probe):
    """A scope's context holds what its parent held (the app's own values too), its span as the
    current one and the scope under its key; the parent context is left as it was."""
    token = otel_context.attach(otel_context.set_value(APP_KEY, "kept"))
    try:
        run = start_run(probe, "app", framework="toy", task="t")
        with attached(run):
            step = start_step(probe, "worker", run=run)
            with attached(step):
                before = dict(otel_context.get_current())
                llm, tool = start_llm(probe, "m", provider="p", agent="worker"), start_tool(probe, "search")
                assert dict(otel_context.get_current()) == before, "opening a scope changes no context"
                with attached(llm):
                    assert trace.get_current_span() is llm.span and in_llm_call()
                    assert current_step() is step and current_run() is run
                    assert otel_context.get_value(APP_KEY) == "kept"
                with attached(tool):
                    assert trace.get_current_span() is tool.span and not in_llm_call()
                    assert current_step() is step and otel_context.get_value(APP_KEY) == "kept"
                assert trace.get_current_span() is step.span and current_step() is step and not in_llm_call()
                for scope in (tool, llm):
                    scope.end()
            step.end()
            assert trace.get_current_span() is run.span and current_step() is None and current_run() is run
            # the same entries the API's set_span_in_context and set_value give
            assert step.ctx == otel_context.set_value(_STEP_KEY, step, trace.set_span_in_context(step.span, run.ctx))
            assert type(step.ctx) is otel_context.Context
        run.finish()
        assert otel_context.get_value(APP_KEY) == "kept" and trace.get_current_span() is trace.INVALID_SPAN
    finally:
        otel_context.detach(token)


@pytest.mark.parametrize("finish", ["closed in a copied context", "run to its end in a thread"])
def test_a_run_held_across_yields_and_finished_in_another_context(probe, caplog, finish):
    """An app's generator holds ``probe.run()`` across its yields and is finished in another context:
    the detach there is logged by OpenTelemetry, never raised into the app, and the run is stored."""
    def rounds():
        with probe.run("count"):
            yield 1
            yield 2

    gen = rounds()
    assert next(gen) == 1 and current_run() is not None
    rest: list[object] = []
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        if finish == "closed in a copied context":
            contextvars.copy_context().run(gen.close)
        else:
            worker = threading.Thread(target=lambda: rest.extend(gen))
            worker.start()
            worker.join()
            assert rest == [2], "the app's generator ran to its end"
    assert "Failed to detach context" in caplog.text
    run = current_run()  # still attached here, as OpenTelemetry leaves it
    assert run is not None and run._ended
    otel_context.attach(otel_context.Context())  # this test's context back to empty
    assert probe.store.flush()
    assert list(probe.store.traces()) == [run.trace_id]


def test_detaching_twice_is_logged_not_raised(probe, caplog):
    step = start_step(probe, "worker", run=None)
    token = step.attach()
    step.detach(token)
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        step.detach(token)  # a token already used
    assert "Failed to detach context" in caplog.text
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.parametrize("how", ["call_in_scope", "await_in_scope", "scoped_wrappers"])
async def test_a_run_that_raises_through_the_scope_helpers_is_judged_and_last(tmp_path, how):
    """A run wrapper built on the scope helpers (ag2's ``initiate_chat``, crewai's ``kickoff``)
    whose app raises ends the run as ``finish(exc)`` does: judged, remembered as the last run."""
    judged: list[object] = []
    provider = TracerProvider()
    probe = make_probe(provider, TraceStore(tmp_path / "s"), judge=lambda task, answer: judged.append(task) or False)
    error = RuntimeError("max turns exceeded")

    def app() -> None:
        raise error

    async def aapp() -> None:
        raise error

    run = start_run(probe, "app", framework="toy", task="go")
    with pytest.raises(RuntimeError) as info:
        if how == "call_in_scope":
            call_in_scope(run, app, lambda _: run.finish(), "run")
        elif how == "await_in_scope":
            await await_in_scope(run, aapp, lambda _: run.finish(), "run")
        else:
            wrapper = scoped_wrappers(lambda instance, args, kwargs: run, lambda scope: lambda _: scope.finish(), "run")[0]
            wrapper(app, None, (), {})
    assert info.value is error, "the app's exception propagates unchanged"
    assert probe.last_run is run and judged == ["go"]
    assert probe.store.flush()
    (root,) = [s for s in probe.store.trace(run.trace_id) if s.parent_span_id is None]
    assert root.attributes["aegis.outcome.success"] is False and root.status == "ERROR"
    provider.shutdown()
