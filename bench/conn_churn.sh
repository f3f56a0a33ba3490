#!/usr/bin/env bash
# The worker's CPU for a wave of connections coming and going: N
# connections opened to one worker (bench/bin/sse_load, B handshakes in
# flight at once), held a second, then closed at R per second. Reports the worker process's CPU seconds
# (utime + stime, /proc/PID/stat) during the connect phase (from the start
# of the client until connections() lists all N) and during the close phase
# (from then, the second held included, until connections() is empty and the worker's CPU stood
# still for a second), per round and the medians over the rounds.
#
#   PG_CONFIG=... bench/conn_churn.sh [--conns N] [--rounds K] [--ramp-batch B] [--close-rate R]
#
# PERF_EVENTS (a perf event, e.g. a uprobe on http::Server::tick(), once
# per turn of the worker's loop): counted in the worker over each round,
# reported as perf_count.
#
# One process holds at most the hard open files limit (20 000 here);
# sse_load raises its soft limit to it. Needs pgbus_stream installed
# (make install) and jq.
set -euo pipefail
CONNS=5000 ROUNDS=3 BATCH=16 RATE=1000
while [ $# -gt 0 ]; do
  case "$1" in
  --conns) CONNS=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --ramp-batch) BATCH=$2; shift 2 ;;
  --close-rate) RATE=$2; shift 2 ;;
  *) echo "usage: $0 [--conns N] [--rounds K] [--ramp-batch B] [--close-rate R]" >&2; exit 2 ;;
  esac
done
[ "$CONNS" -ge 1 ] && [ "$CONNS" -le 18000 ] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 10 ] &&
  [ "$BATCH" -ge 1 ] && [ "$BATCH" -le 256 ] && [ "$RATE" -ge 100 ] && [ "$RATE" -le 100000 ] ||
  { echo "conns 1..18000, rounds 1..10, ramp-batch 1..256, close-rate 100..100000" >&2; exit 2; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
make -s -C "$HERE/bench" PG_CONFIG="$PG_CONFIG" >/dev/null
. "$HERE/bench/lib/scratch.sh"
scratch_dir churn
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
HTTPPORT=$((PGPORT + 1))
scratch_node "$TMP/data" "$PGPORT" "$HTTPPORT"
cat >>"$TMP/data/postgresql.conf" <<CONF
pgbus_stream.workers = 1
pgbus_stream.max_connections = $((CONNS + 100))
fsync = off
max_connections = 20
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
psql_q() { as_pg "$BIN/psql" -XAtq -v ON_ERROR_STOP=1 -h "$TMP" -p "$PGPORT" -d postgres "$@"; }
psql_q -c 'CREATE EXTENSION pgbus_stream'
psql_q -c "SELECT pgbus_stream.create_stream('churn', public => true)" >/dev/null
for _ in $(seq 50); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTPPORT/streams/churn" -m 0.3 || true)" = 200 ] && break
  sleep 0.2
done
PID=$(psql_q -c "SELECT pid FROM pgbus_stream.workers() WHERE worker = 0")
[ -n "$PID" ] || { echo "no worker" >&2; exit 1; }
TCK=$(getconf CLK_TCK)
cpu() { awk -v t="$TCK" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$PID/stat"; }
rows() { psql_q -c 'SELECT count(*) FROM pgbus_stream.connections()'; }
wait_rows() { # want timeout_s
  local deadline=$((SECONDS + $2))
  while [ "$(rows)" != "$1" ]; do
    [ $SECONDS -lt $deadline ] || { echo "connections() did not reach $1 rows" >&2; return 1; }
    sleep 0.2
  done
}
wait_still() { # until the worker's CPU stands still for a second (60 s at most)
  local a b deadline=$((SECONDS + 60))
  a=$(cpu)
  while [ $SECONDS -lt $deadline ]; do
    sleep 1
    b=$(cpu)
    [ "$a" = "$b" ] && return 0
    a=$b
  done
}
SRCS=127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8
: >"$TMP/rounds.jsonl"
for round in $(seq "$ROUNDS"); do
  wait_still
  ready=$TMP/ready.$round
  c0=$(cpu)
  perf_pid=""
  if [ -n "${PERF_EVENTS:-}" ]; then
    perf stat -x, -e "$PERF_EVENTS" -p "$PID" -o "$TMP/perf.$round" &
    perf_pid=$!
    BG+=("$perf_pid")
  fi
  "$HERE/bench/bin/sse_load" --port "$HTTPPORT" --path /streams/churn --conns "$CONNS" \
    --src-addrs "$SRCS" --ready-event pgbus:connected --ready-file "$ready" --warmup 0 \
    --ramp-batch "$BATCH" --ramp-timeout 300 --duration 1 --close-rate "$RATE" \
    >/dev/null 2>"$TMP/client.$round.log" &
  cpid=$!
  BG+=("$cpid")
  for _ in $(seq 3000); do [ -f "$ready" ] && break; sleep 0.1; done
  [ -f "$ready" ] || { echo "round $round: the connections did not come up" >&2; exit 1; }
  wait_rows "$CONNS" 60
  c1=$(cpu)
  wait "$cpid" || { echo "round $round: the client failed" >&2; exit 1; }
  wait_rows 0 120
  wait_still
  c2=$(cpu)
  count=null
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null
    wait "$perf_pid" 2>/dev/null || true
    count=$(awk -F, '!/^#/ && NF > 2 { print $1; exit }' "$TMP/perf.$round")
  fi
  jq -nc --argjson r "$round" --argjson n "$CONNS" --argjson p "${count:-null}" --argjson c "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')" \
    --argjson d "$(awk -v a="$c1" -v b="$c2" 'BEGIN { printf "%.2f", b - a }')" \
    '{round: $r, conns: $n, connect_cpu_s: $c, close_cpu_s: $d, perf_count: $p}' | tee -a "$TMP/rounds.jsonl"
done
jq -sc '{conns: .[0].conns, rounds: length,
  connect_cpu_s_median: (map(.connect_cpu_s) | sort | .[(length - 1) / 2 | floor]),
  close_cpu_s_median: (map(.close_cpu_s) | sort | .[(length - 1) / 2 | floor])}' "$TMP/rounds.jsonl"
