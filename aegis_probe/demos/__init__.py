"""Built-in demo apps, one per framework, that solve one task against the embedded model server.

Each module exposes ``FRAMEWORK, TASK, EXPECTED, AGENTS, TOOL, policy, build_app, run_app``; the
``demo`` command and the conformance tests use them.
"""

FRAMEWORKS = ("autogen", "camel", "metagpt")
