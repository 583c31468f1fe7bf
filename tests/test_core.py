"""Core pieces without a framework: Patcher, redaction, configuration, adapter lookup, iterate_in_scope."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import types
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import aegis_probe
from aegis_probe.capture.adapter import Adapter, AppInfo, Patcher
from aegis_probe.config import ProbeConfig
from aegis_probe.redact import REDACTED, make_redactor, redact_secrets
from aegis_probe.capture.messages import SharedMessage, encode_messages
from aegis_probe.capture.spans import attached, current_step, iterate_in_scope, start_llm, start_step
from aegis_probe.storage.store import TraceStore
from toyrun import StepSpec, ToolSpec, make_probe, run_script

# -- Patcher -------------------------------------------------------------------------------


def make_classes():
    """A fresh class pair per test: an inherited method, a classmethod, a staticmethod."""

    class Base:
        def inherited(self, x):
            return ("inherited", type(self).__name__, x)

    class Child(Base):
        def method(self, x):
            return ("method", x)

        @classmethod
        def cm(cls, x):
            return ("cm", cls.__name__, x)

        @staticmethod
        def sm(x):
            return ("sm", x)

    class GrandChild(Child):
        pass

    module = types.ModuleType("toy_module")
    module.helper = lambda x: ("helper", x)
    return Base, Child, GrandChild, module


class PatchingAdapter(Adapter):
    name = "patching"
    instrumentation_dependencies = ()

    def __init__(self, child, module, fail_after: int | None = None):
        super().__init__()
        self.child, self.module, self.fail_after, self.calls = child, module, fail_after, []

    def detect(self, app):
        return False

    def register(self, app, probe):
        return AppInfo("x", False, ())

    def _count(self, wrapped, instance, args, kwargs):
        self.calls.append(wrapped.__name__)
        return wrapped(*args, **kwargs)

    def _instrument(self, patcher: Patcher) -> None:
        for i, name in enumerate(("method", "cm", "sm", "inherited")):
            if self.fail_after == i:
                raise RuntimeError("framework moved")
            patcher.wrap(self.child, name, self._count)
        patcher.wrap(self.module, "helper", self._count)


def exercise(Base, Child, GrandChild, module):
    c = Child()
    return [
        c.method(1), Child.cm(2), c.cm(3), GrandChild.cm(4), Child.sm(5), c.sm(6),
        c.inherited(7), GrandChild().inherited(8), Base().inherited(9), module.helper(10),
    ]


EXPECTED = [
    ("method", 1), ("cm", "Child", 2), ("cm", "Child", 3), ("cm", "GrandChild", 4), ("sm", 5), ("sm", 6),
    ("inherited", "Child", 7), ("inherited", "GrandChild", 8), ("inherited", "Base", 9), ("helper", 10),
]


def test_patcher_wraps_and_restores_every_descriptor_exactly():
    Base, Child, GrandChild, module = make_classes()
    before = dict(vars(Child))
    before_module, before_base = module.helper, dict(vars(Base))
    adapter = PatchingAdapter(Child, module)
    adapter.install()
    assert exercise(Base, Child, GrandChild, module) == EXPECTED
    # Base().inherited is not Child's: it must not go through the wrapper.
    assert adapter.calls == ["method", "cm", "cm", "cm", "sm", "sm", "inherited", "inherited", "<lambda>"]
    assert "inherited" in vars(Child)

    adapter.install()  # idempotent: no second layer of wrappers
    adapter.calls.clear()
    assert exercise(Base, Child, GrandChild, module) == EXPECTED
    assert len(adapter.calls) == 9 and len(adapter._patcher) == 5

    adapter.uninstall()
    assert not adapter.installed
    for name in ("method", "cm", "sm"):
        assert vars(Child)[name] is before[name], name
    assert isinstance(vars(Child)["cm"], classmethod) and isinstance(vars(Child)["sm"], staticmethod)
    assert "inherited" not in vars(Child), "an inherited attribute must be deleted again, not shadowed"
    assert dict(vars(Child)) == before and dict(vars(Base)) == before_base
    assert module.helper is before_module
    adapter.calls.clear()
    assert exercise(Base, Child, GrandChild, module) == EXPECTED and adapter.calls == []

    adapter.install()  # instrument again after uninstrument
    assert exercise(Base, Child, GrandChild, module) == EXPECTED and len(adapter.calls) == 9
    adapter.uninstall()
    assert dict(vars(Child)) == before


def test_failed_install_leaves_nothing_patched():
    Base, Child, GrandChild, module = make_classes()
    before = dict(vars(Child))
    adapter = PatchingAdapter(Child, module, fail_after=2)
    with pytest.raises(RuntimeError, match="framework moved"):
        adapter.install()
    assert dict(vars(Child)) == before and not adapter.installed


def test_patcher_rejects_missing_attribute():
    _, Child, _, _ = make_classes()
    patcher = Patcher()
    with pytest.raises(AttributeError, match="no_such"):
        patcher.wrap(Child, "no_such", lambda w, i, a, k: w(*a, **k))
    assert len(patcher) == 0 and "no_such" not in vars(Child)


# -- Redaction -----------------------------------------------------------------------------

SECRETS = [
    ("my key is sk-proj-abcdefghijklmnop1234 ok", "sk-proj-abcdefghijklmnop1234"),
    ("sk-ant-api03-AAAABBBBCCCCDDDD_eeee", "AAAABBBBCCCCDDDD"),
    ("Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9.abc", "eyJhbGciOi"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA=='", "dXNlcjpwYXNzd29yZA"),
    ("api_key=hunter2hunter2 and more", "hunter2hunter2"),
    ("OPENAI_API_KEY=xyz123456789", "xyz123456789"),
    ('{"api_key": "abcdef123456", "x": 1}', "abcdef123456"),
    ("x-api-key: ABCDEFGH12345", "ABCDEFGH12345"),
    ("password: s3cr3tpass", "s3cr3tpass"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnop"),
    ("aws AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
]


@pytest.mark.parametrize("text,secret", SECRETS)
def test_secrets_are_redacted(text, secret):
    out = redact_secrets(text)
    assert secret not in out and REDACTED in out


@pytest.mark.parametrize("text", ["sk-short", "the api_key parameter is documented", "secret=abc", "bearer of news", "hello"])
def test_ordinary_text_is_left_alone(text):
    assert redact_secrets(text) == text


@pytest.mark.parametrize("text,secret", [(f"Grüße, {t}", s) for t, s in SECRETS[:6]] + [("API_KEY=ümlaut12345", "ümlaut12345")])
def test_non_ascii_text_is_redacted_too(text, secret):
    """Non-ASCII text takes the case-insensitive prefilter, ASCII text the lower-cased one."""
    assert secret not in redact_secrets(text) and REDACTED in redact_secrets(text)


MESSAGES = [
    {"role": "user", "content": 'say "hi" \\ é 中文 \u2028 \x00', "name": "bob"},
    {"role": "assistant", "content": "", "finish_reason": "stop"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
    {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
    {"content": "api_key=hunter2hunter2"},
    {"role": "user", "content": 7, "name": 3},
]


@pytest.mark.parametrize("message", MESSAGES)
def test_message_json_is_the_documented_encoding(message):
    """The directly built JSON of a plain message equals json.dumps of its GenAI form."""
    from aegis_probe.capture.messages import _encode_message, _fragment

    assert _fragment(message, redact_secrets) == json.dumps(_encode_message(message, redact_secrets), ensure_ascii=False)
    assert "hunter2" not in _fragment(message, redact_secrets)


def test_shared_messages_encode_once_per_redactor():
    """A SharedMessage keeps its JSON, but a probe with another redactor encodes it afresh."""
    shared = [SharedMessage(m) for m in MESSAGES if not m.get("tool_calls")]
    plain = encode_messages([dict(m) for m in shared], redact_secrets)
    assert encode_messages(shared, redact_secrets) == plain == encode_messages(shared, redact_secrets)
    other = make_redactor(lambda text: text.replace("hi", "<greeting>"))
    assert encode_messages(shared, other) == encode_messages([dict(m) for m in shared], other) != plain


def test_user_redaction_runs_after_the_builtin_one():
    seen = []

    def mine(text: str) -> str:
        seen.append(text)
        return text.replace("Alice", "<name>")

    redact = make_redactor(mine)
    assert redact("Alice uses sk-abcdefghijklmnopqrstuv") == f"<name> uses {REDACTED}"
    assert seen == [f"Alice uses {REDACTED}"], "the callback never sees the raw secret"
    assert make_redactor(None) is redact_secrets


@pytest.mark.parametrize("capture", [True, False])
def test_spans_carry_redacted_content_or_none(tmp_path, capture):
    store = TraceStore(tmp_path / "s")
    provider = TracerProvider()
    probe = make_probe(provider, store, capture_content=capture, redact=lambda t: t.replace("Alice", "<name>"))
    key = "sk-abcdefghijklmnopqrstuvwx"
    steps = [StepSpec("planner", f"Alice's key is {key}", f"use Bearer {key}", usage=[(3, 4)],
                      tools=[ToolSpec("login", {"api_key": "hunter2hunter2", "user": "Alice"}, f"ok {key}")])]
    run_script(probe, f"task for Alice with {key}", steps, answer=f"Alice: {key}", outcome=True)
    provider.shutdown()
    raw = store.file.read_text()
    assert key not in raw and "hunter2hunter2" not in raw and "Alice" not in raw
    [traj] = aegis_probe.load_trajectories(store.path)
    step = traj.steps[0]
    assert step.usage.input_tokens == 3 and step.tool_calls[0].name == "login", "structure kept either way"
    if capture:
        assert traj.task == f"task for <name> with {REDACTED}"
        assert step.input_messages[0].content == f"<name>'s key is {REDACTED}"
        assert step.output == f"use Bearer {REDACTED}"
        assert '"user": "<name>"' in step.tool_calls[0].arguments and REDACTED in step.tool_calls[0].arguments
        assert step.tool_calls[0].result == f"ok {REDACTED}"
        assert traj.outcome.answer == f"<name>: {REDACTED}"
    else:
        assert traj.task is None and step.input_messages == [] and step.output == ""
        assert step.tool_calls[0].arguments is None and step.tool_calls[0].result is None
        assert step.llm_calls[0].output is None
        assert traj.outcome.success is True and traj.outcome.answer is None, "answers are content"


@pytest.mark.parametrize("sampled", [True, False])
def test_content_is_built_only_for_spans_that_record(sampled):
    """A span the sampler drops costs no content work: lazy prompts are never built, nothing is
    redacted; a recorded span gets its content once, before the conversation id, as always."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=None if sampled else ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    redacted: list[str] = []
    probe = make_probe(provider, redact=lambda t: redacted.append(t) or t)
    built: list[int] = []

    def prompt() -> list[dict[str, str]]:
        built.append(1)
        return [{"role": "user", "content": "lazy question"}]

    steps = [StepSpec("planner", "question", "answer", usage=[(3, 4)], tools=[ToolSpec("calc", {"x": 1}, "2", error=True)])]
    run = run_script(probe, "a task", steps)
    with attached(run):
        step = start_step(probe, "coder", run=run, input_messages=prompt)
        with attached(step):
            llm = start_llm(probe, "m", provider="toy", input_messages=prompt)
            llm.finish(prompt)
        step.fail(ValueError("app error"))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    if not sampled:
        assert spans == {} and built == [] and redacted == []
        return
    assert len(built) == 3 and "lazy question" in redacted and "question" in redacted and "a task" in redacted
    assert json.loads(spans["invoke_agent coder"].attributes["gen_ai.input.messages"])[0]["parts"][0]["content"] == "lazy question"
    chat = list(spans["chat m"].attributes)
    assert chat.index("gen_ai.input.messages") + 1 == chat.index("gen_ai.conversation.id")
    tool = list(spans["execute_tool calc"].attributes)
    assert tool.index("gen_ai.tool.call.arguments") + 1 == tool.index("gen_ai.conversation.id")
    assert list(spans["invoke_workflow toy-team"].attributes)[:4] == ["gen_ai.operation.name", "aegis.framework",
                                                                        "gen_ai.workflow.name", "aegis.task"]


# -- Configuration ---------------------------------------------------------------------------

OTEL_VARS = [
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "AEGIS_TRACE_DIR", "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME", "AEGIS_CAPTURE_CONTENT", "OTEL_SEMCONV_STABILITY_OPT_IN",
]


@pytest.fixture
def env(monkeypatch):
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_config_defaults(env):
    cfg = ProbeConfig.resolve()
    assert cfg.capture_content is True and cfg.trace_dir == Path("aegis-traces")
    assert cfg.otlp_endpoint is None and cfg.otlp_protocol == "http/protobuf" and cfg.service_name == "aegis-probe"


def test_trace_dir_and_service_name(env, tmp_path):
    env.setenv("AEGIS_TRACE_DIR", str(tmp_path / "env"))
    env.setenv("OTEL_SERVICE_NAME", "my-app")
    assert ProbeConfig.resolve().trace_dir == tmp_path / "env"
    assert ProbeConfig.resolve(trace_dir=tmp_path / "arg").trace_dir == tmp_path / "arg"
    assert ProbeConfig.resolve().service_name == "my-app"
    assert ProbeConfig.resolve(service_name="other").service_name == "other"


# -- Adapter lookup --------------------------------------------------------------------------


class NotAnApp:
    pass


def test_unsupported_app_raises_type_error_naming_supported_types(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the second call must not trip over a framework left half-imported
        with pytest.raises(TypeError) as info:
            aegis_probe.instrument(NotAnApp())
        msg = str(info.value)
        assert f"{__name__}.NotAnApp" in msg
        assert "AutoGen BaseGroupChat" in msg and "BaseChatAgent" in msg
        assert "CAMEL RolePlaying" in msg and "MetaGPT Team and Role" in msg
    assert list(tmp_path.iterdir()) == [], "the error path imports no framework (metagpt writes logs/ when imported)"


# -- iterate_in_scope ----------------------------------------------------------------------


@pytest.fixture
def probe(tmp_path):
    provider = TracerProvider()
    yield make_probe(provider, TraceStore(tmp_path / "s"))
    provider.shutdown()


async def numbers(n: int, seen: list, fail_at: int | None = None, error: BaseException | None = None):
    try:
        for i in range(n):
            if i == fail_at:
                raise error
            step = current_step()
            seen.append((i, step.agent if step else None))
            yield i
    finally:
        step = current_step()
        seen.append(("closed", step.agent if step else None))


async def test_early_break_detaches_cleanly(probe, caplog):
    seen, done, consumer = [], [], []
    step = start_step(probe, "worker", run=None)
    with caplog.at_level(logging.DEBUG):
        agen = iterate_in_scope(numbers(10, seen), step, on_done=done.append)
        async for item in agen:
            consumer.append(current_step())
            if item == 2:
                break
        await agen.aclose()
        # Abandoned without aclose: the event loop's finalizer closes it later.
        agen2 = iterate_in_scope(numbers(10, seen), step, on_done=done.append)
        async for _ in agen2:
            break
        del agen2
        gc.collect()
        await asyncio.sleep(0.05)
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]
    assert [s for s in seen if s[0] != "closed"][:3] == [(0, "worker"), (1, "worker"), (2, "worker")]
    assert seen.count(("closed", "worker")) == 2, "the inner generator is closed inside the scope"
    assert consumer == [None, None, None], "the scope is never left attached across a yield"
    assert done == [None, None]
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_app_exception_propagates_unchanged(probe, caplog):
    seen, done = [], []
    error = KeyError("the app's own")
    step = start_step(probe, "worker", run=None)
    got = []
    with pytest.raises(KeyError) as info:
        async for item in iterate_in_scope(numbers(5, seen, fail_at=2, error=error), step, on_done=done.append):
            got.append(item)
    assert info.value is error and got == [0, 1] and done == [error]
    assert not [r for r in caplog.records if "Failed to detach context" in r.getMessage()]


async def test_hook_errors_are_logged_and_swallowed(probe, caplog):
    seen = []
    step = start_step(probe, "worker", run=None)

    def bad(_):
        raise RuntimeError("bug in our hook")

    with caplog.at_level(logging.WARNING, logger="aegis_probe"):
        items = [i async for i in iterate_in_scope(numbers(3, seen), step, on_item=bad, on_done=bad)]
    assert items == [0, 1, 2]
    hooks = [r.getMessage() for r in caplog.records if r.name == "aegis_probe"]
    assert hooks.count("aegis-probe: error in stream item hook, ignored") == 3
    assert hooks.count("aegis-probe: error in stream end hook, ignored") == 1
