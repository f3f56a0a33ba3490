#!/usr/bin/env bash
# Instructions a committed one-row INSERT costs its backend, with and without
# capture, counted by callgrind (deterministic: the machine's load does not
# move it, unlike throughput on a shared box).
#
#   PG_CONFIG=... bench/capture_instructions.sh [--rows N]
#
# A throwaway cluster (bench/lib/scratch.sh) with a stream whose queue table
# holds N rows (default 200,000) nobody watches; then, for each variant, a
# copy of it runs in single-user mode under callgrind: PREPARE, then K times
# EXECUTE of a one-row INSERT of the 100-byte envelope (each statement its
# own transaction), for K = 200 and K = 1200; the difference / 1000 is the
# cost of one INSERT, start-up and shutdown cancelling out.
#   plain     the queue's triggers dropped
#   hooked    the trigger this build's create_stream puts on
# wal_level is replica (the default): the capture's standby records are
# written. Needs valgrind and pgbus_stream installed (make install).
set -euo pipefail
ROWS=200000
while [ $# -gt 0 ]; do
  case "$1" in
  --rows) ROWS=$2; shift 2 ;;
  *) echo "usage: $0 [--rows N]" >&2; exit 2 ;;
  esac
done
[ "$ROWS" -ge 0 ] && [ "$ROWS" -le 5000000 ] || { echo "rows 0..5000000" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir)
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/bench/lib/scratch.sh"
scratch_dir instructions
PGPORT=${PGPORT:-$((20000 + RANDOM % 20000))}
scratch_node "$TMP/base" "$PGPORT" $((PGPORT + 1))
echo "pgbus_stream.workers = 1" >>"$TMP/base/postgresql.conf"
as_pg "$BIN/pg_ctl" -D "$TMP/base" -l "$TMP/log" -w start >/dev/null
as_pg "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$TMP" -p "$PGPORT" -d postgres <<SQL
CREATE EXTENSION pgbus_stream;
SELECT pgbus_stream.create_stream('q') \\gset
SET session_replication_role = replica;
INSERT INTO pgbus_stream.q_pgbus_q (message) SELECT '{}'::jsonb FROM generate_series(1, $ROWS);
RESET session_replication_role;
VACUUM ANALYZE pgbus_stream.q_pgbus_q;
SQL
as_pg "$BIN/pg_ctl" -D "$TMP/base" -w stop >/dev/null
NODES=()
T=pgbus_stream.q_pgbus_q
ddl() {
  case "$1" in
  plain) echo "SELECT format('DROP TRIGGER %I ON $T', tgname) FROM pg_trigger WHERE tgrelid = '$T'::regclass AND NOT tgisinternal;" ;;
  hooked) echo "SELECT NULL::text WHERE false;" ;;
  esac
}
MSG='{"html":"<turbo-stream action=\"append\" target=\"messages\"><template><p>hello</p></template></turbo-stream>"}'
# count VARIANT K: instructions of the whole single-user run
count() {
  local d=$TMP/run script=$TMP/run.sql out
  rm -rf "$d" && cp -a "$TMP/base" "$d"
  {
    # single-user mode has no \gexec: the drops are generated, then run
    echo "CREATE FUNCTION pg_temp.run(q text) RETURNS void LANGUAGE plpgsql AS \$\$ DECLARE s text; BEGIN FOR s IN EXECUTE q LOOP EXECUTE s; END LOOP; END \$\$;"
    echo "SELECT pg_temp.run(\$q\$$(ddl "$1" | sed 's/;$//')\$q\$);"
    echo "PREPARE p(jsonb) AS INSERT INTO $T (message) VALUES (\$1);"
    for _ in $(seq 1 "$2"); do echo "EXECUTE p('$MSG');"; done
  } >"$script"
  chmod a+r "$script"
  out=$(as_pg valgrind --tool=callgrind --callgrind-out-file="$TMP/callgrind.$1.$2" \
    "$BIN/postgres" --single -D "$d" -c synchronous_commit=off postgres <"$script" 2>&1 >/dev/null) || true
  if grep -q ERROR <<<"$out"; then echo "$1: $(grep -m1 ERROR <<<"$out")" >&2; exit 1; fi
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out"
}
plain=""
for v in plain hooked; do
  a=$(count "$v" 200)
  b=$(count "$v" 1200)
  per=$(((b - a) / 1000))
  [ -z "$plain" ] && plain=$per
  awk -v v="$v" -v n="$per" -v p="$plain" 'BEGIN { printf "%-8s %8d instructions per INSERT  %+6.1f%%\n", v, n, (n / p - 1) * 100 }'
done
