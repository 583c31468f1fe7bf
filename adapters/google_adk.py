"""Google Agent Development Kit (google-adk 2.13) adapter: a root agent (or its ``Runner``/``App``) is the app.

Class-level patches, installed once:

- run entry: ``Runner.run_async`` (``Runner.run`` goes through it) of a registered root agent,
  outside any run: one run per call, ``invoke_workflow {root agent}``, its task the new message's
  text, its answer the last whole text an agent wrote. A ``Runner`` inside a run (``AgentTool``
  runs its agent on one) opens no run: that agent's turns are steps of the run, nested under the
  tool's ``execute_tool`` span;
- agent step: one turn of an ``LlmAgent``, ``BaseLlmFlow._run_one_step_async`` (one model call and
  the handling of its function calls), ``invoke_agent {agent.name}``; workflow agents
  (``SequentialAgent``, ``ParallelAgent``, ``LoopAgent``) take no turn of their own: their
  children's turns are the steps, each under its own name. A turn that transfers
  (``transfer_to_agent``) ends when the transfer's response passes, its
  ``aegis.step.next_speaker`` the agent transferred to, whose turns follow as steps of the run;
- LLM call: ``BaseLlm.generate_content_async``, ADK's own model abstraction, on every subclass
  that defines it (``LiteLlm``, ``Gemini``, ``AnthropicLlm``, a user's own, also one defined after
  ``instrument()``); a model delegating to another is one ``chat`` span, the outer call. A
  streamed call's (``RunConfig(streaming_mode=SSE)``) replayed or injected answer reaches the app
  as ADK's models stream one: partial text responses word by word, then the whole response;
- tool call: ``BaseTool.run_async`` of every tool class that defines it (``FunctionTool``,
  ``AgentTool``, ``transfer_to_agent``, ...) -> ``execute_tool {tool}``.

ADK's own OpenTelemetry spans (``google.adk.telemetry``: invocation, invoke_agent, call_llm,
execute_tool) are kept out of instrumented runs: its tracer's spans record nothing there (they
would repeat our run, steps, model and tool calls) and stand for the current span, so spans
below them keep our parents. Outside instrumented runs they work as configured. With
OpenInference's ADK instrumentor on, ADK's workflow and node spans go to OpenInference's tracer,
whose spans inside our runs (suppressed) would be the invalid span: they stand for the current
span too.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, AsyncGenerator


from aegis_probe.adapters.google_adk_models import (
    ADKCodec,
    StreamedADKCodec,
    content_messages,
    request_messages,
    response_message,
)
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher, call_arg, subclasses
from aegis_probe.capture.coexist import SILENT
from aegis_probe.capture.interception import acall_llm_chunks
from aegis_probe.capture.spans import (
    RunScope,
    StepScope,
    await_in_scope,
    current_run,
    current_step,
    in_llm_call,
    iterate_in_scope,
    log_hook_error,
    start_run,
    start_step,
    start_tool,
)

if TYPE_CHECKING:
    from aegis_probe.capture.probe import Probe

FRAMEWORK = "google-adk"


# -- ADK's own telemetry, kept out ------------------------------------------------------------
def _ours() -> RunScope | None:
    """The run in progress when it is an active ADK run of ours."""
    run = current_run()
    return run if run is not None and run.framework == FRAMEWORK and run.probe.active else None


# -- runs and steps ---------------------------------------------------------------------------
def _message_text(message: Any) -> str | None:
    if message is None:
        return None
    texts = [m.get("content") for m in content_messages(message) if m.get("role") == "user"]
    return "\n".join(t for t in texts if t) or None


def _final_text(event: Any) -> str | None:
    """An agent's whole text in ``event`` (None for the user's, partial, call and response events)."""
    content = getattr(event, "content", None)
    if content is None or getattr(event, "author", "user") == "user" or getattr(event, "partial", None):
        return None
    if getattr(content, "role", None) != "model":
        return None
    text = response_message(event).get("content")
    return text if isinstance(text, str) and text else None


class _Turn:
    """One step (an LlmAgent's turn) as its events pass: ended by a transfer's response, or the turn's end."""

    def __init__(self, run: RunScope, agent: Any) -> None:
        self.run, self.agent = run, agent
        self.step: StepScope | None = None
        self.output: dict[str, Any] | None = None
        self.next_speaker: str | None = None

    def open(self) -> StepScope | None:
        try:
            description = getattr(self.agent, "description", None) or None
            self.step = start_step(self.run.probe, self.agent.name, run=self.run, description=description)
        except Exception:
            log_hook_error("google-adk step start")
        return self.step

    def item(self, event: Any) -> None:
        content = getattr(event, "content", None)
        if getattr(content, "role", None) == "model" and not getattr(event, "partial", None):
            self.output = response_message(event)
        target = getattr(getattr(event, "actions", None), "transfer_to_agent", None)
        if target:
            self.next_speaker = str(target)
            self.close(None)

    def close(self, exc: BaseException | None) -> None:
        step, self.step = self.step, None
        if step is None:
            return
        try:
            if exc is not None:
                step.fail(exc)
                return
            if self.next_speaker:
                step.span.set_attribute(sc.STEP_NEXT_SPEAKER, self.next_speaker)
            output = self.output
            step.finish(None if output is None else [output])
        except Exception:
            log_hook_error("google-adk step end")


async def _turn_events(agen: Any, turn: _Turn) -> AsyncGenerator[Any, None]:
    """Re-yield a turn's events with its step current while each is produced (until a transfer ends
    it: the agent transferred to runs outside it, its own turns steps of the run)."""
    error: BaseException | None = None
    turn.open()
    try:
        while True:
            step = turn.step
            token = step.attach() if step is not None else None
            try:
                event = await agen.__anext__()
            except StopAsyncIteration:
                break
            finally:
                if step is not None:
                    step.detach(token)
            try:
                turn.item(event)
            except Exception:
                log_hook_error("google-adk step event")
            yield event
    except GeneratorExit:
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        try:
            await agen.aclose()
        finally:
            turn.close(error)


class GoogleADKAdapter(Adapter):
    """Traces Google ADK runs: one step per LlmAgent turn."""

    name = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.codec = ADKCodec()
        self.streamed_codec = StreamedADKCodec()

    # -- contract --------------------------------------------------------------------------
    def detect(self, app: Any) -> bool:
        return _root_agent(app) is not None

    def register(self, app: Any, probe: "Probe") -> AppInfo:
        root = _root_agent(app)
        for obj in {id(app): app, id(root): root}.values():
            self.registry.add(obj, probe)
        names: list[str] = []
        stack = [root]
        while stack:
            agent = stack.pop(0)
            if agent.name not in names:
                names.append(agent.name)
            stack.extend(getattr(agent, "sub_agents", None) or ())
        return AppInfo(name=root.name, lone_agent=False, agents=tuple(names))

    def _instrument(self, patcher: Patcher) -> None:
        from google.adk.flows.llm_flows.base_llm_flow import BaseLlmFlow
        from google.adk.runners import Runner
        from google.adk.telemetry import tracing

        patcher.wrap(Runner, "run_async", self._run_async)
        for cls in subclasses(BaseLlmFlow):
            if "_run_one_step_async" in vars(cls):
                patcher.wrap(cls, "_run_one_step_async", self._one_step)
            if "_call_llm_async" in vars(cls):
                patcher.wrap(cls, "_call_llm_async", self._step_request)
        patcher.wrap(tracing.tracer, "start_span", self._own_span)
        patcher.wrap(tracing.tracer, "start_as_current_span", self._own_current_span)
        self.sync_patches()

    def sync_patches(self, **options: Any) -> None:
        """Wrap ``generate_content_async`` of every ``BaseLlm`` class and ``run_async`` of every
        ``BaseTool`` class that defines its own (classes defined after ``instrument()`` too: synced
        when a run starts), and OpenInference's ``OITracer.start_span`` once it is loaded."""
        from google.adk.models.base_llm import BaseLlm
        from google.adk.tools.base_tool import BaseTool

        oi_tracer = getattr(sys.modules.get("openinference.instrumentation"), "OITracer", None)
        if isinstance(oi_tracer, type):
            self._patcher.wrap(oi_tracer, "start_span", self._oi_span)

        for cls in subclasses(BaseLlm):
            method = vars(cls).get("generate_content_async")
            if method is not None and not getattr(method, "__isabstractmethod__", False):
                self._patcher.wrap(cls, "generate_content_async", self._generate)
        for cls in subclasses(BaseTool):
            if "run_async" in vars(cls):
                self._patcher.wrap(cls, "run_async", self._tool)

    # -- runs ------------------------------------------------------------------------------
    def _run_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        try:
            if current_run() is not None:  # a Runner inside a run (AgentTool's): no run of its own
                return agen
            probe = self.run_probe(instance.agent) or self.run_probe(instance)
            if probe is None:
                return agen
            self.sync()
            return self._traced_run(agen, probe, instance.agent, kwargs)
        except Exception:
            log_hook_error("google-adk run start")
            return agen

    async def _traced_run(self, agen: Any, probe: "Probe", root: Any, kwargs: dict) -> AsyncGenerator[Any, None]:
        try:
            run = start_run(probe, root.name, framework=self.name, task=_message_text(kwargs.get("new_message")),
                            conversation_id=kwargs.get("session_id"))
        except Exception:
            log_hook_error("google-adk run start")
            async for event in agen:
                yield event
            return

        def answer(event: Any) -> None:
            text = _final_text(event)
            if text is not None:
                run.answer = text

        async for event in iterate_in_scope(agen, run, on_item=answer, on_done=run.finish):
            yield event

    # -- steps (LlmAgent turns) ------------------------------------------------------------
    def _one_step(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        agen = wrapped(*args, **kwargs)
        run = _ours()
        if run is None:
            return agen
        try:
            agent = call_arg(args, kwargs, "invocation_context", 0).agent
            return _turn_events(agen, _Turn(run, agent))
        except Exception:
            log_hook_error("google-adk step start")
            return agen

    def _step_request(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``_call_llm_async``: the turn's request, as assembled, is its step's input."""
        step = current_step()
        if step is not None and _ours() is not None:
            request = call_arg(args, kwargs, "llm_request", 1)
            try:
                step.content(sc.INPUT_MESSAGES, lambda: request_messages(request))
            except Exception:
                log_hook_error("google-adk step input")
        return wrapped(*args, **kwargs)

    # -- model and tool calls --------------------------------------------------------------
    async def _generate(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> AsyncGenerator[Any, None]:
        run = _ours()
        if run is None or in_llm_call():  # outside runs, or a model delegating to another
            async for response in wrapped(*args, **kwargs):
                yield response
            return

        async def call(*a: Any, **k: Any) -> Any:
            return wrapped(*a, **k)

        codec = self.streamed_codec if call_arg(args, kwargs, "stream", 1) else self.codec
        async for response in await acall_llm_chunks(run.probe, codec, call, instance, args, kwargs):
            yield response

    async def _tool(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = _ours()
        if run is None:
            return await wrapped(*args, **kwargs)
        try:
            context = kwargs.get("tool_context")
            scope = start_tool(run.probe, instance.name, call_id=getattr(context, "function_call_id", None),
                               arguments=kwargs.get("args"), description=instance.description or None,
                               tool_type="function")
        except Exception:
            log_hook_error("google-adk tool start")
            return await wrapped(*args, **kwargs)
        return await await_in_scope(scope, lambda: wrapped(*args, **kwargs), scope.finish, "google-adk tool")

    # -- ADK's own spans -------------------------------------------------------------------
    def _own_span(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return SILENT.start_span(*args, **kwargs) if _ours() is not None else wrapped(*args, **kwargs)

    def _own_current_span(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return SILENT.start_as_current_span(*args, **kwargs) if _ours() is not None else wrapped(*args, **kwargs)

    def _oi_span(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        """``OITracer.start_span``: OpenInference's ADK instrumentor routes ADK's workflow and node
        spans to it; inside our runs it yields to the suppression key with the invalid span, which,
        made current, would leave our steps below it parentless (traces of their own). There its
        span stands for the current span (or the given context's) instead, as ADK's own do."""
        span = wrapped(*args, **kwargs)
        if _ours() is not None and not span.get_span_context().is_valid:
            try:
                span.__wrapped__ = SILENT.start_span("", call_arg(args, kwargs, "context", 1))
            except Exception:
                log_hook_error("openinference span")
        return span


def _root_agent(app: Any) -> Any:
    """The root agent of ``app``: an ADK agent itself, a ``Runner``'s, or an ``App``'s; else None."""
    agents = sys.modules.get("google.adk.agents.base_agent")
    base = getattr(agents, "BaseAgent", None)
    if not isinstance(base, type):
        return None
    for candidate in (app, getattr(app, "root_agent", None), getattr(app, "agent", None)):
        if isinstance(candidate, base):
            return candidate
    return None
