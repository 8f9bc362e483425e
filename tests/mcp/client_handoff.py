"""The official MCP Python SDK calls agent.handoff with a progress token: it gets progress
notifications while the other agent's run works, then the run's answer.

Environment: MCP_URL (http://127.0.0.1:PORT/mcp), MCP_TOKEN (the operator's), MCP_SESSION,
MCP_AGENT (the agent handed to); with MCP_TRANSPORT=stdio, through `switchboard mcp`
(SWITCHBOARD_BIN, MCP_BASE_URL http://127.0.0.1:PORT) instead of streamable HTTP.
"""

import os

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from common import check, run


async def main():
    headers = {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"}
    http = create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0))
    updates = []

    async def on_progress(progress, total, message):
        updates.append({"progress": progress, "total": total, "message": message})

    if os.environ.get("MCP_TRANSPORT") == "stdio":
        transport = StdioServerParameters(
            command=os.environ["SWITCHBOARD_BIN"],
            args=["mcp"],
            env={"SWITCHBOARD_URL": os.environ["MCP_BASE_URL"], "SWITCHBOARD_TOKEN": os.environ["MCP_TOKEN"], "RUST_LOG": "warn"},
        )
    else:
        transport = streamable_http_client(os.environ["MCP_URL"], http_client=http)
    async with Client(transport, mode="auto", cache=None) as client:
        answered = await client.call_tool(
            "agent.handoff",
            {"agent": os.environ["MCP_AGENT"], "prompt": "take your time", "sessionId": os.environ["MCP_SESSION"], "timeoutS": 60},
            progress_callback=on_progress,
        )
    check(not answered.is_error, "the handoff answers", answered)
    result = answered.structured_content
    check(len(updates) >= 1, "the handoff reported progress while its run worked", updates)
    check(all(abs(u["total"] - 60) < 1.5 for u in updates), "progress counts toward the handoff's timeout", updates)
    check(
        all(a["progress"] < b["progress"] for a, b in zip(updates, updates[1:])),
        "progress only grows",
        updates,
    )
    return {"result": result, "progress": updates}


run(main)
