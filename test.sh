#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this), on a fresh Debian machine
# with a Rust toolchain: installs what the tests need and is missing, then the format check,
# clippy with warnings as errors, and `cargo test --workspace`.
#
# Idempotent and quick when everything is there: each dependency is one check (`command -v`,
# `dpkg-query`, a Python import); apt-get runs only for what is missing, once, through sudo
# only when not root. The Python venvs are rebuilt only when their pinned requirements change.
#
#   ./test.sh          set up, then check and test everything
#   ./test.sh --setup  only set up (install what is missing, make the venvs)
#   ./test.sh --plan   print what is missing and would be installed; change nothing
set -euo pipefail
cd "$(dirname "$0")"

mode=all
case "${1:-}" in
    "") ;;
    --plan) mode=plan ;;
    --setup) mode=setup ;;
    *)
        echo "usage: ./test.sh [--setup | --plan]  (a part of the suite: cargo test -p CRATE --test FILE)" >&2
        exit 2
        ;;
esac

say() { echo "test.sh: $*" >&2; }

# Debian packages the tests drive; a test that needs one fails, never skips, without it.
#   chromium, chromium-driver  the console's browser test (tests/console_browser.rs)
#   prometheus                 promtool, which checks /metrics
#   python3-venv               the venvs of the official MCP and interop clients
#   postgresql                 PostgreSQL (its binaries are in /usr/lib/postgresql/N/bin, not on
#                              PATH; the tests start their own server)
#   bubblewrap                 bwrap, the sandbox agent commands run in
#   gcc, libc6-dev             the C the build compiles (bundled SQLite)
missing=()
need() { # need PACKAGE CHECK...: PACKAGE is missing unless CHECK succeeds.
    local package=$1
    shift
    if ! "$@" >/dev/null 2>&1; then missing+=("$package"); fi
}
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
need chromium command -v chromium
need chromium-driver command -v chromedriver
need prometheus command -v promtool
need python3-venv python3 -c 'import venv, ensurepip'
need postgresql installed postgresql
need bubblewrap command -v bwrap
need gcc command -v cc
need libc6-dev installed libc6-dev

if ! command -v cargo >/dev/null 2>&1; then
    say "no cargo: install Rust first (https://rustup.rs), then run ./test.sh again"
    exit 1
fi
components=()
cargo fmt --version >/dev/null 2>&1 || components+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || components+=(clippy)

if [ $mode = plan ]; then
    if [ ${#missing[@]} -eq 0 ]; then
        echo "packages: all present"
    else
        echo "packages: apt-get install ${missing[*]}"
    fi
    if [ ${#components[@]} -eq 0 ]; then
        echo "rust components: all present"
    else
        echo "rust components: rustup component add ${components[*]}"
    fi
    exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing ${missing[*]}, and this is not a Debian-like system with apt-get: install them, then run ./test.sh again"
        exit 1
    fi
    as_root=()
    if [ "$(id -u)" != 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            say "missing ${missing[*]}: run ./test.sh as root, or install sudo, to install them"
            exit 1
        fi
        as_root=(sudo)
    fi
    say "installing ${missing[*]} (apt-get)"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#components[@]} -gt 0 ]; then
    say "adding ${components[*]} (rustup)"
    rustup component add "${components[@]}"
fi
bash tests/setup-python-interop.sh >/dev/null
bash tests/setup-python.sh
if [ $mode = setup ]; then exit 0; fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# A hung test must fail the run with its name, not use up CI's 90 minutes: the whole suite takes
# about 20 minutes on CI's two cores. timeout signals cargo's whole process group, test
# binaries included.
status=0
timeout --kill-after=30 3600 cargo test --workspace || status=$?
if [ $status = 124 ] || [ $status = 137 ]; then
    say "the suite ran over 60 minutes and was stopped: a test hangs (cargo printed 'has been running for over 60 seconds' for it above)"
fi
exit $status
