"""The eleven benchmark apps, each with a zero-latency model in process (no I/O), so every
microsecond measured is framework or tracing work.

An :class:`App` builds a fresh app for ``steps`` agent steps (``build``) and plays it once
(``play(app, probe, steps)``; ``probe`` is None uninstrumented, else the run is one trace):

- AutoGen: a ``RoundRobinGroupChat`` of two ``AssistantAgent``s whose ``ChatCompletionClient``
  answers at once with a numbered reply and usage;
- CAMEL: a ``RolePlaying`` society (two ``ChatAgent`` steps per round) on a ``StubModel``
  subclass; aegis runs wrap the rounds in ``probe.run(task)``;
- MetaGPT: a ``Team`` of two roles that answer each other (both act every round), on a
  ``BaseLLM`` subclass; each prompt holds the conversation so far, as metagpt's own actions do.
  metagpt's log sinks are replaced by one WARNING console sink;
- LangGraph: a ``StateGraph`` of two model nodes taking turns on a ``BaseChatModel`` subclass;
- CrewAI (run in .venv-crewai): a sequential crew of two agents taking turns, one task per step,
  on a ``BaseLLM`` subclass (a user's own model class);
- OpenAI Agents SDK (run in .venv-openai-agents): two agents handing the conversation to each
  other, one turn per step (``Runner.run_sync``; the SDK's own tracing off), on a ``Model``
  subclass that answers with a message and the hand-over call;
- AG2 (run in .venv-ag2): a round-robin ``GroupChat`` of two ``AssistantAgent``s, one message
  per step, on a model client of the user's own (``register_model_client``); ag2's console
  output is dropped;
- Pydantic AI: two ``Agent``s taking turns (each ``run`` given the conversation so far as its
  message history: Pydantic AI's programmatic hand-off), on a ``Model`` subclass; aegis runs wrap
  the turns in ``probe.run(task)``;
- Agent Framework: a ``GroupChatBuilder`` workflow of two ``Agent``s chosen in turn by a
  ``selection_func``, on a ``BaseChatClient`` subclass with the framework clients' layers;
- smolagents: two ``ToolCallingAgent``s taking turns, each keeping its memory (``reset=False``),
  on a ``Model`` subclass answering with its ``final_answer`` call; aegis runs wrap the turns in
  ``probe.run(task)``;
- Google ADK (run in .venv-google-adk): two ``LlmAgent``s (``bob`` a sub-agent of ``alice``)
  transferring to each other (``transfer_to_agent``) until the last turn, which answers, on a
  ``BaseLlm`` subclass, on an ``InMemoryRunner``.

Every prompt of every app repeats the conversation so far, as these frameworks do by default.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import tempfile
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable

os.environ.setdefault("AUTOGEN_DISABLE_RUNTIME_TRACING", "true")

TASK = "Count together."

#: Called once per model call by every app's in-process model, empty
#: but for ``overhead.py``'s in-app floor, which makes the floor's spans there.
MODEL_CALL_HOOKS: list[Callable[[], None]] = []


def _reply(n: int) -> str:
    return f"reply number {n}, all good"


@dataclass
class App:
    name: str
    title: str
    build: Callable[[int], Any]
    play: Callable[[Any, Any, int], None]


# -- AutoGen -------------------------------------------------------------------------------------
def autogen_app() -> App:
    from typing import AsyncGenerator, Sequence

    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core.models import (
        ChatCompletionClient,
        CreateResult,
        LLMMessage,
        ModelCapabilities,
        ModelFamily,
        ModelInfo,
        RequestUsage,
    )

    class InstantClient(ChatCompletionClient):
        """A model client that answers at once with a canned ``CreateResult`` (no I/O)."""

        def __init__(self) -> None:
            self._calls = 0

        async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
            self._calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            return CreateResult(finish_reason="stop", content=_reply(self._calls),
                                usage=RequestUsage(prompt_tokens=10 * len(messages), completion_tokens=5), cached=False)

        async def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> AsyncGenerator[Any, None]:
            yield await self.create(messages, **kwargs)

        async def close(self) -> None:
            return None

        def actual_usage(self) -> RequestUsage:
            return RequestUsage(prompt_tokens=0, completion_tokens=0)

        total_usage = actual_usage

        def count_tokens(self, messages: Sequence[LLMMessage], **kwargs: Any) -> int:
            return 0

        def remaining_tokens(self, messages: Sequence[LLMMessage], **kwargs: Any) -> int:
            return 1 << 20

        @property
        def capabilities(self) -> ModelCapabilities:  # type: ignore[override]
            return ModelCapabilities(vision=False, function_calling=True, json_output=False)

        @property
        def model_info(self) -> ModelInfo:
            return ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                             structured_output=False)

    def build(steps: int) -> Any:
        client = InstantClient()
        agents = [AssistantAgent(n, model_client=client, system_message=f"You are {n}.") for n in ("alice", "bob")]
        return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(steps + 1))

    def play(team: Any, probe: Any, steps: int) -> None:
        result = asyncio.run(team.run(task=TASK))
        assert len(result.messages) == steps + 1, len(result.messages)

    return App("autogen", "RoundRobinGroupChat, 2 AssistantAgents", build, play)


# -- CAMEL ---------------------------------------------------------------------------------------
def camel_app() -> App:
    from camel.models.stub_model import StubModel
    from camel.societies import RolePlaying
    from camel.types import ChatCompletion, ModelType

    class InstantBackend(StubModel):
        """Answers at once with a numbered completion and usage (no I/O)."""

        def __init__(self) -> None:
            super().__init__(ModelType.STUB)
            self.calls = 0

        def _run(self, messages: list, response_format: Any = None, tools: Any = None) -> ChatCompletion:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            return ChatCompletion.model_validate({
                "id": f"instant-{self.calls}", "object": "chat.completion", "created": int(time.time()),
                "model": "instant",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": _reply(self.calls)}}],
                "usage": {"prompt_tokens": 10 * len(messages), "completion_tokens": 5,
                          "total_tokens": 10 * len(messages) + 5},
            })

        async def _arun(self, messages: list, response_format: Any = None, tools: Any = None) -> ChatCompletion:
            return self._run(messages, response_format, tools)

    logging.getLogger("camel").setLevel(logging.ERROR)  # "model provided globally", once per society
    # A long run fills the context window and camel writes summaries under $CAMEL_WORKDIR (else ./).
    workdir = tempfile.mkdtemp(prefix="aegis-bench-camel-")
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    os.environ.setdefault("CAMEL_WORKDIR", workdir)

    def build(steps: int) -> Any:
        return RolePlaying(assistant_role_name="alice", user_role_name="bob", task_prompt=TASK,
                           with_task_specify=False, model=InstantBackend())

    def play(society: Any, probe: Any, steps: int) -> None:
        with probe.run(TASK) if probe is not None else nullcontext():
            message = society.init_chat()
            for _ in range(steps // 2):
                assistant, user = society.step(message)
                assert not assistant.terminated and not user.terminated
                message = assistant.msg

    return App("camel", "RolePlaying, 2 ChatAgent steps per round", build, play)


# -- MetaGPT -------------------------------------------------------------------------------------
def metagpt_app() -> App:
    import aegis_probe.demos.metagpt  # noqa: F401  (lets metagpt import without a user config)
    from metagpt.actions import Action, UserRequirement
    from metagpt.configs.llm_config import LLMConfig
    from metagpt.logs import logger
    from metagpt.provider.base_llm import BaseLLM
    from metagpt.roles import Role
    from metagpt.schema import Message
    from metagpt.team import Team

    logger.remove()
    logger.add(sys.stderr, level="WARNING")

    class InstantLLM(BaseLLM):
        """Answers at once and reports usage, as providers do (no I/O)."""

        def __init__(self) -> None:
            self.config = LLMConfig(api_type="openai", model="instant", api_key="sk-none", calc_usage=False)
            self.model, self.pricing_plan, self.cost_manager, self.calls = "instant", None, None, 0

        async def _achat_completion(self, messages: list[dict], timeout: int = 0) -> dict:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": 5}
            self._update_costs(usage)
            return {"choices": [{"message": {"role": "assistant", "content": _reply(self.calls)}}], "usage": usage}

        acompletion = _achat_completion

        async def _achat_completion_stream(self, messages: list[dict], timeout: int = 0) -> str:
            return self.get_choice_text(await self._achat_completion(messages))

    class Ping(Action):
        name: str = "Ping"

        async def run(self, history: list[Message]) -> str:
            return await self._aask("Conversation:\n" + "\n".join(f"{m.role}: {m.content}" for m in history))

    class Pong(Ping):
        name: str = "Pong"

    class Player(Role):
        def __init__(self, action: type[Action], watch: list[type[Action]], **data: Any) -> None:
            super().__init__(**data)
            self.set_actions([action])
            self._watch(watch)

    def build(steps: int) -> Any:
        llm = InstantLLM()
        team = Team()
        team.hire([Player(Ping, [UserRequirement, Pong], name="alice", profile="alice", llm=llm),
                   Player(Pong, [Ping], name="bob", profile="bob", llm=llm)])
        return team

    def play(team: Any, probe: Any, steps: int) -> None:
        asyncio.run(team.run(n_round=steps // 2, idea=TASK))
        llm = team.env.roles["alice"].llm
        assert llm.calls == steps, llm.calls

    return App("metagpt", "Team of 2 roles, both act every round", build, play)


# -- LangGraph -----------------------------------------------------------------------------------
def langgraph_app() -> App:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.graph import END, START, MessagesState, StateGraph

    class InstantChatModel(BaseChatModel):
        """Answers at once with a numbered reply and usage (no I/O)."""

        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "instant"

        def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            usage = {"input_tokens": 10 * len(messages), "output_tokens": 5, "total_tokens": 10 * len(messages) + 5}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(_reply(self.calls), usage_metadata=usage))])

    models: dict[int, InstantChatModel] = {}  # id(graph) -> its model, to count the calls

    def build(steps: int) -> Any:
        llm = InstantChatModel()

        def speaker(name: str) -> Any:
            def node(state: Any) -> dict[str, Any]:
                return {"messages": [llm.invoke(state["messages"])]}

            return node

        def next_node(after: str) -> Any:
            return lambda state: END if len(state["messages"]) > steps else after

        graph = StateGraph(MessagesState)
        graph.add_node("alice", speaker("alice"))
        graph.add_node("bob", speaker("bob"))
        graph.add_edge(START, "alice")
        graph.add_conditional_edges("alice", next_node("bob"), ["bob", END])
        graph.add_conditional_edges("bob", next_node("alice"), ["alice", END])
        compiled = graph.compile()
        models[id(compiled)] = llm
        return compiled

    def play(graph: Any, probe: Any, steps: int) -> None:
        graph.invoke({"messages": [("user", TASK)]}, {"recursion_limit": steps + 5})
        llm = models.pop(id(graph))
        assert llm.calls == steps, llm.calls

    return App("langgraph", "StateGraph of 2 model nodes taking turns", build, play)


# -- CrewAI --------------------------------------------------------------------------------------
def crewai_app() -> App:
    for name, value in (("CREWAI_DISABLE_TELEMETRY", "true"), ("CREWAI_TRACING_ENABLED", "false"),
                        ("CREWAI_DISABLE_VERSION_CHECK", "true"), ("OTEL_SDK_DISABLED", "false")):
        os.environ.setdefault(name, value)
    from crewai import Agent, Crew, Task
    from crewai.llms.base_llm import BaseLLM

    class InstantLLM(BaseLLM):
        """A user's own ``BaseLLM`` (CrewAI's way to plug in a provider) answering at once (no I/O)."""

        calls: int = 0

        def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
                 from_task: Any = None, from_agent: Any = None, response_model: Any = None) -> Any:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            return _reply(self.calls)

        def supports_function_calling(self) -> bool:
            return True

    models: dict[int, InstantLLM] = {}

    def build(steps: int) -> Any:
        llm = InstantLLM(model="instant")
        agents = [Agent(role=name, goal="Count", backstory="You count.", llm=llm, allow_delegation=False)
                  for name in ("alice", "bob")]
        tasks = [Task(description=TASK, expected_output="a number", agent=agents[i % 2]) for i in range(steps)]
        crew = Crew(name="counting", agents=agents, tasks=tasks)
        models[id(crew)] = llm
        return crew

    def play(crew: Any, probe: Any, steps: int) -> None:
        crew.kickoff()
        llm = models.pop(id(crew))
        assert llm.calls == steps, llm.calls

    return App("crewai", "sequential crew of 2 agents taking turns", build, play)


# -- OpenAI Agents SDK ---------------------------------------------------------------------------
def openai_agents_app() -> App:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Runner, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)  # the baseline sends no traces either (aegis turns them off in its runs)

    class InstantModel(Model):
        """A user's own ``Model``: hands over to the other agent until the run's last turn, which
        answers; at once (no I/O)."""

        def __init__(self) -> None:
            self.calls, self.steps = 0, 0

        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                               output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                               conversation_id: Any = None, prompt: Any = None) -> ModelResponse:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            text = ResponseOutputText(type="output_text", text=_reply(self.calls), annotations=[])
            output: list[Any] = [ResponseOutputMessage(id=f"msg_{self.calls}", type="message", role="assistant",
                                                       status="completed", content=[text])]
            if self.calls < self.steps:
                output.append(ResponseFunctionToolCall(type="function_call", id=f"fc_{self.calls}", call_id=f"call_{self.calls}",
                                                       name=handoffs[0].tool_name, arguments="{}", status="completed"))
            size = len(input) if isinstance(input, list) else 1
            usage = Usage(requests=1, input_tokens=10 * size, output_tokens=5, total_tokens=10 * size + 5)
            return ModelResponse(output=output, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark runs Runner.run_sync")

    models: dict[int, InstantModel] = {}

    def build(steps: int) -> Any:
        llm = InstantModel()
        llm.steps = steps
        alice, bob = (Agent(name=n, instructions=f"You are {n}.", model=llm) for n in ("alice", "bob"))
        alice.handoffs, bob.handoffs = [bob], [alice]
        models[id(alice)] = llm
        return alice

    def play(agent: Any, probe: Any, steps: int) -> None:
        result = Runner.run_sync(agent, TASK, max_turns=steps + 1)
        assert result.final_output == _reply(steps), result.final_output
        llm = models.pop(id(agent))
        assert llm.calls == steps, llm.calls

    return App("openai-agents", "2 Agents handing off to each other", build, play)


# -- AG2 -----------------------------------------------------------------------------------------
def ag2_app() -> App:
    from types import SimpleNamespace

    from autogen import AssistantAgent, GroupChat, GroupChatManager
    from autogen.io import IOStream

    class Quiet:
        """An ag2 output stream that drops everything (a group chat prints its end whatever ``silent`` says)."""

        def print(self, *objects: Any, **kwargs: Any) -> None:
            return None

        def send(self, message: Any) -> None:
            return None

        def input(self, prompt: str = "", *, password: bool = False) -> str:
            return ""

    class InstantClient:
        """A user's own model client (ag2's ``ModelClient`` protocol, ``register_model_client``)
        answering at once with a numbered reply and usage (no I/O)."""

        calls = 0  # over all clients: the group chat's two agents share the count

        def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
            self.model = config["model"]

        def create(self, params: dict[str, Any]) -> Any:
            InstantClient.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            size = len(params["messages"])
            message = SimpleNamespace(content=_reply(InstantClient.calls), tool_calls=None, function_call=None)
            usage = SimpleNamespace(prompt_tokens=10 * size, completion_tokens=5, total_tokens=10 * size + 5)
            return SimpleNamespace(id=f"instant-{InstantClient.calls}", model=self.model, usage=usage,
                                   choices=[SimpleNamespace(message=message, finish_reason="stop")])

        def message_retrieval(self, response: Any) -> list[str]:
            return [choice.message.content for choice in response.choices]

        def cost(self, response: Any) -> float:
            return 0.0

        @staticmethod
        def get_usage(response: Any) -> dict[str, Any]:
            return {}

    IOStream.set_global_default(Quiet())

    def build(steps: int) -> Any:
        llm_config = {"config_list": [{"model": "instant", "model_client_cls": "InstantClient"}], "cache_seed": None}
        agents = [AssistantAgent(n, system_message=f"You are {n}.", llm_config=llm_config) for n in ("alice", "bob")]
        for agent in agents:
            agent.register_model_client(InstantClient)
        # max_round counts the opening message too
        chat = GroupChat(agents=agents, messages=[], max_round=steps + 1, speaker_selection_method="round_robin")
        return GroupChatManager(chat, name="counting", llm_config=False, silent=True)

    def play(manager: Any, probe: Any, steps: int) -> None:
        before = InstantClient.calls
        manager.groupchat.agents[0].initiate_chat(manager, message=TASK, silent=True)
        assert InstantClient.calls - before == steps, InstantClient.calls - before

    return App("ag2", "round-robin GroupChat of 2 AssistantAgents", build, play)


# -- Pydantic AI ---------------------------------------------------------------------------------
def pydantic_ai_app() -> App:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models import Model
    from pydantic_ai.usage import RequestUsage

    class InstantModel(Model):
        """A user's own ``Model`` answering at once with a numbered reply and usage (no I/O)."""

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        async def request(self, messages: list, model_settings: Any, model_request_parameters: Any) -> ModelResponse:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            return ModelResponse(parts=[TextPart(_reply(self.calls))], model_name="instant",
                                 usage=RequestUsage(input_tokens=10 * len(messages), output_tokens=5))

        @property
        def model_name(self) -> str:
            return "instant"

        @property
        def system(self) -> str:
            return "instant"

    def build(steps: int) -> Any:
        llm = InstantModel()
        alice, bob = (Agent(llm, name=n, instructions=f"You are {n}.") for n in ("alice", "bob"))
        alice.bench_partner = bob  # type: ignore[attr-defined]
        return alice

    async def turns(alice: Any, steps: int) -> None:
        history: list[Any] = []
        prompt = TASK
        for turn in range(steps):
            result = await (alice if turn % 2 == 0 else alice.bench_partner).run(prompt, message_history=history)
            history, prompt = result.all_messages(), result.output

    def play(alice: Any, probe: Any, steps: int) -> None:
        with probe.run(TASK) if probe is not None else nullcontext():
            asyncio.run(turns(alice, steps))
        assert alice.model.calls == steps, alice.model.calls

    return App("pydantic-ai", "2 Agents taking turns on the conversation so far", build, play)


# -- Microsoft Agent Framework -------------------------------------------------------------------
def agent_framework_app() -> App:
    from agent_framework import Agent, BaseChatClient, ChatMiddlewareLayer, ChatResponse, FunctionInvocationLayer, Message
    from agent_framework.observability import ChatTelemetryLayer
    from agent_framework.orchestrations import GroupChatBuilder

    # "reached max_rounds; forcing completion", every run
    logging.getLogger("agent_framework_orchestrations").setLevel(logging.ERROR)

    class InstantClient(FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer, BaseChatClient):
        """A user's own ``BaseChatClient`` with the layers of the framework's own clients (function
        invocation, middleware, telemetry), answering at once with a numbered reply and usage (no I/O)."""

        calls = 0  # over all clients

        async def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kwargs: Any) -> Any:
            InstantClient.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            size = len(messages)
            return ChatResponse(messages=[Message("assistant", [_reply(InstantClient.calls)])], model="instant",
                                usage_details={"input_token_count": 10 * size, "output_token_count": 5,
                                               "total_token_count": 10 * size + 5})

    names = ("alice", "bob")

    def build(steps: int) -> Any:
        llm = InstantClient()
        agents = [Agent(llm, f"You are {n}.", name=n) for n in names]
        workflow = GroupChatBuilder(name="counting", participants=agents, max_rounds=steps,
                                    selection_func=lambda state: names[state.current_round % 2]).build()
        # A round takes two supersteps (to the speaker, back to the orchestrator); the builder does not
        # pass a limit on to its workflow (100 supersteps, ~49 rounds), so it is raised here.
        workflow.max_iterations = workflow._runner._max_iterations = 2 * steps + 10
        return workflow

    def play(workflow: Any, probe: Any, steps: int) -> None:
        before = InstantClient.calls
        asyncio.run(workflow.run(TASK))
        assert InstantClient.calls - before == steps, InstantClient.calls - before

    return App("agent-framework", "GroupChat of 2 Agents taking turns", build, play)


# -- smolagents ----------------------------------------------------------------------------------
def smolagents_app() -> App:
    from smolagents import ToolCallingAgent
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
    from smolagents.monitoring import LogLevel, TokenUsage

    class InstantModel(Model):
        """A user's own ``Model``: answers at once with its ``final_answer`` call and usage (no I/O)."""

        def __init__(self) -> None:
            super().__init__(model_id="instant")
            self.calls = 0

        def generate(self, messages: list, stop_sequences: Any = None, response_format: Any = None,
                     tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            call = ChatMessageToolCall(id=f"call_{self.calls}", type="function",
                                       function=ChatMessageToolCallFunction(name="final_answer",
                                                                            arguments={"answer": _reply(self.calls)}))
            return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=[call],
                               token_usage=TokenUsage(input_tokens=10 * len(messages), output_tokens=5))

    def build(steps: int) -> Any:
        llm = InstantModel()
        alice, bob = (ToolCallingAgent(tools=[], model=llm, name=n, instructions=f"You are {n}.",
                                       verbosity_level=LogLevel.OFF) for n in ("alice", "bob"))
        alice.bench_partner = bob
        return alice

    def play(alice: Any, probe: Any, steps: int) -> None:
        with probe.run(TASK) if probe is not None else nullcontext():
            answer: Any = TASK
            for turn in range(steps):  # each agent keeps its memory (reset=False): its prompt grows every turn
                answer = (alice if turn % 2 == 0 else alice.bench_partner).run(str(answer), reset=turn < 2)
        assert alice.model.calls == steps, alice.model.calls

    return App("smolagents", "2 ToolCallingAgents taking turns, memories kept", build, play)


# -- Google ADK ----------------------------------------------------------------------------------
def google_adk_app() -> App:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    logging.getLogger("google_adk").setLevel(logging.ERROR)  # "no context_cache_config", every run

    class InstantLlm(BaseLlm):
        """A user's own ``BaseLlm``: transfers to the other agent until the run's last turn, which
        answers; at once with usage (no I/O)."""

        calls: int = 0
        steps: int = 0

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            self.calls += 1
            for hook in MODEL_CALL_HOOKS:
                hook()
            parts = [types.Part(text=_reply(self.calls))]
            if self.calls < self.steps:
                other = "bob" if self.calls % 2 else "alice"
                parts.append(types.Part(function_call=types.FunctionCall(
                    id=f"call_{self.calls}", name="transfer_to_agent", args={"agent_name": other})))
            size = len(llm_request.contents)
            usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=10 * size, candidates_token_count=5,
                                                               total_token_count=10 * size + 5)
            yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)

    def build(steps: int) -> Any:
        llm = InstantLlm(model="instant", steps=steps)
        bob = LlmAgent(name="bob", model=llm, instruction="You are bob.", description="Counts with alice.")
        return LlmAgent(name="alice", model=llm, instruction="You are alice.", description="Counts with bob.",
                        sub_agents=[bob])

    async def run(alice: Any) -> None:
        runner = InMemoryRunner(agent=alice, app_name="bench")
        session = await runner.session_service.create_session(app_name="bench", user_id="user")
        message = types.Content(role="user", parts=[types.Part(text=TASK)])
        async for _ in runner.run_async(user_id="user", session_id=session.id, new_message=message):
            pass
        await runner.close()

    def play(alice: Any, probe: Any, steps: int) -> None:
        asyncio.run(run(alice))
        assert alice.model.calls == steps, alice.model.calls

    return App("google-adk", "2 LlmAgents transferring to each other", build, play)


APPS: dict[str, Callable[[], App]] = {"autogen": autogen_app, "camel": camel_app, "metagpt": metagpt_app,
                                      "langgraph": langgraph_app, "crewai": crewai_app,
                                      "openai-agents": openai_agents_app, "ag2": ag2_app,
                                      "pydantic-ai": pydantic_ai_app, "agent-framework": agent_framework_app,
                                      "smolagents": smolagents_app, "google-adk": google_adk_app}


def installed(names: list[str]) -> list[str]:
    """The frameworks of ``names`` importable in this environment; the others are named on stderr
    (some need an environment of their own: see README, "Installing the extras")."""
    from importlib.util import find_spec

    from aegis_probe.demos import REQUIREMENTS

    here = [n for n in names if find_spec(REQUIREMENTS[n][0]) is not None]
    for name in sorted(set(names) - set(here)):
        print(f"skipped {name}: not installed here ({REQUIREMENTS[name][1]})", file=sys.stderr)
    return here
