#!/usr/bin/env bash
# A fast shutdown that arrives during crash recovery: does the postmaster end?
# (issue 28, "fast shutdown during crash recovery left the postmaster up")
#
#   PG_CONFIG=... bench/shutdown_in_recovery.sh [--attempts N] [--cycles N] [--without-library]
#
# Each attempt, on a fresh node (fsync on, no checkpoint during the attempt
# so that crash recovery has the whole churn to redo):
#   1. stream churn: CYCLES create_stream/drop_stream pairs (with
#      --without-library: the same number of CREATE/DROP of a PGMQ-layout
#      table, sequence and index, and pgbus_stream is not preloaded);
#   2. a reload that changes pgbus_stream.max_connections;
#   3. kill -9 of a backend (a session in pg_sleep): the postmaster ends
#      every process and starts crash recovery;
#   4. pg_ctl stop -m fast, sent at a point that moves with the attempt:
#      attempt 1 at once after the kill, attempt 2 when the new startup
#      process logs "database system was interrupted" (its first line,
#      before it fsyncs the data directory and before redo), attempt 3
#      when it logs "redo starts", then again in that order;
#   5. the postmaster must be gone within 60 s; if not, its children are
#      printed and it is stopped with -m immediate.
# Prints one line per attempt: the stop's phase, seconds from the kill to
# the stop, seconds from the stop until the postmaster was gone (or
# STILL UP), and the log's last lines of the startup process; each
# attempt's log is kept in /tmp/shutdown_in_recovery.{with,without}-library.N.log.
# Bounded: each wait is at most 60 s; an attempt took 1.5 to 3 minutes on
# a loaded 2-core machine (the churn is most of it).
set -euo pipefail
ATTEMPTS=3 CYCLES=1000 WITH_LIB=1
while [ $# -gt 0 ]; do
  case "$1" in
  --attempts) ATTEMPTS=$2; shift 2 ;;
  --cycles) CYCLES=$2; shift 2 ;;
  --without-library) WITH_LIB=0; shift ;;
  *) echo "usage: $0 [--attempts N] [--cycles N] [--without-library]" >&2; exit 2 ;;
  esac
done
[ "$ATTEMPTS" -ge 1 ] && [ "$ATTEMPTS" -le 10 ] || { echo "attempts 1..10" >&2; exit 2; }
[ "$CYCLES" -ge 1 ] && [ "$CYCLES" -le 5000 ] || { echo "cycles 1..5000" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/scratch.sh"
scratch_dir shutdown_in_recovery
failures=0
KIND=with-library; [ "$WITH_LIB" = 1 ] || KIND=without-library

for attempt in $(seq 1 "$ATTEMPTS"); do
  DATA="$TMP/data$attempt" LOG="$TMP/log$attempt"
  PGPORT=$((20000 + RANDOM % 20000))
  scratch_node "$DATA" "$PGPORT" $((PGPORT + 1))
  {
    echo "fsync = on"
    echo "checkpoint_timeout = '1h'"
    echo "max_wal_size = '10GB'"
    echo "restart_after_crash = on"
    [ "$WITH_LIB" = 1 ] || echo "shared_preload_libraries = ''"
  } >>"$DATA/postgresql.conf"
  as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w start >/dev/null
  PSQL=("$BIN/psql" -X -q -At -h "$TMP" -p "$PGPORT" -d postgres -v ON_ERROR_STOP=1)
  if [ "$WITH_LIB" = 1 ]; then
    as_pg "${PSQL[@]}" -c 'CREATE EXTENSION pgbus_stream' >/dev/null
    CHURN="PERFORM pgbus_stream.create_stream('churn_' || i); PERFORM pgbus_stream.drop_stream('churn_' || i);"
  else
    CHURN="EXECUTE format('CREATE TABLE churn_%s (msg_id bigserial PRIMARY KEY, read_ct int NOT NULL DEFAULT 0, enqueued_at timestamptz NOT NULL DEFAULT now(), vt timestamptz NOT NULL DEFAULT now(), message jsonb, headers jsonb)', i); EXECUTE format('CREATE INDEX ON churn_%s (vt)', i); EXECUTE format('DROP TABLE churn_%s', i);"
  fi
  # One transaction per cycle, as an application creating and dropping
  # streams would (a procedure commits after each).
  as_pg "${PSQL[@]}" -c "CREATE PROCEDURE churn(n int) LANGUAGE plpgsql AS \$\$ BEGIN FOR i IN 1..n LOOP $CHURN COMMIT; END LOOP; END \$\$" \
    -c "CALL churn($CYCLES)" >/dev/null
  # The reload: a changed max_connections (the worker's shared memory is
  # sized at start; a reload only records the new value).
  echo "pgbus_stream.max_connections = 777" >>"$DATA/postgresql.conf"
  as_pg "${PSQL[@]}" -c 'SELECT pg_reload_conf()' >/dev/null
  sleep 1
  # A backend to kill.
  as_pg "${PSQL[@]}" -c 'SELECT pg_sleep(600)' >/dev/null 2>&1 &
  BG+=($!)
  victim=
  for _ in $(seq 1 100); do
    victim=$(as_pg "${PSQL[@]}" -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'" 2>/dev/null || true)
    [ -n "$victim" ] && break
    sleep 0.1
  done
  [ -n "$victim" ] || { echo "attempt $attempt: no backend to kill" >&2; exit 1; }
  pm=$(head -1 "$DATA/postmaster.pid")
  lines_before=$(wc -l <"$LOG")
  case $(( (attempt - 1) % 3 )) in
  0) phase="at once" pattern='' ;;
  1) phase="startup began" pattern='database system was interrupted' ;;
  2) phase="redo starts" pattern='redo starts' ;;
  esac
  t_kill=$(date +%s.%N)
  kill -9 "$victim"
  if [ -n "$pattern" ]; then
    for _ in $(seq 1 600); do # 60 s at most
      tail -n +"$((lines_before + 1))" "$LOG" | grep -Eq "$pattern" && break
      sleep 0.1
    done
  fi
  t_stop=$(date +%s.%N)
  as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -W stop >/dev/null 2>&1 || true
  gone=
  for _ in $(seq 1 600); do # 60 s at most
    if ! kill -0 "$pm" 2>/dev/null; then gone=$(date +%s.%N); break; fi
    sleep 0.1
  done
  startup=$(tail -n +"$((lines_before + 1))" "$LOG" | grep -E 'redo|syncing|startup|shut|terminat|recovery|interrupted' | tail -6 |
    sed 's/^[0-9-]* [0-9:.]* [A-Z]* //' | tr '\n' '|')
  if [ -n "$gone" ]; then
    printf 'attempt %d: stop %s, %.2f s after the kill; postmaster gone %.2f s after the stop | %s\n' \
      "$attempt" "$phase" "$(echo "$t_stop - $t_kill" | bc)" "$(echo "$gone - $t_stop" | bc)" "$startup"
  else
    failures=$((failures + 1))
    printf 'attempt %d: stop %s, %.2f s after the kill; postmaster STILL UP 60 s after the stop | %s\n' \
      "$attempt" "$phase" "$(echo "$t_stop - $t_kill" | bc)" "$startup"
    ps -o pid,ppid,stat,args --ppid "$pm" || true
    as_pg "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  cp "$LOG" "/tmp/shutdown_in_recovery.$KIND.$attempt.log" 2>/dev/null || true
done
echo "$failures of $ATTEMPTS attempts left the postmaster up"
[ "$failures" = 0 ]
