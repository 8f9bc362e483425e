"""The official MCP Python SDK against switchboard's streamable HTTP endpoint.

Environment: MCP_URL (http://127.0.0.1:PORT/mcp), MCP_TOKEN (the operator's),
MCP_READER_TOKEN (a named token scoped to surface.help and surface.messages.list),
MCP_MODE ("legacy": the initialize handshake; "auto": server/discover first), MCP_SESSION,
MCP_MARKER (text the Rust test finds in the fake's recorded POST), MCP_ASK_TIMEOUT_S,
MCP_HOST_CONFIG (examples/mcp/claude-code.mcp.json: the operator's client connects as it says).
"""

import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from common import check, check_ask, check_calls, check_tools, host_entry, run

URL = os.environ["MCP_URL"]
MODE = os.environ.get("MCP_MODE", "legacy")
SESSION = os.environ["MCP_SESSION"]


def client_with(token, statuses=None):
    """A client sending `token`; `statuses` collects (status, WWW-Authenticate) of each answer."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    http = create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0))
    if statuses is not None:

        async def record(response):
            statuses.append((response.status_code, response.headers.get("www-authenticate", "")))

        http.event_hooks["response"].append(record)
    return Client(streamable_http_client(URL, http_client=http), mode=MODE, cache=None)


def client_from_example(token):
    """The example host config's `switchboard-http` entry: its URL and headers."""
    base = URL.removesuffix("/mcp")
    entry = host_entry("switchboard-http", {"SWITCHBOARD_URL": base, "SWITCHBOARD_TOKEN": token})
    check(entry.get("type") == "http" and entry["url"] == URL, "the example's URL is the endpoint", entry)
    http = create_mcp_http_client(headers=entry["headers"], timeout=httpx2.Timeout(30.0, read=120.0))
    return Client(streamable_http_client(entry["url"], http_client=http), mode=MODE, cache=None)


async def main():
    summary = {"mode": MODE}
    async with client_from_example(os.environ["MCP_TOKEN"]) as client:
        summary["protocol"] = str(client.protocol_version)
        summary["tools"] = await check_tools(client)
        summary["sent"] = await check_calls(client, SESSION, os.environ["MCP_MARKER"])

        # An ask waits like an HTTP call, reporting progress while it does; with nobody to
        # approve, it is denied when permissions.ask_timeout_s runs out.
        updates = await check_ask(client, SESSION, summary["sent"], float(os.environ["MCP_ASK_TIMEOUT_S"]))
        summary["progress"] = updates

    # A named token sees exactly its scope, and is refused outside it.
    async with client_with(os.environ["MCP_READER_TOKEN"]) as reader:
        listed = await reader.list_tools()
        names = sorted(t.name for t in listed.tools)
        check(names == ["surface.help", "surface.messages.list"], "the reader sees its scope only", names)
        refused = await reader.call_tool("surface.messages.send", {"sessionId": SESSION, "text": "no"})
        check(refused.is_error, "an out-of-scope call is an error result", refused)
        check(refused.structured_content.get("code") == "out_of_scope", "out_of_scope", refused.structured_content)
        summary["reader_tools"] = names

    # A wrong token and no token are refused before anything else: HTTP 401 with
    # WWW-Authenticate, and the SDK's session fails to start.
    for token in ["not-a-token", None]:
        statuses = []
        try:
            async with client_with(token, statuses) as nobody:
                await nobody.list_tools()
        except Exception as error:  # the SDK raises its transport's error
            summary.setdefault("refused", []).append(repr(error)[:200])
        else:
            check(False, "a wrong or missing token is refused", token)
        check(statuses and all(status == 401 for status, _ in statuses), "every answer is 401", statuses)
        check(all(auth.lower().startswith("bearer") for _, auth in statuses), "with WWW-Authenticate: Bearer", statuses)
    return summary


run(main)
