#!/usr/bin/env bash
# Whole-process wall time and peak memory of one `tools` call, beside `curl` making the same
# request and a bare Bun `fetch` script (the runtime of the CLI that `tools` replaces).
#
# Agents run `tools` once per action, so its start-up is the cost that matters:
# target no slower than curl and at most 8 MiB peak RSS.
#
# Usage: tools/benches/cli_startup.sh                 (not run by `cargo test`)
#   N=200                  runs per command (default 200)
#   BENCH_URL=http://...   measure against a running switchboard tool server instead of the
#                          built-in responder (set SWITCHBOARD_TOKEN too, and raise
#                          [toolserver.rate_limits] per_caller_* or the runs get 429s)
#   SESSION='#ops'         the session the call lists (default #ops)
#   TOOLS_BIN=path         use this `tools` binary instead of building one
#   BUN=path               use this bun instead of installing one into /tmp/bunbench
#
# Server: by default a scripted loopback responder (python3, one canned `surface.messages.list`
# answer of 20 messages), so the numbers are the clients' own cost: process start, argument
# parsing, one HTTP/1.1 round trip on 127.0.0.1, JSON out. All three clients hit the same server.
#
# Timing: hyperfine (no shell, warm-up 20) when installed, else a date +%s%N loop.
# Memory: /usr/bin/time -f %M (max RSS, KiB), median over the same N runs.
set -euo pipefail

N=${N:-200}
SESSION=${SESSION:-#ops}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/cli-bench.XXXXXX)
responder_pid=""
cleanup() {
  if [[ -n "$responder_pid" ]]; then kill "$responder_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1 || { echo "missing: $1 ($2)" >&2; exit 1; }; }
need curl "apt-get install -y curl"
need python3 "apt-get install -y python3"
[[ -x /usr/bin/time ]] || { echo "missing: /usr/bin/time (apt-get install -y time)" >&2; exit 1; }

# --- the binary ----------------------------------------------------------------------------
if [[ -z "${TOOLS_BIN:-}" ]]; then
  echo "building tools (release)..." >&2
  (cd "$repo" && cargo build --release -q -p tools)
  target=$(cd "$repo" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  TOOLS_BIN="$target/release/tools"
fi
[[ -x "$TOOLS_BIN" ]] || { echo "no tools binary at $TOOLS_BIN" >&2; exit 1; }

# --- the server ----------------------------------------------------------------------------
if [[ -n "${BENCH_URL:-}" ]]; then
  url=$BENCH_URL
  server="switchboard tool server at $url"
else
  cat >"$work/responder.py" <<'PY'
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

messages = [{"id": str(1000 + i), "sessionId": "ops", "authorId": "42", "authorName": "stanley",
             "ts": "2024-05-01T12:%02d:00Z" % i, "text": "message number %d with a little text" % i}
            for i in range(20)]
body = json.dumps({"ok": True, "value": {"messages": messages}}).encode()

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

srv = HTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
PY
  python3 "$work/responder.py" >"$work/port" &
  responder_pid=$!
  for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.05; done
  url="http://127.0.0.1:$(cat "$work/port")"
  server="scripted python3 responder at $url (canned 20-message answer)"
fi
export SWITCHBOARD_URL=$url
token=${SWITCHBOARD_TOKEN:-}
body=$(python3 -c 'import json,sys; print(json.dumps({"tool":"surface.messages.list","args":{"sessionId":sys.argv[1]}}))' "$SESSION")

# --- the three clients ---------------------------------------------------------------------
tools_cmd=("$TOOLS_BIN" surface.messages.list "--session-id=$SESSION")
curl_cmd=(curl -sf -X POST -H "content-type: application/json" --data "$body" "$url/v1/call")
if [[ -n "$token" ]]; then curl_cmd+=(-H "authorization: Bearer $token"); fi

bun=${BUN:-}
if [[ -z "$bun" ]]; then
  if command -v bun >/dev/null 2>&1; then
    bun=$(command -v bun)
  elif [[ -x /tmp/bunbench/node_modules/.bin/bun ]] \
    || npm install --silent --prefix /tmp/bunbench bun >/dev/null 2>&1; then
    bun=/tmp/bunbench/node_modules/.bin/bun
  fi
fi
cat >"$work/fetch.js" <<'JS'
const url = process.env.SWITCHBOARD_URL;
const headers = { "content-type": "application/json" };
if (process.env.SWITCHBOARD_TOKEN) headers.authorization = `Bearer ${process.env.SWITCHBOARD_TOKEN}`;
const res = await fetch(`${url}/v1/call`, { method: "POST", headers, body: process.env.BENCH_BODY });
const out = await res.json();
console.log(JSON.stringify(out.value));
JS
export BENCH_BODY=$body

# Sanity: every client gets the answer.
"${tools_cmd[@]}" >/dev/null || { echo "tools failed against $url" >&2; exit 1; }
"${curl_cmd[@]}" >/dev/null || { echo "curl failed against $url" >&2; exit 1; }
if [[ -n "$bun" ]] && ! "$bun" "$work/fetch.js" >/dev/null 2>&1; then
  echo "bun fetch failed; leaving bun out" >&2
  bun=""
fi

# --- measurement ---------------------------------------------------------------------------
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

wall_ms() { # prints the median wall time in ms of "$@" over N runs
  if command -v hyperfine >/dev/null 2>&1; then
    if ! hyperfine -N --warmup 20 --runs "$N" --style none --export-json "$work/h.json" \
      -- "$(printf '%q ' "$@")" >/dev/null 2>"$work/h.err"; then
      echo "hyperfine failed for: $* (a non-zero exit; rate limited?)" >&2
      cat "$work/h.err" >&2
      exit 1
    fi
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.2f" % (r["median"]*1000))' "$work/h.json"
  else
    for _ in $(seq "$N"); do
      s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N)
      echo $(( (e - s) / 1000 ))
    done | median | awk '{printf "%.2f\n", $1/1000}'
  fi
}

peak_kib() { # prints the median max RSS in KiB of "$@" over N runs
  for _ in $(seq "$N"); do
    /usr/bin/time -f %M -o "$work/rss" "$@" >/dev/null 2>&1
    cat "$work/rss"
  done | median
}

echo "server: $server"
echo "N=$N per command; timing: $(command -v hyperfine >/dev/null && echo 'hyperfine -N, warm-up 20' || echo 'date loop')"
printf '%-10s %14s %16s\n' client "median ms" "median peak KiB"
row() {
  local name=$1 ms kib
  shift
  ms=$(wall_ms "$@") || exit 1
  kib=$(peak_kib "$@") || exit 1
  printf '%-10s %14s %16s\n' "$name" "$ms" "$kib"
}
row tools "${tools_cmd[@]}"
row curl "${curl_cmd[@]}"
if [[ -n "$bun" ]]; then
  row bun "$bun" "$work/fetch.js"
else
  echo "bun       (not available: npm install --prefix /tmp/bunbench bun failed)"
fi
echo "tools: $TOOLS_BIN ($(stat -c %s "$TOOLS_BIN") bytes)"
