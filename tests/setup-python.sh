#!/usr/bin/env bash
# Makes target/py-venv with the pinned packages of tests/python-requirements.txt, for the tests
# that drive third-party clients (tests/mcp.rs). Idempotent and quick when up to date: the venv
# keeps a copy of the requirements it was made from, and nothing runs while they match.
# A machine without python3 or its venv module gets them from Debian's packages (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/py-venv
requirements=tests/python-requirements.txt
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then
    exit 0
fi

find_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
    done
}

# `python -m venv` needs ensurepip, which Debian ships apart (python3-venv).
can_make_venv() {
    [ -n "$1" ] && "$1" -c 'import venv, ensurepip' >/dev/null 2>&1
}

python=$(find_python)
if ! can_make_venv "$python"; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "tests/setup-python.sh: installing python3 and python3-venv (apt)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
        python=${PYTHON:-python3}
        # Debian's python3, not a shim that lacks ensurepip.
        if ! can_make_venv "$python" && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi
    fi
fi
if ! can_make_venv "$python"; then
    echo "tests/setup-python.sh: no python3 with the venv module (install python3 and python3-venv, or set PYTHON=/path/to/python3.10+)" >&2
    exit 1
fi
echo "tests/setup-python.sh: making $venv with $("$python" --version 2>&1)" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
