#!/usr/bin/env bash
# A live subscriber's latency alone and during a flood of requests for
# unknown stream names (issue "Cheap refusals": the flood's p99 within 2x of
# the baseline).
#
#   PG_CONFIG=... bench/unknown_flood.sh [--rounds N] [--seconds S] [--rate R] [--flood F] [--kind anon|jwt]
#
# Starts a throwaway cluster (one worker, 1 000 private streams besides the
# public stream 'live'), one SSE subscriber on 'live' (bench/bin/sse_load)
# and a publisher broadcasting R messages/s into it (bench/bin/publisher).
# Each round runs two variants, in alternating order: `baseline` (nothing
# else) and `flood` (bench/lib/unknown_flood.pl sends F requests/s for
# made-up names: `anon` without a credential, `jwt` with a token that does
# not cover them, both refused). Prints per variant the median over the
# rounds of the subscriber's p50/p99 commit-to-receive latency, the ratio of
# the flood's p99 to the baseline's, and the worker's catalog queries per
# run (workers().catalog_reads, where the build has it).
# Needs pgbus_stream installed (make install), jq and perl.
set -euo pipefail
ROUNDS=3 SECONDS_PER_RUN=10 RATE=100 FLOOD=300 KIND=anon
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
  --rate) RATE=$2; shift 2 ;;
  --flood) FLOOD=$2; shift 2 ;;
  --kind) KIND=$2; shift 2 ;;
  *) echo "usage: $0 [--rounds N] [--seconds S] [--rate R] [--flood F] [--kind anon|jwt]" >&2; exit 2 ;;
  esac
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 20 ] && [ "$SECONDS_PER_RUN" -le 60 ] && [ "$FLOOD" -le 2000 ] &&
  [ "$RATE" -le 2000 ] || { echo "rounds 1..20, seconds <= 60, rate <= 2000, flood <= 2000" >&2; exit 2; }
case "$KIND" in anon | jwt) ;; *) echo "--kind anon or jwt" >&2; exit 2 ;; esac
command -v jq >/dev/null || { echo "needs jq" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
make -s -C "$HERE/bench" PG_CONFIG="$PG_CONFIG" >/dev/null
. "$HERE/bench/lib/scratch.sh"
scratch_dir flood
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
HTTPPORT=$((PGPORT + 1))
JWT_SECRET=flood-bench-secret
scratch_node "$TMP/data" "$PGPORT" "$HTTPPORT"
cat >>"$TMP/data/postgresql.conf" <<CONF
pgbus_stream.jwt_secret = '$JWT_SECRET'
fsync = off
synchronous_commit = off
max_connections = 50
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
psql_q() { as_pg "$BIN/psql" -XAtq -v ON_ERROR_STOP=1 -h "$TMP" -p "$PGPORT" -d postgres "$@"; }
psql_q -c 'CREATE EXTENSION pgbus_stream'
psql_q -c "SELECT pgbus_stream.create_stream('live', public => true)" >/dev/null
for b in $(seq 0 9); do # 100 streams per transaction: each takes several locks
  psql_q -c "SELECT count(pgbus_stream.create_stream('private_' || i)) FROM generate_series($((b * 100 + 1)), $((b * 100 + 100))) i" >/dev/null
done
for _ in $(seq 50); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTPPORT/streams/live" -m 0.3 || true)" = 200 ] && break
  sleep 0.2
done
TOKEN=$(psql_q -c "SELECT pgbus_stream.sign_token(ARRAY['room_*'], '1 hour')")
if [ "$(id -u)" = 0 ]; then DBUSER=pgbus; else DBUSER=$(id -un); fi # initdb's superuser
CONNINFO="host=$TMP port=$PGPORT dbname=postgres user=$DBUSER"
reads() { psql_q -c "SELECT coalesce(sum((to_jsonb(w) ->> 'catalog_reads')::bigint), -1) FROM pgbus_stream.workers() w"; }

run() { # variant round -> one JSON line
  local variant=$1 round=$2
  local ready=$TMP/ready.$variant.$round cpid fpid="" r0 r1
  rm -f "$ready"
  "$HERE/bench/bin/sse_load" --host 127.0.0.1 --port "$HTTPPORT" --path /streams/live --conns 1 \
    --warmup 1 --duration $((SECONDS_PER_RUN + 1)) --ready-file "$ready" --label "$variant" \
    >"$TMP/client.json" 2>"$TMP/client.log" &
  cpid=$!
  BG+=("$cpid")
  for _ in $(seq 100); do [ -f "$ready" ] && break; sleep 0.1; done
  r0=$(reads)
  if [ "$variant" = flood ]; then
    perl "$HERE/bench/lib/unknown_flood.pl" --port "$HTTPPORT" --rate "$FLOOD" \
      --seconds $((SECONDS_PER_RUN + 2)) --kind "$KIND" --token "$TOKEN" >"$TMP/flood.json" 2>"$TMP/flood.log" &
    fpid=$!
    BG+=("$fpid")
  fi
  "$HERE/bench/bin/publisher" --target pgbus --conninfo "$CONNINFO" --stream live --rate "$RATE" \
    --duration "$SECONDS_PER_RUN" >"$TMP/publisher.json" 2>"$TMP/publisher.log" ||
    { cat "$TMP/publisher.log" >&2; exit 1; }
  wait "$cpid" || true
  [ -n "$fpid" ] && { wait "$fpid" || true; }
  r1=$(reads)
  local refused=0
  [ -n "$fpid" ] && refused=$(jq -r '.answered // 0' "$TMP/flood.json" 2>/dev/null || echo 0)
  local nreads=null
  [ "$r0" -ge 0 ] && nreads=$((r1 - r0)) # -1: this build does not count them
  jq -c --arg v "$variant" --argjson r "$round" --argjson reads "$nreads" --argjson refused "$refused" \
    '{variant: $v, round: $r, p50_us: .latency_us.p50, p99_us: .latency_us.p99, events: .latency_us.count,
      catalog_reads: $reads, flood_answered: $refused}' "$TMP/client.json"
}

RESULTS=$TMP/results.jsonl
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="baseline flood"; else order="flood baseline"; fi
  for v in $order; do
    run "$v" "$round" | tee -a "$RESULTS"
  done
done
echo "--- medians over $ROUNDS rounds ($RATE msg/s to one subscriber; flood: $FLOOD $KIND requests/s for made-up names)"
jq -s -r '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  (map(select(.variant == "baseline")) | {p50: (map(.p50_us) | median), p99: (map(.p99_us) | median)}) as $b
  | (map(select(.variant == "flood")) | {p50: (map(.p50_us) | median), p99: (map(.p99_us) | median),
       reads: (map(.catalog_reads) | median), answered: (map(.flood_answered) | median)}) as $f
  | "baseline  p50 \($b.p50) us  p99 \($b.p99) us",
    "flood     p50 \($f.p50) us  p99 \($f.p99) us  (flood requests answered per run: \($f.answered), worker catalog queries per run: \($f.reads))",
    "flood p99 / baseline p99 = \(if $b.p99 > 0 then ($f.p99 / $b.p99 * 100 | round / 100) else "n/a" end)"' "$RESULTS"
