#!/usr/bin/env bash
# Producer cost of queues pgbus_stream captures but nobody watches (the pgbus
# gem's job queues share its stream prefix), and of the gem's NOTIFY trigger.
#
#   PG_CONFIG=... bench/unwatched_producer.sh [--rounds N] [--seconds S] [--clients C]
#
# Starts a throwaway cluster (fsync and synchronous_commit off, so that the
# figures are CPU cost, not WAL flushes), loads test/lib/pgmq_fixture.sql and
# runs pgbench with one statement per transaction, the variants interleaved
# round by round; prints each variant's median tps and the overhead against
# its baseline:
#   insert_plain      INSERT into pgmq.q_jobs_plain (not matched by auto_attach)
#   insert_unwatched  INSERT into pgmq.q_pgbus_jobs (auto-attached, no subscriber)
#   send_plain        SELECT pgmq.send('jobs_plain', ...)
#   send_unwatched    SELECT pgmq.send('pgbus_jobs', ...)
#   send_watched      SELECT pgmq.send('pgbus_chat', ...) with one SSE subscriber
#   send_gem_notify   SELECT pgmq.send('pgbus_gem', ...), watched too, with PGMQ's
#                     NOTIFY trigger (throttle 0), as the gem creates stream
#                     queues unless listen_notify is off
# An auto-attached queue gets its capture triggers at its first subscription,
# so the unwatched variants measure what a job queue costs its producers.
# Needs pgbus_stream installed (make install) and curl.
set -euo pipefail
ROUNDS=5 SECONDS_PER_RUN=8 CLIENTS=8
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
  --clients) CLIENTS=$2; shift 2 ;;
  *) echo "usage: $0 [--rounds N] [--seconds S] [--clients C]" >&2; exit 2 ;;
  esac
done
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] && [ "$SECONDS_PER_RUN" -le 120 ] || { echo "rounds 1..50, seconds <= 120" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/bench/lib/scratch.sh"
scratch_dir unwatched
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
HTTPPORT=$((PGPORT + 1))
scratch_node "$TMP/data" "$PGPORT" "$HTTPPORT"
cat >>"$TMP/data/postgresql.conf" <<CONF
fsync = off
synchronous_commit = off
max_connections = 50
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
psql() { as_pg "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$TMP" -p "$PGPORT" -d postgres "$@"; }
cp "$HERE/test/lib/pgmq_fixture.sql" "$TMP/" && chmod a+r "$TMP/pgmq_fixture.sql"
psql -f "$TMP/pgmq_fixture.sql"
psql -c "CREATE EXTENSION pgbus_stream" \
     -c "SELECT pgmq.create(q) FROM unnest(ARRAY['jobs_plain','pgbus_jobs','pgbus_chat','pgbus_gem']) q" \
     -c "SELECT pgmq.enable_notify_insert('pgbus_gem', 0)"
psql -At -c "SELECT string_agg(name || '<-' || queue_name, ' ') FROM pgbus_stream.streams"
curl -sN "http://127.0.0.1:$HTTPPORT/streams/chat" >/dev/null &
BG+=($!)
curl -sN "http://127.0.0.1:$HTTPPORT/streams/gem" >/dev/null &
BG+=($!)
sleep 1
psql -At -c "SELECT 'hooked: ' || string_agg(name || '=' || hooked, ' ' ORDER BY name) FROM pgbus_stream.streams"
MSG='{"html":"<turbo-stream action=\"append\" target=\"jobs\"><template><p>job 42</p></template></turbo-stream>"}'
variants=(insert_plain insert_unwatched send_plain send_unwatched send_watched send_gem_notify)
stmt() {
  case "$1" in
  insert_plain) echo "INSERT INTO pgmq.q_jobs_plain (vt, message) VALUES (clock_timestamp(), '$MSG');" ;;
  insert_unwatched) echo "INSERT INTO pgmq.q_pgbus_jobs (vt, message) VALUES (clock_timestamp(), '$MSG');" ;;
  send_plain) echo "SELECT pgmq.send('jobs_plain', '$MSG');" ;;
  send_unwatched) echo "SELECT pgmq.send('pgbus_jobs', '$MSG');" ;;
  send_watched) echo "SELECT pgmq.send('pgbus_chat', '$MSG');" ;;
  send_gem_notify) echo "SELECT pgmq.send('pgbus_gem', '$MSG');" ;;
  esac
}
for v in "${variants[@]}"; do stmt "$v" >"$TMP/$v.sql"; done
chmod a+r "$TMP"/*.sql
# Backend CPU per insert: one session commits N single-row transactions in a
# procedure; utime+stime of its backend from /proc, before and after.
# Less sensitive to other load on the machine than throughput.
psql -c "CREATE PROCEDURE bench_insert(q text, n int) LANGUAGE plpgsql AS \$\$
BEGIN
  FOR i IN 1..n LOOP
    EXECUTE format('INSERT INTO pgmq.%I (vt, message) VALUES (clock_timestamp(), \$1)', q) USING '$MSG'::jsonb;
    COMMIT;
  END LOOP;
END \$\$"
TICK=$(getconf CLK_TCK)
psql -c "CREATE FUNCTION bench_cpu_ticks() RETURNS bigint LANGUAGE sql AS \$\$
  SELECT split_part(st, ' ', 14)::bigint + split_part(st, ' ', 15)::bigint
    FROM pg_read_file('/proc/self/stat') st \$\$"
cpu_us_per_insert() { # queue table, inserts
  psql -At <<SQL
SELECT bench_cpu_ticks() AS t0 \gset
CALL bench_insert('$1', $2);
SELECT round((bench_cpu_ticks() - :t0) * 1e6 / $TICK / $2, 2);
SQL
}
CPU_N=${CPU_N:-40000}
declare -A cpu
for r in $(seq 1 "$ROUNDS"); do
  for q in q_jobs_plain q_pgbus_jobs; do
    c=$(cpu_us_per_insert "$q" "$CPU_N")
    cpu[$q]="${cpu[$q]:-} $c"
    echo "round $r cpu $q $c us/insert"
  done
done
declare -A results
for r in $(seq 1 "$ROUNDS"); do
  for v in "${variants[@]}"; do
    tps=$(as_pg "$BIN/pgbench" -n -h "$TMP" -p "$PGPORT" -c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" \
      -f "$TMP/$v.sql" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    [ -n "$tps" ] || { echo "pgbench failed for $v" >&2; tail -5 "$TMP/log" >&2; exit 1; }
    results[$v]="${results[$v]:-} $tps"
    echo "round $r $v $tps"
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A med
echo
echo "clients=$CLIENTS rounds=$ROUNDS seconds=$SECONDS_PER_RUN (median tps)"
for v in "${variants[@]}"; do med[$v]=$(echo "${results[$v]}" | median); printf '%-18s %10.0f   [%s ]\n' "$v" "${med[$v]}" "${results[$v]}"; done
# Overheads are medians of per-round ratios (the variants of a round ran
# back to back, so a slow spell of the shared machine cancels out).
overhead() {
  paste -d' ' <(echo "${results[$1]}" | tr ' ' '\n' | sed '/^$/d') \
              <(echo "${results[$2]}" | tr ' ' '\n' | sed '/^$/d') |
    awk '{print ($1 / $2 - 1) * 100}' | median | awk '{printf "%+.1f%%", $1}'
}
results[cpu_plain]=${cpu[q_jobs_plain]}
results[cpu_unwatched]=${cpu[q_pgbus_jobs]}
echo "backend CPU per committed INSERT (median us): plain $(echo "${cpu[q_jobs_plain]}" | median), unwatched $(echo "${cpu[q_pgbus_jobs]}" | median)"
echo "cost of capture, unwatched, backend CPU: $(overhead cpu_unwatched cpu_plain) CPU per insert"
echo "cost of capture, unwatched, INSERT:      $(overhead insert_plain insert_unwatched) time per insert"
echo "cost of capture, unwatched, pgmq.send:   $(overhead send_plain send_unwatched) time per send"
echo "cost of capture, watched, pgmq.send:     $(overhead send_plain send_watched) time per send"
echo "gem NOTIFY trigger + capture vs capture: $(overhead send_watched send_gem_notify) time per send (both watched)"
