#!/bin/bash
# worker CPU per captured row in the watched producer variant: B=build N=run
cd /work/main
o=/tmp/ab/wp-$B-$1
(PGBIN=/opt/pg-$B/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 8 --out $o > $o.log 2>&1 &)
for i in $(seq 1 400); do grep -q "producer_pgbus_watched_c8_scoff_r1: pgbench" $o.log 2>/dev/null && break; sleep 0.2; done
p=$(grep "worker pids" $o.log | sed 's/.*pids: //')
sleep 0.5; perf stat -e instructions:u,instructions:k -x, -p $(echo $p | tr ' ' ',') -o $o.stat -- sleep 6 >/dev/null 2>&1 &
t0=0; for x in $p; do t0=$((t0 + $(awk '{print $14+$15}' /proc/$x/stat))); done
for i in $(seq 1 400); do grep -q "producer_pgbus_watched_c8_scoff_r1: [0-9.]* tps" $o.log 2>/dev/null && break; sleep 0.1; done
t1=0; for x in $p; do t1=$((t1 + $(awk '{print $14+$15}' /proc/$x/stat))); done
while pgrep -f "bench/run.sh" >/dev/null; do sleep 1; done
tps=$(grep "producer_pgbus_watched_c8_scoff_r1: [0-9.]* tps" $o.log | sed 's/.*r1: \([0-9.]*\) tps.*/\1/')
python3 -c "
t=($t1-$t0)/100; tps=float('$tps'); rows=tps*8
iu=ik=0
r6=tps*6
print('$B-$1', 'worker cpu s', t, 'tps', round(tps), 'us/row', round(t*1e6/rows,2), 'instr/row user', round(iu/r6), 'kernel', round(ik/r6))"
grep -A8 "^| variant" $o/results.md | grep "INSERT" | awk -F'|' '{print "   ",$2,$9}'
