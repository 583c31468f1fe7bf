"""Usage detail: cache-read/cache-write and reasoning token counts, read from the providers' own
usage types, carried on ``chat`` spans (real camel and LangGraph apps, the real openai client
against the loopback model server) and summed into the trajectory's steps."""

from __future__ import annotations

import pytest

import aegis_probe
from aegis_probe.capture import semconv as sc
from aegis_probe.capture.usage import anthropic_usage, langchain_usage, openai_usage, provider_usage
from aegis_probe.modelserver import Reply
from aegis_probe.trajectory import load_trajectories


def test_semconv_names_are_the_conventions():
    assert sc.USAGE_CACHE_READ_INPUT_TOKENS == "gen_ai.usage.cache_read.input_tokens"
    assert sc.USAGE_CACHE_CREATION_INPUT_TOKENS == "gen_ai.usage.cache_creation.input_tokens"
    assert sc.USAGE_REASONING_OUTPUT_TOKENS == "gen_ai.usage.reasoning.output_tokens"


def test_openai_usage_reads_the_detail_objects():
    from openai.types import CompletionUsage

    usage = CompletionUsage.model_validate({
        "prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
        "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 30}})
    assert openai_usage(usage) == {"input_tokens": 100, "output_tokens": 40, "cache_read_input_tokens": 64,
                                   "cache_creation_input_tokens": None, "reasoning_output_tokens": 30}
    plain = openai_usage(CompletionUsage(prompt_tokens=5, completion_tokens=2, total_tokens=7))
    assert plain["cache_read_input_tokens"] is None and plain["reasoning_output_tokens"] is None
    assert openai_usage(None)["input_tokens"] is None


def test_anthropic_input_counts_the_cache_reads_and_writes():
    from anthropic.types import Usage

    usage = Usage(input_tokens=10, output_tokens=7, cache_read_input_tokens=2000, cache_creation_input_tokens=300)
    assert anthropic_usage(usage) == {"input_tokens": 2310, "output_tokens": 7, "cache_read_input_tokens": 2000,
                                      "cache_creation_input_tokens": 300, "reasoning_output_tokens": None}
    assert provider_usage(usage)["input_tokens"] == 2310  # told apart from OpenAI's shape
    assert provider_usage({"prompt_tokens": 3, "completion_tokens": 1})["input_tokens"] == 3


def test_langchain_usage_metadata_details():
    from langchain_core.messages.ai import UsageMetadata

    meta = UsageMetadata(input_tokens=50, output_tokens=20, total_tokens=70,
                         input_token_details={"cache_read": 32, "cache_creation": 8},
                         output_token_details={"reasoning": 12})
    assert langchain_usage(meta) == {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 32,
                                     "cache_creation_input_tokens": 8, "reasoning_output_tokens": 12}


def _detailed(text: str) -> Reply:
    return Reply(content=text, cached_tokens=3, reasoning_tokens=1)


def test_camel_chat_span_and_trajectory_carry_the_detail(model_server, provider, exporter, tmp_path):
    pytest.importorskip("camel.agents")
    from test_camel import agent

    server = model_server(lambda body: _detailed("The answer is four, said plainly."))
    solo = agent(server, "Solver", "You solve sums.")
    probe = aegis_probe.instrument(solo, tracer_provider=provider, store=tmp_path / "store")
    solo.step("What is two plus two, please?")
    probe.flush()
    chats = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert len(chats) == 1
    attrs = chats[0].attributes
    assert attrs[sc.USAGE_CACHE_READ_INPUT_TOKENS] == 3 and attrs[sc.USAGE_REASONING_OUTPUT_TOKENS] == 1
    assert attrs[sc.USAGE_INPUT_TOKENS] > 3 and sc.USAGE_CACHE_CREATION_INPUT_TOKENS not in attrs
    (traj,) = load_trajectories(tmp_path / "store")
    usage = traj.steps[0].usage
    assert (usage.cache_read_input_tokens, usage.reasoning_output_tokens, usage.cache_creation_input_tokens) == (3, 1, None)
    assert traj.steps[0].llm_calls[0].cache_read_input_tokens == 3


def test_langgraph_reads_langchain_details(model_server, provider, exporter, tmp_path):
    pytest.importorskip("langgraph")
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = ChatOpenAI(model="aegis-scripted", base_url=model_server(lambda body: _detailed("done here now")).base_url,
                     api_key="sk-test", max_retries=0)

    def think(state: MessagesState) -> dict:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("thinker", think)
    graph.add_edge(START, "thinker")
    graph.add_edge("thinker", END)
    app = graph.compile()
    aegis_probe.instrument(app, tracer_provider=provider, store=False)
    app.invoke({"messages": [("user", "think about it for a while")]})
    (chat,) = [s for s in exporter.get_finished_spans() if s.attributes.get(sc.OPERATION) == sc.OP_CHAT]
    assert chat.attributes[sc.USAGE_CACHE_READ_INPUT_TOKENS] == 3
    assert chat.attributes[sc.USAGE_REASONING_OUTPUT_TOKENS] == 1
