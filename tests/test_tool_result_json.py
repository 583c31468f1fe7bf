"""A tool's structured result is recorded as JSON (``gen_ai.tool.call.result``), not a Python repr."""

from __future__ import annotations

import json
from typing import Any

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.modelserver import Reply

pytest.importorskip("camel")

RESULT = {"city": "Zürich", "temps": [3, 4.5], "ok": True, "note": None, "when": ("mon", "tue")}


def _policy(body: dict[str, Any]) -> Reply:
    if body["messages"][-1]["role"] == "tool":
        return Reply(content="Done.")
    return Reply(tool_calls=[("weather", {"city": "Zürich"})])


def weather(city: str) -> dict:
    """The weather of a city.

    Args:
        city (str): the city.
    """
    return RESULT


def unusual(city: str) -> dict:
    """A result JSON cannot hold as it is: a tuple key, and itself inside it.

    Args:
        city (str): the city.
    """
    loop: dict[Any, Any] = {("a", 1): "tuple key"}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize("tool, expected", [
    (weather, json.dumps(RESULT, ensure_ascii=False)),
    (unusual, '{"(\'a\', 1)": "tuple key", "self": "{...}"}'),
])
def test_a_camel_tools_dict_result_is_recorded_as_json(model_server, provider, exporter, tmp_path, tool, expected):
    from camel.agents import ChatAgent
    from camel.messages import BaseMessage
    from camel.models import ModelFactory
    from camel.models.stub_model import StubTokenCounter
    from camel.toolkits import FunctionTool
    from camel.types import ModelPlatformType

    tool.__name__ = "weather"
    server = model_server(_policy)
    backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI_COMPATIBLE_MODEL, model_type="m",
                                  url=server.base_url, api_key="sk-test", token_counter=StubTokenCounter())
    app = ChatAgent(BaseMessage.make_assistant_message("Forecaster", "You forecast."), model=backend,
                    tools=[FunctionTool(tool)])
    probe = aegis_probe.instrument(app, tracer_provider=provider, store=tmp_path / "store")
    try:
        response = app.step("Weather in Zürich?")
    finally:
        probe.uninstrument()
    assert response.msgs[0].content == "Done."
    (span,) = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_TOOL]
    assert span.attributes[sc.TOOL_CALL_RESULT] == expected
