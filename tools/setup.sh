#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian/Ubuntu machine:
# a Rust toolchain is assumed (rustup); redis-server (with redis-cli) comes
# from the system's packages when it is missing. The tests start their own
# servers on free loopback ports; the system service is never used.
set -euo pipefail

need_redis=0
command -v redis-server >/dev/null 2>&1 || need_redis=1
command -v redis-cli >/dev/null 2>&1 || need_redis=1

if [ "$need_redis" = 1 ]; then
    echo "setup: installing redis-server from the system's packages" >&2
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    if command -v apt-get >/dev/null 2>&1; then
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
    elif command -v dnf >/dev/null 2>&1; then
        $SUDO dnf install -y redis
    elif command -v brew >/dev/null 2>&1; then
        brew install redis
    else
        echo "setup: please install redis-server (Redis 6 or newer) and re-run" >&2
        exit 1
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust from https://rustup.rs and re-run" >&2
    exit 1
fi
redis-server --version >&2
