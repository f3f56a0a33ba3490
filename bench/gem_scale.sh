#!/usr/bin/env bash
# The pgbus gem's scale: one PGMQ queue per record, auto-attached.
#
#   PG_CONFIG=... bench/gem_scale.sh [--queues N] [--conns C] [--streams S] [--workers W]
#                                    [--max-streams M]
#
# Starts a throwaway cluster (fsync and synchronous_commit off: the figures
# are CPU and memory, not WAL flushes), loads test/lib/pgmq_fixture.sql and
# measures, printing one "figure: ..." line each:
#   1. catalog: 1 000 queues, CREATE EXTENSION; N - 1 000 more by pgmq.create
#      (the event trigger attaches them); then DROP/CREATE EXTENSION over all N
#   2. wake-up cost: worker CPU per committed pgmq.send into one watched
#      stream, paced so that every send is its own round, with 1 000 and with
#      N streams in the database (it must not grow with N)
#   3. worker memory (VmRSS, RssAnon, PSS summed over the workers), idle
#   4. connect latency: GET to pgbus:connected, 100 streams never subscribed
#      before (the first subscription hooks the queue's triggers), then the
#      same 100 again
#   5. producer backend CPU per committed INSERT: a queue auto_attach does not
#      match, an auto-attached queue nobody watches, a watched one
#   6. C/2 then C SSE connections over S distinct streams (bench/bin/sse_load,
#      several processes): worker memory per stream and per connection, and
#      one pgmq.send into each of 5 streams counted at the clients
# Needs pgbus_stream installed (make install), curl, and bench/bin/sse_load
# (make -C bench). Every step has a time bound; the cluster is removed at exit.
set -euo pipefail
QUEUES=100000 CONNS=20000 STREAMS=10000 WORKERS=4 MAX_STREAMS=16384
while [ $# -gt 0 ]; do
  case "$1" in
  --queues) QUEUES=$2; shift 2 ;;
  --conns) CONNS=$2; shift 2 ;;
  --streams) STREAMS=$2; shift 2 ;;
  --workers) WORKERS=$2; shift 2 ;;
  --max-streams) MAX_STREAMS=$2; shift 2 ;;
  *) echo "usage: $0 [--queues N] [--conns C] [--streams S] [--workers W] [--max-streams M]" >&2; exit 2 ;;
  esac
done
[ "$QUEUES" -ge 2000 ] && [ "$QUEUES" -le 200000 ] && [ "$STREAMS" -le "$QUEUES" ] &&
  [ "$CONNS" -le 40000 ] && [ "$STREAMS" -ge 200 ] ||
  { echo "queues 2000..200000, streams 200..queues (the connect test uses the 100 from streams/2), conns <= 40000" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
SSE_LOAD=$HERE/bench/bin/sse_load
[ -x "$SSE_LOAD" ] || make -C "$HERE/bench" >/dev/null
. "$HERE/bench/lib/scratch.sh"
scratch_dir gem_scale
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
HTTPPORT=$((PGPORT + 1))
scratch_node "$TMP/data" "$PGPORT" "$HTTPPORT"
cat >>"$TMP/data/postgresql.conf" <<CONF
pgbus_stream.workers = $WORKERS
pgbus_stream.max_connections = $((CONNS + 1000))
# one entry per stream watched or written at once (the default, 1 024, is
# below the streams this run watches)
pgbus_stream.max_streams = $MAX_STREAMS
pgbus_stream.heartbeat_interval = 15
fsync = off
synchronous_commit = off
max_connections = 50
max_locks_per_transaction = 4096
shared_buffers = 256MB
CONF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
PG_RUN=()
[ "$(id -u)" = 0 ] && PG_RUN=(runuser -u pgbus --)
tpsql() { # seconds, psql arguments: psql with a time bound
  local t=$1
  shift
  timeout "$t" "${PG_RUN[@]}" "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$TMP" -p "$PGPORT" -d postgres "$@"
}
psql() { tpsql 600 "$@"; }
cp "$HERE/test/lib/pgmq_fixture.sql" "$TMP/" && chmod a+r "$TMP/pgmq_fixture.sql"
psql -f "$TMP/pgmq_fixture.sql"
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc -l; }
fig() { echo "figure: $*"; }
# The gem's queue of record i (stream ai_chat_<i>_messages).
psql -c "CREATE PROCEDURE make_queues(first int, last int) LANGUAGE plpgsql AS \$\$
BEGIN
  FOR i IN first..last LOOP
    PERFORM pgmq.create('pgbus_ai_chat_' || i || '_messages');
    IF i % 200 = 0 THEN COMMIT; END IF;
  END LOOP;
END \$\$" -c "SELECT pgmq.create('jobs_plain')"
workers() { psql -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'"; }
cpu_ticks() { # summed utime + stime of the workers
  local t=0 p
  for p in $(workers); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo $t
}
memory() { # "VmRSS RssAnon Pss" in kB, summed over the workers
  local p r=0 a=0 s=0
  for p in $(workers); do
    r=$((r + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")))
    a=$((a + $(awk '/^RssAnon/ {print $2}' "/proc/$p/status")))
    s=$((s + $(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup")))
  done
  echo "$r $a $s"
}
TICK=$(getconf CLK_TCK)

# ---- 1. catalog -----------------------------------------------------------
t=$(now); tpsql 600 -c "CALL make_queues(0, 999)"; t_plain=$(since "$t")
t=$(now); psql -c "CREATE EXTENSION pgbus_stream"; t_ext1=$(since "$t")
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$HTTPPORT/healthz" && break; sleep 0.1; done
fig "pgmq.create without the extension: $(echo "$t_plain" | awk '{printf "%.2f", $1}') ms per queue (1 000 queues); CREATE EXTENSION over 1 000 queues $(printf '%.2f' "$t_ext1") s"

# ---- 2. wake-up cost ------------------------------------------------------
SENDS=2000
psql -c "CREATE PROCEDURE paced_sends(q text, n int) LANGUAGE plpgsql AS \$\$
BEGIN
  FOR i IN 1..n LOOP
    PERFORM pgmq.send(q, jsonb_build_object('html', 'message ' || i));
    COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
END \$\$"
psql -c "SELECT pgbus_stream.set_public(name, true) FROM pgbus_stream.streams WHERE name = 'ai_chat_1_messages'" >/dev/null
curl -sN "http://127.0.0.1:$HTTPPORT/streams/ai_chat_1_messages" >"$TMP/watch1.out" &
BG+=($!)
sleep 1
wakeup() { # label: worker CPU per paced send, less the same time idle
  local c0 c1 t0 el idle_c
  c0=$(cpu_ticks); t0=$(now)
  tpsql 120 -c "CALL paced_sends('pgbus_ai_chat_1_messages', $SENDS)"
  el=$(since "$t0"); c1=$(cpu_ticks)
  local busy=$((c1 - c0))
  c0=$(cpu_ticks); sleep "$el"; idle_c=$(($(cpu_ticks) - c0))
  fig "wake-up, $1 streams: worker CPU $(echo "($busy - $idle_c) * 1000000 / $TICK / $SENDS" | bc -l | xargs printf '%.1f') us per send ($SENDS sends in $(printf '%.1f' "$el") s; busy $busy ticks, idle $idle_c)"
}
wakeup 1000
got=$(grep -c '^data: message' "$TMP/watch1.out" || true)
fig "the watching client got $got of $SENDS"

# two sessions at once (the machine has two cores)
t=$(now)
MID=$(((QUEUES + 1000) / 2))
tpsql 3600 -c "CALL make_queues(1000, $((MID - 1)))" &
c1=$!
tpsql 3600 -c "CALL make_queues($MID, $((QUEUES - 1)))"
wait $c1
t_hooked=$(since "$t")
fig "pgmq.create with auto-attach, two sessions: $(echo "$t_hooked * 1000 / ($QUEUES - 1000)" | bc -l | xargs printf '%.2f') ms of wall time per queue ($((QUEUES - 1000)) queues in $(printf '%.0f' "$t_hooked") s)"
wakeup "$QUEUES"
got=$(grep -c '^data: message' "$TMP/watch1.out" || true)
fig "the watching client got $got of $((2 * SENDS))"
kill "${BG[0]}" 2>/dev/null || true

t=$(now); psql -c "DROP EXTENSION pgbus_stream CASCADE" 2>/dev/null; t_drop=$(since "$t")
t=$(now); psql -c "CREATE EXTENSION pgbus_stream"; t_ext=$(since "$t")
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$HTTPPORT/healthz" && break; sleep 0.1; done
fig "CREATE EXTENSION over $QUEUES queues: $(printf '%.1f' "$t_ext") s (DROP EXTENSION CASCADE $(printf '%.1f' "$t_drop") s)"
fig "catalog: $(psql -c "SELECT count(*) || ' streams, pgbus_stream.streams ' || pg_size_pretty(pg_total_relation_size('pgbus_stream.streams')) || ', pg_class ' || (SELECT count(*) FROM pg_class) || ' rows, database ' || pg_size_pretty(pg_database_size(current_database())) FROM pgbus_stream.streams")"

# ---- 3. idle memory -------------------------------------------------------
sleep 3
read -r r a s < <(memory)
IDLE_RSS=$r IDLE_ANON=$a IDLE_PSS=$s
fig "idle workers ($WORKERS), $QUEUES streams: VmRSS $((r / 1024)) MB, RssAnon $((a / 1024)) MB, PSS $((s / 1024)) MB (sums)"
fig "shared memory stream entries in use: $(psql -c "SELECT count(*) FROM pgbus_stream._stream_stats()")"

# ---- 4. connect latency ---------------------------------------------------
psql -c "SELECT pgbus_stream.set_public(name, true) FROM pgbus_stream.streams WHERE name ~ '^ai_chat_[0-9]+_messages\$' AND split_part(name, '_', 3)::int < $STREAMS" >/dev/null
connect_ms() { # first index, count: ms from connect to the pgbus:connected frame, one at a time
  perl -MIO::Socket::INET -MTime::HiRes=time -e '
    my ($port, $first, $n) = @ARGV; my @ms;
    for my $i ($first .. $first + $n - 1) {
      my $t0 = time;
      my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port) or die "connect: $!";
      print $s "GET /streams/ai_chat_${i}_messages HTTP/1.1\r\nHost: x\r\n\r\n";
      my $buf = ""; my $deadline = $t0 + 10;
      while (index($buf, "event: pgbus:connected") < 0 && time < $deadline) {
        my $r = ""; vec(my $rin = "", fileno($s), 1) = 1;
        select($rin, undef, undef, 0.5) and sysread($s, $r, 65536) or next; $buf .= $r;
      }
      die "stream $i: no pgbus:connected: " . substr($buf, 0, 200) unless index($buf, "event: pgbus:connected") >= 0;
      push @ms, 1000 * (time - $t0); close $s;
    }
    @ms = sort { $a <=> $b } @ms;
    printf "p50 %.2f ms, p90 %.2f ms, max %.2f ms", $ms[@ms / 2], $ms[int(@ms * 0.9)], $ms[-1];
  ' "$HTTPPORT" "$1" "$2"
}
fig "connect latency, first subscription to a stream (hooks its queue), 100 streams: $(connect_ms $((STREAMS / 2)) 100)"
fig "connect latency, the same 100 streams again: $(connect_ms $((STREAMS / 2)) 100)"

# ---- 5. producer cost -----------------------------------------------------
MSG='{"html":"<turbo-stream action=\"append\" target=\"messages\"><template><p>hello</p></template></turbo-stream>"}'
psql -c "CREATE PROCEDURE bench_insert(q text, n int) LANGUAGE plpgsql AS \$\$
BEGIN
  FOR i IN 1..n LOOP
    EXECUTE format('INSERT INTO pgmq.%I (vt, message) VALUES (clock_timestamp(), \$1)', q) USING '$MSG'::jsonb;
    COMMIT;
  END LOOP;
END \$\$" -c "CREATE FUNCTION bench_cpu_ticks() RETURNS bigint LANGUAGE sql AS \$\$
  SELECT split_part(st, ' ', 14)::bigint + split_part(st, ' ', 15)::bigint FROM pg_read_file('/proc/self/stat') st \$\$"
curl -sN "http://127.0.0.1:$HTTPPORT/streams/ai_chat_7_messages" >/dev/null &
BG+=($!)
sleep 1
N_INS=20000
declare -A cpu
for r in 1 2 3; do
  for q in q_jobs_plain "q_pgbus_ai_chat_$((QUEUES - 1))_messages" q_pgbus_ai_chat_7_messages; do
    c=$(tpsql 300 <<SQL
SELECT bench_cpu_ticks() AS t0 \gset
CALL bench_insert('$q', $N_INS);
SELECT round((bench_cpu_ticks() - :t0) * 1e6 / $TICK / $N_INS, 2);
SQL
)
    cpu[$q]="${cpu[$q]:-} $c"
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fig "producer backend CPU per committed INSERT (median of 3 x $N_INS; all three): plain queue $(echo "${cpu[q_jobs_plain]}" | median) us [${cpu[q_jobs_plain]} ], auto-attached unwatched $(echo "${cpu[q_pgbus_ai_chat_$((QUEUES - 1))_messages]}" | median) us [${cpu[q_pgbus_ai_chat_$((QUEUES - 1))_messages]} ], watched $(echo "${cpu[q_pgbus_ai_chat_7_messages]}" | median) us [${cpu[q_pgbus_ai_chat_7_messages]} ]"
kill "${BG[-1]}" 2>/dev/null || true
sleep 2

# ---- 6. many connections over many streams --------------------------------
ulimit -n 20000 2>/dev/null || true
hold() { # conns: hold them over $STREAMS streams; memory once all are up, and 5 sends counted
  local n=$1 procs=$(( ($1 + 9999) / 10000 )) ready=$TMP/ready.$1 out=$TMP/load.$1.json
  rm -f "$ready"
  read -r r0 a0 s0 < <(memory)
  local t0; t0=$(now)
  timeout 300 "$SSE_LOAD" --port "$HTTPPORT" --path '/streams/ai_chat_{i}_messages' --streams "$STREAMS" \
    --conns "$n" --procs "$procs" --src-addrs 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4 \
    --ready-event pgbus:connected --ready-file "$ready" --ramp-timeout 200 --warmup 0 --duration 12 >"$out" 2>"$TMP/load.$1.err" &
  local lp=$!
  BG+=($lp)
  for _ in $(seq 1 2400); do [ -e "$ready" ] && break; sleep 0.1; done
  local up; up=$(since "$t0")
  sleep 2
  read -r r a s < <(memory)
  echo "$r $a $s" >"$TMP/mem.$1"
  local us; us=$(($(date +%s%N) / 1000))
  for i in 11 $((STREAMS / 5)) $((STREAMS / 3)) $((STREAMS / 2 + 7)) $((STREAMS - 1)); do
    psql -c "SELECT pgmq.send('pgbus_ai_chat_${i}_messages', '{\"t\":$us,\"seq\":1,\"p\":0,\"s\":$i}')" >/dev/null
  done
  wait "$lp" || true
  fig "$n connections over $STREAMS streams ($procs client processes): up in $(printf '%.1f' "$up") s; workers VmRSS $((r0 / 1024)) -> $((r / 1024)) MB, RssAnon $((a0 / 1024)) -> $((a / 1024)) MB, PSS $((s0 / 1024)) -> $((s / 1024)) MB"
  fig "$n connections: client says $(perl -MJSON::PP -e 'local $/; my $j = decode_json(<STDIN>); printf "%d ok, %d failed, %d closed early; %d deliveries of the 5 sends (expected %d), lost %d, dups %d, latency p50 %.1f ms max %.1f ms",
      $j->{connections_ok}, $j->{connections_failed}, $j->{connections_closed_early} // 0, $j->{deliveries}, 5 * $ARGV[0] / $ARGV[1], ($j->{loss}{missing_in_gaps} // 0) + ($j->{loss}{missing_tail} // 0), $j->{loss}{duplicates_total} // 0, ($j->{latency_us}{p50} // 0) / 1000, ($j->{latency_us}{max} // 0) / 1000' "$n" "$STREAMS" <"$out")"
  sleep 3
}
hold $((CONNS / 2))
hold "$CONNS"
read -r r1 a1 s1 <"$TMP/mem.$((CONNS / 2))"
read -r r2 a2 s2 <"$TMP/mem.$CONNS"
per_conn_a=$(echo "($a2 - $a1) / ($CONNS / 2)" | bc -l)
per_conn_s=$(echo "($s2 - $s1) / ($CONNS / 2)" | bc -l)
per_stream_a=$(echo "($a1 - $IDLE_ANON) / $STREAMS - $per_conn_a * ($CONNS / 2) / $STREAMS" | bc -l)
per_stream_s=$(echo "($s1 - $IDLE_PSS) / $STREAMS - $per_conn_s * ($CONNS / 2) / $STREAMS" | bc -l)
fig "memory per connection (second $((CONNS / 2)) on the same streams): RssAnon $(printf '%.1f' "$per_conn_a") kB, PSS $(printf '%.1f' "$per_conn_s") kB"
fig "memory per watched stream (first $((CONNS / 2)) connections less that): RssAnon $(printf '%.1f' "$per_stream_a") kB, PSS $(printf '%.1f' "$per_stream_s") kB"
fig "shared memory stream entries in use: $(psql -c "SELECT count(*) FROM pgbus_stream._stream_stats()")"
grep -E 'WARNING|ERROR|FATAL' "$TMP/log" | grep -v 'canceling' | sort | uniq -c | sort -rn | head -5 | sed 's/^/log: /' || true
