"""A tiny MCP server over stdio with one tool, ``divide``; the MCP tests start it as a subprocess.

``divide(a, b)`` returns ``a / b`` as text; ``b == 0`` raises, which the MCP server reports as a
tool error (``isError``) to the client.
"""

from mcp.server.fastmcp import FastMCP

server = FastMCP("aegis-test-math", log_level="WARNING")


@server.tool()
def divide(a: float, b: float) -> str:
    """Divide a by b."""
    return f"{a / b:g}"


if __name__ == "__main__":
    server.run("stdio")
