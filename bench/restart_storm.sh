#!/usr/bin/env bash
# A worker restart with N clients connected: how long until every one is
# served again, and the restarted worker's CPU meanwhile.
#
#   PG_CONFIG=... bench/restart_storm.sh [--conns N] [--conf 'setting = value; ...']
#
# Starts a throwaway node (one worker), opens N EventSource-like clients on
# one stream (bench/client/restart_storm.py: each comes back after its
# retry:, with its last id, as a browser does), stops the worker with
# SIGTERM and waits until all are served again (the postmaster restarts the
# worker after a second). Prints the client's JSON line: the time from the
# stop until all were back, statuses other than 200 met, the new worker's
# peak CPU (busiest 0.5 s) and CPU seconds. Needs pgbus_stream installed and
# python3. One worker holds at most about half the open-files hard limit.
set -euo pipefail
CONNS=9000 EXTRA=''
while [ $# -gt 0 ]; do
  case "$1" in
  --conns) CONNS=$2; shift 2 ;;
  --conf) EXTRA=$2; shift 2 ;;
  *) echo "usage: $0 [--conns N] [--conf '...']" >&2; exit 2 ;;
  esac
done
[ "$CONNS" -ge 1 ] && [ "$CONNS" -le 18000 ] || { echo "conns 1..18000" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/scratch.sh"
scratch_dir restart_storm
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
HTTP=$((PGPORT + 1))
scratch_node "$TMP/data" "$PGPORT" "$HTTP"
cat >>"$TMP/data/postgresql.conf" <<CONF
pgbus_stream.max_connections = 20000
$(printf '%s\n' "$EXTRA" | tr ';' '\n')
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
PSQL=("$BIN/psql" -X -q -At -h "$TMP" -p "$PGPORT" -d postgres -v ON_ERROR_STOP=1)
as_pg "${PSQL[@]}" -c 'CREATE EXTENSION pgbus_stream' -c "SELECT pgbus_stream.create_stream('storm', public => true)" >/dev/null
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' -m 0.5 "http://127.0.0.1:$HTTP/healthz" 2>/dev/null)" = 200 ] && break
  sleep 0.1
done
PIDCMD="runuser -u pgbus -- ${PSQL[*]} -c \"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'\""
[ "$(id -u)" = 0 ] || PIDCMD="${PSQL[*]} -c \"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'\""
ON_EXIT+=("cp \"$TMP/log\" /tmp/restart_storm.log 2>/dev/null")
python3 "$HERE/client/restart_storm.py" "$HTTP" /streams/storm "$CONNS" "$PIDCMD"
grep -c 'terminated by signal' "$TMP/log" >/dev/null && { echo "a process crashed:" >&2; grep 'terminated by signal' "$TMP/log" >&2; exit 1; } || true
