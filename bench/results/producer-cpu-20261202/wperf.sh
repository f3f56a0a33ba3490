#!/bin/bash
cd /work/main
o=/tmp/s8/$TAG-$B
PGBIN=/opt/pg-$B/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 14 --out $o > $o.log 2>&1 &
bp=$!
v=pgbus_watched
for i in $(seq 1 3000); do grep -q "producer_${v}_c8_scoff_r1: pgbench" $o.log 2>/dev/null && break; sleep 0.1; done
W=$(grep "worker pids" $o.log | sed 's/.*pids: //' | tr ' ' ',' | sed 's/,$//')
sleep 2; perf record -F 1999 --call-graph dwarf,16384 -p $W -o $o-w.data -- sleep 6 > /dev/null 2>&1
wait $bp
grep "INSERT" $o/results.md
