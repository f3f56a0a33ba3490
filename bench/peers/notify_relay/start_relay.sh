#!/usr/bin/env bash
# Starts the LISTEN/NOTIFY -> SSE relay in the foreground.
#   bench/peers/notify_relay/start_relay.sh <port> <libpq conninfo URL or empty>
# Installs nodejs/npm with apt-get and the pg package with npm when missing.
# PG* environment variables are honoured when no URL is given.
set -euo pipefail
port=${1:?usage: start_relay.sh <port> [postgres-url]}
url=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "start_relay: installing nodejs npm" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends nodejs npm >&2 ||
        { apt-get update >&2 && apt-get install -y --no-install-recommends nodejs npm >&2; }
fi
if [ ! -d "$here/node_modules/pg" ]; then
    echo "start_relay: npm install (pg)" >&2
    if [ -f "$here/package-lock.json" ]; then
        (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2
    else
        (cd "$here" && npm install --no-audit --no-fund --loglevel=error) >&2
    fi
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export PORT="$port"
[ -n "$url" ] && export DATABASE_URL="$url"
exec node "$here/relay.js"
