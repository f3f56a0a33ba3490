#!/bin/bash
cd /work/main
for i in 1 2 3; do for m in on off; do
  o=/tmp/s8/sr-$m-$i
  PGBIN=/opt/pg-s8/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 8 --pgbus-conf "pgbus_stream.max_connections = 20000;pgbus_stream.standby_records = $m" --out $o > $o.log 2>&1
  echo "== $m-$i"; grep "INSERT" $o/results.md | awk -F'|' '{print $2,"|",$6,"|",$9,"|",$10,"|",$11}'
done; done
