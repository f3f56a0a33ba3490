#!/usr/bin/env bash
# Real-browser tests for pgbus_stream (issue 7): headless Debian Chromium
# driven by playwright-core, against a throwaway PostgreSQL cluster (PG_CONFIG's) with the
# installed extension. Installs what is missing (chromium from apt, npm deps),
# starts the cluster and runs tests/*.js; screenshots go to output/.
#
#   test/browser/run.sh                 # all tests
#   test/browser/run.sh contract        # tests whose file or name contains "contract"
#
# Environment: PGBUS_BUILD=1 builds and installs the extension first
# (make && make install at the repo root); KEEP_CLUSTER=1 keeps the temporary
# cluster directory; PGBUS_OS_USER (default pgbus) owns the cluster when run
# as root; TEST_TIMEOUT (seconds, default 900) bounds the whole test run.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT="$HERE/output"
OSUSER=${PGBUS_OS_USER:-pgbus}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
PG_CONFIG=${PG_CONFIG:-pg_config}
say() { echo "# $*"; }
die() { echo "run.sh: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

command -v "$PG_CONFIG" >/dev/null || PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PGBIN=$("$PG_CONFIG" --bindir)
[ -x "$PGBIN/initdb" ] || PGBIN=/usr/lib/postgresql/15/bin
IS_ROOT=0; [ "$(id -u)" = 0 ] && IS_ROOT=1

# --- dependencies ----------------------------------------------------------
if [ ! -x "$CHROMIUM" ]; then
  [ $IS_ROOT = 1 ] || die "$CHROMIUM missing; install Debian's chromium (apt-get install chromium)"
  say "installing chromium (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  [ $IS_ROOT = 1 ] || die "nginx missing; install Debian's nginx (apt-get install nginx)"
  say "installing nginx (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi
NODE_MODULES_OK=0
[ -f "$HERE/node_modules/playwright-core/package.json" ] && [ -f "$HERE/node_modules/@hotwired/turbo/package.json" ] && NODE_MODULES_OK=1
# npm only to fetch node_modules (a copy of the tree may bring them along).
command -v node >/dev/null && { [ $NODE_MODULES_OK = 1 ] || command -v npm >/dev/null; } || {
  [ $IS_ROOT = 1 ] || die "node and npm are needed"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
}
if [ $NODE_MODULES_OK = 0 ]; then
  say "installing npm dependencies (npm ci)"
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ "${PGBUS_BUILD:-0}" = 1 ]; then
  say "building and installing the extension"
  make -C "$ROOT" -j"$(nproc)" >/dev/null && make -C "$ROOT" install >/dev/null
fi
[ -f "$("$PG_CONFIG" --sharedir)/extension/pgbus_stream.control" ] ||
  die "pgbus_stream is not installed: make -C $ROOT && make -C $ROOT install (or PGBUS_BUILD=1)"

# --- throwaway cluster (PostgreSQL refuses to run as root) -----------------
AS=()
if [ $IS_ROOT = 1 ]; then
  id -u "$OSUSER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$OSUSER"
  AS=(runuser -u "$OSUSER" --)
fi
WORK=$(mktemp -d /tmp/pgbus-browser.XXXXXX)
chmod 755 "$WORK"
[ $IS_ROOT = 1 ] && chown "$OSUSER" "$WORK"
DATA="$WORK/data"
mkdir -p "$OUT"
rm -f "$OUT"/*.png "$OUT"/postgres.log "$OUT"/postgres.log.expected_signals "$OUT"/standby.log

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "${TEST_PID:-}" ]; then
    kill -TERM "$TEST_PID" 2>/dev/null || true
    wait "$TEST_PID" 2>/dev/null || true
  fi
  # The hot standby tests/08-edge.js makes beside the cluster, if it is still up.
  if [ -f "$WORK/standby/postmaster.pid" ]; then
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$WORK/standby" -m immediate stop >/dev/null 2>&1 || true
  fi
  if [ -f "$DATA/postmaster.pid" ]; then
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m fast -t 20 stop >/dev/null 2>&1 ||
      "${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
  fi
  [ -f "$WORK/postgres.log" ] && cp "$WORK/postgres.log" "$OUT/postgres.log" 2>/dev/null || true
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then say "cluster kept in $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The Rails app's secret_key_base of the signed-name vectors made by
# ruby-activesupport (test/unit/fixtures): a page uses one of them.
SKB=$(awk -F'\t' '$2 == "skb" { print $3; exit }' "$ROOT/test/unit/fixtures/signed_names.tsv")
[ -n "$SKB" ] || die "no secret_key_base in test/unit/fixtures/signed_names.tsv"
read -r PGPORT SSE_PORT PAGE_PORT OTHER_PORT < <(node "$HERE/lib/free-ports.js" 4)
"${AS[@]}" "$PGBIN/initdb" -D "$DATA" -U pgbus --auth=trust -E UTF8 --no-sync >"$WORK/initdb.log" 2>&1 ||
  { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
cat >>"$DATA/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $PGPORT
fsync = off
shared_preload_libraries = 'pgbus_stream'
pgbus_stream.port = $SSE_PORT
pgbus_stream.listen_addresses = '127.0.0.1'
pgbus_stream.cors_origins = 'http://127.0.0.1:$PAGE_PORT'
pgbus_stream.heartbeat_interval = 1
pgbus_stream.signing_secret = 'browser-signing-secret'
pgbus_stream.secret_key_base = '$SKB'
pgbus_stream.jwt_secret = 'browser-jwt-secret'
pgbus_stream.token_cookie = 'pgbus_token'
CONF
"${AS[@]}" "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/postgres.log" -w -t 60 start >/dev/null ||
  { tail -20 "$WORK/postgres.log" >&2; die "the cluster did not start"; }
psql -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PGPORT" -U pgbus -d postgres >/dev/null <<'SQL' || die "setup SQL failed"
CREATE EXTENSION pgbus_stream;
SELECT pgbus_stream.create_stream('chat', public => true);
SELECT pgbus_stream.create_stream('contract', public => true);
SELECT pgbus_stream.create_stream('reconnect', public => true);
SELECT pgbus_stream.create_stream('firstdrop', public => true);
SELECT pgbus_stream.create_stream('auth_signed');
SELECT pgbus_stream.create_stream('auth_cookie');
SELECT pgbus_stream.create_stream('ai_chat_3a4f9c21b7d20e18_messages');
SQL
say "cluster $DATA (socket $WORK:$PGPORT), worker http://127.0.0.1:$SSE_PORT, pages http://127.0.0.1:$PAGE_PORT and http://localhost:$OTHER_PORT"

export PGB_PGHOST="$WORK" PGB_PGPORT="$PGPORT" PGB_PGUSER=pgbus PGB_PGDATABASE=postgres \
       PGB_SSE_PORT="$SSE_PORT" PGB_PAGE_PORT="$PAGE_PORT" PGB_OTHER_PORT="$OTHER_PORT" \
       PGB_OUTPUT="$OUT" PGB_CHROMIUM="$CHROMIUM" \
       PGB_PGDATA="$DATA" PGB_PGBIN="$PGBIN" PGB_PGLOG="$WORK/postgres.log" PGB_PG_AS="${AS[*]}"
# In the background so that a signal to this script is handled at once (the
# trap stops the tests, then the cluster).
(cd "$HERE" && exec timeout --kill-after=10 "${TEST_TIMEOUT:-900}" node run-tests.js "$@") &
TEST_PID=$!
set +e
wait "$TEST_PID"
rc=$?
TEST_PID=
set -e
[ $rc = 124 ] && echo "run.sh: the test run timed out" >&2
say "screenshots and postgres.log in $OUT"
exit $rc
