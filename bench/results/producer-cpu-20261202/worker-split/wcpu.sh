#!/bin/bash
# worker task-clock per row in the watched variant: BUILDS ROUNDS TAG
cd /work/main
for i in $(seq 1 ${ROUNDS:-3}); do for b in $BUILDS; do
o=/tmp/s8/$TAG-$b-$i
PGBIN=/opt/pg-$b/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 10 --out $o > $o.log 2>&1 &
bp=$!
v=pgbus_watched
for k in $(seq 1 3000); do grep -q "producer_${v}_c8_scoff_r1: pgbench" $o.log 2>/dev/null && break; sleep 0.1; done
W=$(grep "worker pids" $o.log | sed 's/.*pids: //' | tr ' ' ',' | sed 's/,$//')
sleep 2; perf stat --per-thread -e task-clock,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto -p $W -o $o.stat -- sleep 6 >/dev/null 2>&1
wait $bp
tps=$(grep "producer_${v}_c8_scoff_r1: [0-9.]* tps" $o.log | sed 's/.*r1: \([0-9.]*\) tps.*/\1/')
ms=$(grep task-clock $o.stat | awk '{s+=$2} END {print s}')
per=$(grep task-clock $o.stat | awk '{printf "%s ", $2}')
ratio=$(grep "1 live" $o/results.md | awk -F'|' '{print $11}')
echo "$b-$i tps $tps worker_ms_6s $ms [$per] us_per_row $(python3 -c "print(round($ms*1000/($tps*6),2))") watched_vs_plain $ratio"
done; done
