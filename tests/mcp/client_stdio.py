"""The official MCP Python SDK launching `switchboard mcp` as an MCP stdio server, the way a
host's config does: {"command": SWITCHBOARD_BIN, "args": ["mcp"]} plus SWITCHBOARD_URL and
SWITCHBOARD_TOKEN.

Environment: SWITCHBOARD_BIN, MCP_BASE_URL (http://127.0.0.1:PORT), MCP_TOKEN, MCP_MODE,
MCP_SESSION, MCP_MARKER, MCP_ASK_TIMEOUT_S.
"""

import os

from mcp import Client, StdioServerParameters

from common import check, check_ask, check_calls, check_tools, host_entry, run

MODE = os.environ.get("MCP_MODE", "legacy")
SESSION = os.environ["MCP_SESSION"]


def launch(token):
    """The example host config's `switchboard` entry, with the built binary for `switchboard`
    (not on PATH in the tests)."""
    entry = host_entry("switchboard", {"SWITCHBOARD_URL": os.environ["MCP_BASE_URL"], "SWITCHBOARD_TOKEN": token})
    check(entry["command"] == "switchboard", "the example runs `switchboard`", entry)
    return Client(
        StdioServerParameters(
            command=os.environ["SWITCHBOARD_BIN"],
            args=entry["args"],
            env={**entry["env"], "RUST_LOG": "warn"},
        ),
        mode=MODE,
        cache=None,
    )


def check_codex_example():
    """examples/mcp/codex.toml starts the same command with the same variables."""
    import tomllib

    path = os.path.join(os.path.dirname(os.environ["MCP_HOST_CONFIG"]), "codex.toml")
    with open(path, "rb") as file:
        server = tomllib.load(file)["mcp_servers"]["switchboard"]
    check(server["command"] == "switchboard" and server["args"] == ["mcp"], "codex runs `switchboard mcp`", server)
    check(sorted(server["env"]) == ["SWITCHBOARD_TOKEN", "SWITCHBOARD_URL"], "codex passes the URL and token", server)


async def main():
    check_codex_example()
    summary = {"mode": MODE}
    async with launch(os.environ["MCP_TOKEN"]) as client:
        summary["protocol"] = str(client.protocol_version)
        summary["tools"] = await check_tools(client)
        summary["sent"] = await check_calls(client, SESSION, os.environ["MCP_MARKER"])
        # The forwarder finds the approval its call waits on and reports progress meanwhile.
        summary["progress"] = await check_ask(client, SESSION, summary["sent"], float(os.environ["MCP_ASK_TIMEOUT_S"]))

    # A wrong token: the forwarder starts, but the switchboard refuses what it forwards.
    async with launch("not-a-token") as nobody:
        try:
            await nobody.list_tools()
        except Exception as error:
            summary["refused_list"] = str(error)[:200]
        else:
            check(False, "listing with a wrong token fails", None)
        check("invalid_token" in summary["refused_list"], "the refusal names invalid_token", summary["refused_list"])
        refused = await nobody.call_tool("surface.messages.list", {"sessionId": SESSION})
        check(refused.is_error, "a call with a wrong token is an error result", refused)
        check(refused.structured_content.get("code") == "invalid_token", "invalid_token", refused.structured_content)
    return summary


run(main)
