"""docs/otel.md's zero-code command, followed as written: ``opentelemetry-instrument python my_app.py``
with the variables the doc sets, against a real OTLP/gRPC receiver on the doc's protocol that, like
Jaeger and Phoenix, takes traces only. The app (tests/zerocode_app.py) never imports aegis_probe.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest

from aegis_probe.demos import autogen as demo

ROOT = Path(__file__).resolve().parents[1]
APP = Path(__file__).with_name("zerocode_app.py")
TOOL = Path(sys.executable).parent / "opentelemetry-instrument"


def documented_command() -> tuple[dict[str, str], list[str]]:
    """The variables and the command of docs/otel.md's zero-code block (its first command line
    after ``pip install``)."""
    section = (ROOT / "docs" / "otel.md").read_text(encoding="utf-8").split("## Zero-code", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "docs/otel.md: no bash block in the zero-code section"
    lines = [line for line in block.group(1).splitlines() if not line.startswith("pip install")]
    words = shlex.split(" ".join(line.rstrip("\\") for line in lines), comments=True)
    env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=.*", w))
    return env, [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]


class TracesOnly:
    """An OTLP/gRPC receiver with the trace service only (Jaeger's and Phoenix's kind)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method's name
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.names += [span.name for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver() -> Iterator[tuple[TracesOnly, int]]:
    grpc = pytest.importorskip("grpc")
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    servicer = TracesOnly()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(grace=None)


def test_the_documented_zero_code_command_runs_and_prints_no_export_error(model_server, receiver, tmp_path):
    pytest.importorskip("autogen_agentchat")
    if not TOOL.exists() or shutil.which("opentelemetry-instrument", path=str(TOOL.parent)) is None:
        pytest.skip("opentelemetry-instrument is not installed (opentelemetry-distro)")
    spans, port = receiver
    env, command = documented_command()
    assert command == ["opentelemetry-instrument", "python", "my_app.py"], command
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://localhost:4317", env
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://localhost:{port}"  # the doc's receiver, on a free port
    server = model_server(demo.policy)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AEGIS_"))}
    out = subprocess.run([str(TOOL), sys.executable, str(APP), server.base_url], env={**clean, **env}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "126" in out.stdout.split("ANSWER:", 1)[1]
    assert "Failed to export" not in out.stdout + out.stderr, out.stderr[-3000:]
    assert spans.names.count("invoke_workflow RoundRobinGroupChat") == 1, spans.names
    assert sorted(n for n in spans.names if n.startswith("invoke_agent")) == [
        "invoke_agent calculator", "invoke_agent planner", "invoke_agent reviewer"]
