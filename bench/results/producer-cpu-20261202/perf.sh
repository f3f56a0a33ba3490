#!/bin/bash
# perf of variants: B=build TAG
cd /work/main
o=/tmp/s8/$TAG-$B
PGBIN=/opt/pg-$B/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 14 --out $o > $o.log 2>&1 &
bp=$!
for v in ${VARS:-plain pgbus_unwatched pgbus_watched}; do
  for i in $(seq 1 3000); do grep -q "producer_${v}_c8_scoff_r1: pgbench" $o.log 2>/dev/null && break; sleep 0.1; done
  sleep 2; perf record -F 999 -a -g -o $o-$v.data -- sleep 8 > /dev/null 2>&1
done
wait $bp
grep "INSERT" $o/results.md
