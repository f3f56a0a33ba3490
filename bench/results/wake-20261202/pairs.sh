#!/bin/bash
# interleaved producer runs: BUILDS="cur s8" ROUNDS=N TAG=x
cd /work/main
for i in $(seq 1 ${ROUNDS:-3}); do for b in $BUILDS; do
  o=/tmp/s8/$TAG-$b-$i
  PGBIN=/opt/pg-$b/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds ${PR:-1} --pgbench-time 8 --out $o > $o.log 2>&1
  echo "== $b-$i"; grep "INSERT" $o/results.md | awk -F'|' '{print $2,"|",$6,"|",$8,"|",$9,"|",$10,"|",$11}'
done; done
