#!/usr/bin/env bash
# Creates (or reuses) the Python venv the interop tests use: target/py-venv-interop with
# tests/python-requirements-interop.txt. Idempotent and quick when already done: the venv is
# rebuilt only when the requirements file changed. Prints the venv's bin directory.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="target/py-venv-interop"
requirements="tests/python-requirements-interop.txt"
stamp="$venv/.requirements"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
    echo "$PWD/$venv/bin"
    exit 0
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -qq python3-venv >/dev/null || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; }
    fi
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
cp "$requirements" "$stamp"
echo "$PWD/$venv/bin"
