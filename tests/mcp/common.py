"""What both MCP test clients check, whatever the transport.

Driven by tests/mcp.rs with the official MCP Python SDK (PyPI `mcp`, pinned in
tests/python-requirements.txt). Every check raises AssertionError with what it saw; the last
line printed on stdout is a JSON summary the Rust test reads.
"""

import json
import os
import re
import sys

import anyio


def check(condition, what, seen=None):
    if not condition:
        raise AssertionError(f"{what}; saw: {seen!r}")


def expand(value, variables):
    """`${VAR}` and `${VAR:-default}` as MCP hosts expand them in `.mcp.json`."""

    def one(match):
        name, default = match.group(1), match.group(3)
        if name in variables:
            return variables[name]
        check(default is not None, f"${{{name}}} has a value", variables)
        return default

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(:-([^}]*))?\}", one, value)


def host_entry(name, variables):
    """The `mcpServers.NAME` entry of the example host config (MCP_HOST_CONFIG, the
    repository's examples/mcp/claude-code.mcp.json), its strings expanded with `variables`: the
    tests connect the way the example tells users to."""
    with open(os.environ["MCP_HOST_CONFIG"], encoding="utf-8") as file:
        servers = json.load(file)["mcpServers"]
    check(name in servers, f"the example host config has {name}", list(servers))

    def walk(value):
        if isinstance(value, str):
            return expand(value, variables)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return walk(servers[name])


def tool_named(tools, name):
    found = [t for t in tools if t.name == name]
    check(len(found) == 1, f"tools/list has {name} once", [t.name for t in tools])
    return found[0]


async def check_tools(client, expect_progress_tool=True):
    """tools/list: every callable with its schemas, title and annotations."""
    listed = await client.list_tools()
    tools = listed.tools
    names = sorted(t.name for t in tools)
    for name in ["surface.help", "surface.messages.list", "surface.messages.send", "surface.messages.delete"]:
        check(name in names, f"{name} is listed", names)
    for tool in tools:
        check(tool.input_schema.get("type") == "object", f"{tool.name} has an object input schema", tool.input_schema)
        check(tool.title, f"{tool.name} has a title", tool)
        check(tool.annotations is not None, f"{tool.name} has annotations", tool)
        check(tool.annotations.open_world_hint is not None, f"{tool.name} says openWorldHint", tool.annotations)
        check(
            tool.output_schema is not None and tool.output_schema.get("type") == "object",
            f"{tool.name} has an object output schema",
            tool.output_schema,
        )
    listing = tool_named(tools, "surface.messages.list")
    check(listing.annotations.read_only_hint is True, "a list is read-only", listing.annotations)
    check(listing.annotations.idempotent_hint is True, "a list is idempotent", listing.annotations)
    check("messages" in listing.output_schema.get("properties", {}), "the list's output schema has messages", listing.output_schema)
    check("sessionId" in listing.input_schema.get("properties", {}), "the list takes sessionId", listing.input_schema)
    delete = tool_named(tools, "surface.messages.delete")
    check(delete.annotations.read_only_hint is False, "delete is not read-only", delete.annotations)
    check(delete.annotations.destructive_hint is True, "delete is destructive", delete.annotations)
    send = tool_named(tools, "surface.messages.send")
    check(send.annotations.destructive_hint is False, "send only adds", send.annotations)
    check(send.annotations.idempotent_hint is False, "send is not idempotent", send.annotations)
    help_ = tool_named(tools, "surface.help")
    check(help_.annotations.read_only_hint is True, "help is read-only", help_.annotations)
    return names


async def check_calls(client, session, marker):
    """A read, a send (the fake records the POST), and a call the rules deny."""
    listed = await client.call_tool("surface.messages.list", {"sessionId": session, "limit": 5})
    check(not listed.is_error, "surface.messages.list succeeds", listed)
    check(isinstance(listed.structured_content.get("messages"), list), "the list is structured", listed.structured_content)
    check(listed.structured_content["session"]["token"] == "ops", "the list names its session", listed.structured_content)
    check(json.loads(listed.content[0].text) == listed.structured_content, "the text is the same JSON", listed.content)

    sent = await client.call_tool("surface.messages.send", {"sessionId": session, "text": f"{marker} ping @Stanley"})
    check(not sent.is_error, "surface.messages.send succeeds", sent)
    ids = sent.structured_content.get("messageIds")
    check(isinstance(ids, list) and len(ids) == 1, "one message was posted", sent.structured_content)

    denied = await client.call_tool("surface.messages.delete", {"sessionId": session, "messageId": ids[0]})
    check(denied.is_error, "a denied call is an error result", denied)
    error = denied.structured_content
    check(error.get("kind") == "denied" and error.get("code") == "permission_denied", "the denial is typed", error)
    check("not allowed" in error.get("message", ""), "the denial says why", error)

    unknown = await client.call_tool("surface.messages.lst", {})
    check(unknown.is_error, "an unknown tool is an error result", unknown)
    check(unknown.structured_content.get("code") == "unknown_tool", "unknown_tool", unknown.structured_content)
    check(unknown.structured_content["details"]["suggestion"] == "surface.messages.list", "with a suggestion", unknown.structured_content)

    bad = await client.call_tool("surface.messages.list", {"sessionId": session, "limit": 100000})
    check(bad.is_error and bad.structured_content.get("code") == "invalid_input", "bad input is invalid_input", bad)
    return ids[0]


async def check_ask(client, session, message_id, timeout):
    """A call the rules ask about, nobody answering: progress while it waits, then expired."""
    updates = []

    async def on_progress(progress, total, message):
        updates.append({"progress": progress, "total": total, "message": message})

    asked = await client.call_tool(
        "surface.reactions.add",
        {"sessionId": session, "messageId": message_id, "emoji": "👍"},
        progress_callback=on_progress,
    )
    check(asked.is_error, "an unanswered ask is an error result", asked)
    check(asked.structured_content.get("code") == "approval_expired", "approval_expired", asked.structured_content)
    check(len(updates) >= 1, "the wait reported progress", updates)
    check(all(abs(u["total"] - timeout) < 1.5 for u in updates), "progress counts toward the ask timeout", updates)
    check("surface.reactions.add" in (updates[0]["message"] or ""), "the progress names the call", updates)
    check(
        all(a["progress"] < b["progress"] for a, b in zip(updates, updates[1:])),
        "progress only grows",
        updates,
    )
    return updates


def run(main):
    try:
        summary = anyio.run(main)
    except AssertionError as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary))
