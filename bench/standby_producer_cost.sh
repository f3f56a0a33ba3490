#!/usr/bin/env bash
# Producer cost of the WAL records capture writes for standbys (FLOOR and
# COMMIT, written when wal_level is replica or higher).
#
#   PG_CONFIG=... bench/standby_producer_cost.sh --baseline OTHER.so [--rounds N] [--seconds S] [--clients C]
#
# OTHER.so is a build of pgbus_stream without those records (the previous
# version). Starts a throwaway cluster (wal_level replica, synchronous_commit
# off, fsync off: the figures are CPU and WAL volume, not flushes), creates a
# stream and runs pgbench with one INSERT into its queue table per
# transaction, C clients, alternating the installed build and OTHER.so round
# by round (a restart in between). Prints each run's tps, the server's CPU
# time per transaction (the postmaster's own and its reaped children's, from
# /proc: steadier than tps on a shared machine) and WAL bytes per
# transaction, and the medians. The installed pgbus_stream.so is put back on
# exit.
set -euo pipefail
ROUNDS=3 SECS=10 CLIENTS=8 BASELINE=''
while [ $# -gt 0 ]; do
  case "$1" in
  --baseline) BASELINE=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECS=$2; shift 2 ;;
  --clients) CLIENTS=$2; shift 2 ;;
  *) echo "usage: $0 --baseline OTHER.so [--rounds N] [--seconds S] [--clients C]" >&2; exit 2 ;;
  esac
done
[ -f "$BASELINE" ] || { echo "--baseline: a pgbus_stream.so to compare with" >&2; exit 2; }
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 20 ] && [ "$SECS" -ge 1 ] && [ "$SECS" -le 120 ] &&
  [ "$CLIENTS" -ge 1 ] && [ "$CLIENTS" -le 40 ] || { echo "rounds 1..20, seconds 1..120, clients 1..40" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
LIB=$("$PG_CONFIG" --pkglibdir)/pgbus_stream.so
. "$(cd "$(dirname "$0")" && pwd)/lib/scratch.sh"
scratch_dir standby_cost
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
cp "$LIB" "$TMP/current.so"
cp "$BASELINE" "$TMP/baseline.so"
ON_EXIT+=('cp "$TMP/current.so" "$LIB"')
scratch_node "$TMP/data" "$PGPORT" 0
cat >>"$TMP/data/postgresql.conf" <<CONF
wal_level = replica
fsync = off
synchronous_commit = off
max_connections = 50
CONF
PSQL=("$BIN/psql" -X -q -At -h "$TMP" -p "$PGPORT" -d postgres -v ON_ERROR_STOP=1)
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
as_pg "${PSQL[@]}" -c 'CREATE EXTENSION pgbus_stream' -c "SELECT pgbus_stream.create_stream('cost')" >/dev/null
table=$(as_pg "${PSQL[@]}" -c "SELECT format('%I.%I', queue_schema, queue_table) FROM pgbus_stream.streams WHERE name = 'cost'")
echo "INSERT INTO $table (message) VALUES ('{\"html\": \"x\"}');" >"$TMP/insert.sql"
chmod a+r "$TMP/insert.sql"
as_pg "$BIN/pg_ctl" -D "$TMP/data" -w stop >/dev/null
# CPU ticks of the postmaster and every child it has reaped (backends exit
# when pgbench disconnects).
server_ticks() {
  local pid stat
  pid=$(head -1 "$TMP/data/postmaster.pid")
  stat=$(sed 's/^.*) //' "/proc/$pid/stat")
  # shellcheck disable=SC2086
  set -- $stat
  echo $((${12} + ${13} + ${14} + ${15}))
}
HZ=$(getconf CLK_TCK)
declare -A TPS WALB CPU
printf '%-6s %-9s %10s %12s %14s\n' round build tps cpu_us/tx wal_bytes/tx
for r in $(seq 1 "$ROUNDS"); do
  for v in current baseline; do
    cp "$TMP/$v.so" "$LIB"
    as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/log" -w start >/dev/null
    lsn0=$(as_pg "${PSQL[@]}" -c 'SELECT pg_current_wal_insert_lsn()')
    sleep 0.3
    t0=$(server_ticks)
    out=$(as_pg "$BIN/pgbench" -h "$TMP" -p "$PGPORT" -n -c "$CLIENTS" -j 2 -T "$SECS" -f "$TMP/insert.sql" postgres 2>&1)
    sleep 0.5 # the backends are gone and reaped
    t1=$(server_ticks)
    lsn1=$(as_pg "${PSQL[@]}" -c 'SELECT pg_current_wal_insert_lsn()')
    tx=$(printf '%s\n' "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
    tps=$(printf '%s\n' "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
    bytes=$(as_pg "${PSQL[@]}" -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / greatest($tx, 1))")
    as_pg "$BIN/pg_ctl" -D "$TMP/data" -w stop >/dev/null
    [ -n "$tps" ] || { printf '%s\n' "$out" >&2; exit 1; }
    cpu=$(( (t1 - t0) * 1000000 / HZ / (tx > 0 ? tx : 1) ))
    TPS[$v]+="$tps " WALB[$v]+="$bytes " CPU[$v]+="$cpu "
    printf '%-6s %-9s %10.0f %12s %14s\n' "$r" "$v" "$tps" "$cpu" "$bytes"
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# shellcheck disable=SC2086
c=$(median ${TPS[current]}) b=$(median ${TPS[baseline]})
# shellcheck disable=SC2086
cw=$(median ${WALB[current]}) bw=$(median ${WALB[baseline]})
# shellcheck disable=SC2086
cc=$(median ${CPU[current]}) bc=$(median ${CPU[baseline]})
awk -v c="$c" -v b="$b" -v cw="$cw" -v bw="$bw" -v cc="$cc" -v bc="$bc" 'BEGIN {
  printf "median tps: with records %.0f, without %.0f (%+.1f %%)\n", c, b, 100 * (c - b) / b
  printf "median server CPU per transaction: %d us vs %d us (%+.1f %%)\n", cc, bc, 100 * (cc - bc) / bc
  printf "median WAL bytes per transaction: %d vs %d (%+d)\n", cw, bw, cw - bw }'
