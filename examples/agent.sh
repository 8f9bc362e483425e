#!/bin/sh
# A command agent for switchboard (agent.runner = "command"): the prompt arrives on stdin, the
# reply goes to stdout ("NO_REPLY" posts nothing), and `tools` acts in Discord with the run's
# own token (SWITCHBOARD_URL, SWITCHBOARD_TOKEN and SWITCHBOARD_SESSION_ID are set for it).
# Lines on stderr that start with "progress: " update a status line in Discord while it works.
#
# This one needs no model: it reads the channel and answers with what it saw. Replace the
# middle with a call to your own agent (a CLI coding agent, a script, a model client).
set -eu

# `tools` from PATH (agent.env_passthrough = ["PATH"]), or name it with $SWITCHBOARD_TOOLS.
tools=${SWITCHBOARD_TOOLS:-tools}

prompt=$(cat)
# The prompt's first line says who wrote; the request is the line after it.
request=$(printf '%s\n' "$prompt" | sed -n 2p)

echo "progress: reading the channel" >&2
listed=$("$tools" surface.messages.list --limit=20 --output=json)
count=$(printf '%s' "$listed" | grep -o '"messageId"' | wc -l | tr -d ' ')
people=$(printf '%s' "$listed" | grep -o '"authorName": *"[^"]*"' | sort -u | wc -l | tr -d ' ')

printf 'I read the last %s messages here, from %s people. You asked: %s\n' \
    "$count" "$people" "$request"
