#!/usr/bin/env bash
# Extra delivery latency of a hot standby over its primary.
#
#   PG_CONFIG=... bench/standby_latency.sh [--rounds N] [--seconds S] [--rate R] [--conns C]
#                                          [--conf 'setting = value; ...']
#
# Starts a throwaway primary (wal_level replica, synchronous_commit on) and a
# streaming hot standby made from its base backup, both preloading
# pgbus_stream, each with its own SSE port. Each round, C subscribers on the
# primary and C on the standby (bench/bin/sse_load) read one stream while
# bench/bin/publisher broadcasts R msg/s on the primary for S seconds; the
# latency is publisher stamp -> frame read by the client, the same clock on
# both. Prints each round's p50/p99 on both nodes and the medians, and
# checks that nothing was lost or duplicated on either node. --conf adds
# settings to both nodes (e.g. 'wal_writer_delay = 10ms').
# Needs pgbus_stream installed (make install), curl and jq.
set -euo pipefail
ROUNDS=3 SECS=10 RATE=1000 CONNS=50 EXTRA=''
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECS=$2; shift 2 ;;
  --rate) RATE=$2; shift 2 ;;
  --conns) CONNS=$2; shift 2 ;;
  --conf) EXTRA=$2; shift 2 ;;
  *) echo "usage: $0 [--rounds N] [--seconds S] [--rate R] [--conns C] [--conf '...']" >&2; exit 2 ;;
  esac
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 20 ] && [ "$SECS" -ge 1 ] && [ "$SECS" -le 120 ] &&
  [ "$RATE" -ge 1 ] && [ "$RATE" -le 20000 ] && [ "$CONNS" -ge 1 ] && [ "$CONNS" -le 2000 ] ||
  { echo "rounds 1..20, seconds 1..120, rate 1..20000, conns 1..2000" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
make -s -C "$HERE/bench" PG_CONFIG="$PG_CONFIG" >/dev/null
SSE_LOAD=$HERE/bench/bin/sse_load
PUBLISHER=$HERE/bench/bin/publisher
. "$HERE/bench/lib/scratch.sh"
scratch_dir standby_latency
PPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
SPORT=$((PPORT + 1)) PHTTP=$((PPORT + 2)) SHTTP=$((PPORT + 3))
scratch_node "$TMP/primary" "$PPORT" "$PHTTP"
cat >>"$TMP/primary/postgresql.conf" <<CONF
wal_level = replica
max_wal_senders = 4
hot_standby = on
max_connections = 50
$(printf '%s\n' "$EXTRA" | tr ';' '\n')
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/primary" -l "$TMP/primary.log" -w start >/dev/null
DBUSER=$(as_pg id -un)
PSQL=("$BIN/psql" -X -q -At -h "$TMP" -p "$PPORT" -d postgres -v ON_ERROR_STOP=1)
as_pg "${PSQL[@]}" -c 'CREATE EXTENSION pgbus_stream' \
  -c "SELECT pgbus_stream.create_stream('bench', public => true)" >/dev/null
NODES=("$TMP/standby" "${NODES[@]}")
as_pg "$BIN/pg_basebackup" -D "$TMP/standby" -h "$TMP" -p "$PPORT" -R --checkpoint fast >/dev/null
cat >>"$TMP/standby/postgresql.conf" <<CONF
port = $SPORT
pgbus_stream.port = $SHTTP
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/standby" -l "$TMP/standby.log" -w start >/dev/null
for port in $PHTTP $SHTTP; do
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/streams/bench" -m 0.3 -o /dev/null 2>/dev/null && break
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 0.3 "http://127.0.0.1:$port/streams/bench" 2>/dev/null)" = 000 ] || break
    sleep 0.1
  done
done
[ "$(as_pg "$BIN/psql" -X -At -h "$TMP" -p "$SPORT" -d postgres -c 'SELECT pg_is_in_recovery()')" = t ] ||
  { echo "the standby is not in recovery" >&2; exit 1; }
echo "primary :$PHTTP, standby :$SHTTP; $CONNS subscribers each; $RATE msg/s x ${SECS}s; $ROUNDS rounds${EXTRA:+; $EXTRA}"
printf '%-6s %12s %12s %12s %12s %12s\n' round p50_primary p99_primary p50_standby p99_standby p99_extra
P99P=() P99S=() BAD=0
for r in $(seq 1 "$ROUNDS"); do
  rm -f "$TMP"/ready.* "$TMP/expect"
  for node in primary standby; do
    port=$PHTTP; [ $node = standby ] && port=$SHTTP
    "$SSE_LOAD" --port "$port" --path /streams/bench --conns "$CONNS" --warmup 1 --duration $((SECS + 10)) \
      --drain 5 --ready-file "$TMP/ready.$node" --expect-file "$TMP/expect" --label "$node" \
      >"$TMP/$node.json" 2>"$TMP/$node.err" &
    BG+=($!)
  done
  for _ in $(seq 1 300); do [ -f "$TMP/ready.primary" ] && [ -f "$TMP/ready.standby" ] && break; sleep 0.1; done
  "$PUBLISHER" --target pgbus --conninfo "host=$TMP port=$PPORT dbname=postgres user=$DBUSER" \
    --stream bench --rate "$RATE" --duration "$SECS" --conns 4 --expect-out "$TMP/expect" --label pub \
    >"$TMP/pub.json" 2>"$TMP/pub.err" || { cat "$TMP/pub.err" >&2; exit 1; }
  wait "${BG[@]}" || true
  BG=()
  row=()
  for node in primary standby; do
    j=$TMP/$node.json
    miss=$(jq '.loss.missing_total' "$j") dups=$(jq '.loss.duplicates_total' "$j")
    if [ "$miss" != 0 ] || [ "$dups" != 0 ]; then
      echo "round $r $node: $miss missing, $dups duplicates" >&2
      BAD=1
    fi
    row+=("$(jq '.latency_us.p50' "$j")" "$(jq '.latency_us.p99' "$j")")
  done
  P99P+=("${row[1]}") P99S+=("${row[3]}")
  printf '%-6s %10sus %10sus %10sus %10sus %10sus\n' "$r" "${row[0]}" "${row[1]}" "${row[2]}" "${row[3]}" \
    "$((${row[3]%.*} - ${row[1]%.*}))"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${P99P[@]}") ms=$(median "${P99S[@]}")
echo "median p99: primary ${mp}us, standby ${ms}us, standby extra $((${ms%.*} - ${mp%.*}))us"
[ "$BAD" = 0 ] || { echo "messages were lost or duplicated (see above)" >&2; exit 1; }
