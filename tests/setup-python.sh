#!/usr/bin/env bash
# Makes target/py-venv with the pinned packages of tests/python-requirements.txt, for the tests
# that drive third-party clients (tests/mcp.rs). Idempotent and quick when up to date: the venv
# keeps a copy of the requirements it was made from, and nothing runs while they match.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/py-venv
requirements=tests/python-requirements.txt
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then
    exit 0
fi
python=${PYTHON:-}
if [ -z "$python" ]; then
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then python=$candidate; break; fi
    done
fi
if [ -z "$python" ]; then
    echo "tests/setup-python.sh: no python3 found (set PYTHON=/path/to/python3.10+)" >&2
    exit 1
fi
echo "tests/setup-python.sh: making $venv with $("$python" --version 2>&1)" >&2
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
