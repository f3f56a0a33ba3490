#!/usr/bin/env bash
# A live stream's latency while another stream's queue table is locked.
#
#   PG_CONFIG=... bench/locked_table.sh [--rounds N] [--seconds S] [--rate R] [--conns C]
#
# One worker, two streams. Each round measures the live stream `live` twice,
# interleaved: alone, then while a session holds ACCESS EXCLUSIVE on the
# archive of `locked` (which the worker reads with its queue) and a row too
# large for the ring waits there to be read. Prints each run's p50/p99
# commit-to-receive latency, the medians and their ratio.
# Needs pgbus_stream installed (make install) and jq.
set -euo pipefail
ROUNDS=3 SECS=8 RATE=200 CONNS=50
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECS=$2; shift 2 ;;
  --rate) RATE=$2; shift 2 ;;
  --conns) CONNS=$2; shift 2 ;;
  *) echo "usage: $0 [--rounds N] [--seconds S] [--rate R] [--conns C]" >&2; exit 2 ;;
  esac
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 20 ] && [ "$SECS" -ge 1 ] && [ "$SECS" -le 60 ] &&
  [ "$RATE" -ge 1 ] && [ "$RATE" -le 5000 ] && [ "$CONNS" -ge 1 ] && [ "$CONNS" -le 1000 ] ||
  { echo "rounds 1..20, seconds 1..60, rate 1..5000, conns 1..1000" >&2; exit 2; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
make -s -C "$HERE/bench" PG_CONFIG="$PG_CONFIG" >/dev/null
. "$HERE/bench/lib/scratch.sh"
scratch_dir locked
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
HTTPPORT=$((PGPORT + 1))
scratch_node "$TMP/data" "$PGPORT" "$HTTPPORT"
cat >>"$TMP/data/postgresql.conf" <<CONF
pgbus_stream.workers = 1
fsync = off
max_connections = 50
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
DBUSER=$(as_pg id -un)
PSQL=("$BIN/psql" -X -q -At -h "$TMP" -p "$PGPORT" -d postgres -v ON_ERROR_STOP=1)
as_pg "${PSQL[@]}" -c 'CREATE EXTENSION pgbus_stream' \
  -c "SELECT pgbus_stream.create_stream('live', public => true)" \
  -c "SELECT pgbus_stream.create_stream('locked', public => true)" >/dev/null
archive=$(as_pg "${PSQL[@]}" -c "SELECT format('%I.a_%s', queue_schema, substr(queue_table, 3)) FROM pgbus_stream.streams WHERE name = 'locked'")
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' -m 0.3 "http://127.0.0.1:$HTTPPORT/streams/live" 2>/dev/null)" = 000 ] || break
  sleep 0.1
done
# A reader on the locked stream, so the worker must read its rows.
curl -sN "http://127.0.0.1:$HTTPPORT/streams/locked" >/dev/null &
BG+=($!)
run() { # label -> prints "p50 p99"
  rm -f "$TMP/ready" "$TMP/expect"
  "$HERE/bench/bin/sse_load" --port "$HTTPPORT" --path /streams/live --conns "$CONNS" --warmup 1 \
    --duration $((SECS + 10)) --drain 5 --ready-file "$TMP/ready" --expect-file "$TMP/expect" --label "$1" \
    >"$TMP/$1.json" 2>"$TMP/$1.err" &
  local pid=$!
  for _ in $(seq 1 300); do [ -f "$TMP/ready" ] && break; sleep 0.1; done
  "$HERE/bench/bin/publisher" --target pgbus --conninfo "host=$TMP port=$PGPORT dbname=postgres user=$DBUSER" \
    --stream live --rate "$RATE" --duration "$SECS" --conns 4 --expect-out "$TMP/expect" --label pub \
    >"$TMP/pub.json" 2>"$TMP/pub.err" || { cat "$TMP/pub.err" >&2; exit 1; }
  wait "$pid" || true
  local miss dups
  miss=$(jq '.loss.missing_total' "$TMP/$1.json") dups=$(jq '.loss.duplicates_total' "$TMP/$1.json")
  [ "$miss" = 0 ] && [ "$dups" = 0 ] || echo "$1: $miss missing, $dups duplicates" >&2
  echo "$(jq '.latency_us.p50' "$TMP/$1.json") $(jq '.latency_us.p99' "$TMP/$1.json")"
}
echo "one worker; $CONNS subscribers on live; $RATE msg/s x ${SECS}s; $ROUNDS rounds"
printf '%-6s %14s %14s %14s %14s\n' round p50_alone p99_alone p50_locked p99_locked
A=() L=()
for r in $(seq 1 "$ROUNDS"); do
  read -r a50 a99 < <(run alone)
  # Hold the lock for the whole run, with a large row waiting behind it.
  as_pg "${PSQL[@]}" -c "BEGIN" -c "LOCK TABLE $archive IN ACCESS EXCLUSIVE MODE" \
    -c "SELECT pg_sleep($((SECS + 20)))" >/dev/null 2>&1 &
  lockpid=$!
  BG+=($lockpid)
  sleep 0.5
  as_pg "${PSQL[@]}" -c "SELECT pgbus_stream.broadcast('locked', repeat('x', 20000))" >/dev/null
  read -r l50 l99 < <(run locked)
  kill "$lockpid" 2>/dev/null || true
  as_pg "${PSQL[@]}" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'" >/dev/null
  A+=("$a99") L+=("$l99")
  printf '%-6s %12sus %12sus %12sus %12sus\n' "$r" "$a50" "$a99" "$l50" "$l99"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ma=$(median "${A[@]}") ml=$(median "${L[@]}")
echo "median p99: alone ${ma}us, beside a locked table ${ml}us, ratio $(echo "$ml / $ma" | bc -l | xargs printf '%.2f')"
