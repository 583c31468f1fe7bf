"""Built-in demo apps, one per framework, that solve arithmetic tasks against the embedded model server.

Each module exposes ``FRAMEWORK, TASK, EXPECTED, AGENTS, TOOL, policy, build_app, run_app`` (and
``WORKER``, the agent ``demo --inject`` faults by default); the ``demo`` command and the
conformance tests use them. :data:`REQUIREMENTS` says what each needs installed.
"""

FRAMEWORKS = ("autogen", "camel", "metagpt", "langgraph", "openai-agents", "ag2", "crewai", "pydantic-ai",
              "agent-framework", "smolagents", "google-adk")

#: framework -> (the module its demo imports, how to install it).
REQUIREMENTS: dict[str, tuple[str, str]] = {
    "autogen": ("autogen_agentchat", "pip install 'aegis-probe[autogen]'"),
    "camel": ("camel", "pip install 'aegis-probe[camel]'"),
    "metagpt": ("metagpt", "MetaGPT has no working extra: follow README.md, 'Installing the extras' (metagpt)"),
    "langgraph": ("langgraph", "pip install 'aegis-probe[langgraph]'"),
    "openai-agents": ("agents", "pip install 'aegis-probe[openai-agents]' (an environment of its own: see README.md)"),
    "ag2": ("autogen", "pip install 'aegis-probe[ag2]' (an environment of its own: see README.md)"),
    "crewai": ("crewai", "pip install 'aegis-probe[crewai]' (an environment of its own: see README.md)"),
    "pydantic-ai": ("pydantic_ai", "pip install 'aegis-probe[pydantic-ai]'"),
    "agent-framework": ("agent_framework", "pip install 'aegis-probe[agent-framework]'"),
    "google-adk": ("google.adk", "pip install 'aegis-probe[google-adk]' (an environment of its own: see README.md)"),
    "smolagents": ("smolagents", "pip install 'aegis-probe[smolagents]'"),
}

#: ``demo --team`` -> the demo module of that team type (its framework implied).
TEAMS: dict[str, str] = {"magentic-one": "magentic", "selector": "selector", "nested": "nested"}
REQUIREMENTS.update({team: REQUIREMENTS["autogen"] for team in TEAMS.values()})


def demo_module(name: str) -> str:
    """The module of the demo of framework or team ``name`` (``openai-agents`` -> ``...demos.openai_agents``)."""
    return f"aegis_probe.demos.{name.replace('-', '_')}"
