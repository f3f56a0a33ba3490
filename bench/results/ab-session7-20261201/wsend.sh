#!/bin/bash
# watched producer variant: worker sends/s and the subscribers' CPU: B=build
cd /work/main
o=/tmp/ab/ws-$B-$1
(PGBIN=/opt/pg-$B/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 8 --out $o > $o.log 2>&1 &)
for i in $(seq 1 400); do grep -q "producer_pgbus_watched_c8_scoff_r1: pgbench" $o.log 2>/dev/null && break; sleep 0.2; done
sleep 0.5
p=$(grep "worker pids" $o.log | sed 's/.*pids: //')
cl=$(pgrep -x sse_load)
c0=0; for x in $cl; do c0=$((c0 + $(awk '{print $14+$15}' /proc/$x/stat))); done
w0=0; for x in $p; do w0=$((w0 + $(awk '{print $14+$15}' /proc/$x/stat))); done
perf stat -e syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait -p $(echo $p | tr ' ' ',') -x, -o $o.stat -- sleep 5 >/dev/null 2>&1
c1=0; for x in $cl; do c1=$((c1 + $(awk '{print $14+$15}' /proc/$x/stat))); done
w1=0; for x in $p; do w1=$((w1 + $(awk '{print $14+$15}' /proc/$x/stat))); done
while pgrep -f "bench/run.sh" >/dev/null; do sleep 1; done
tps=$(grep "producer_pgbus_watched_c8_scoff_r1: [0-9.]* tps" $o.log | sed 's/.*r1: \([0-9.]*\) tps.*/\1/')
s=$(grep sendto $o.stat | cut -d, -f1); e=$(grep epoll_wait $o.stat | cut -d, -f1)
echo "$B-$1 tps $tps sends/s $((s/5)) epoll_wait/s $((e/5)) worker cores $(echo "scale=2; ($w1-$w0)/500" | bc) subscribers' cores $(echo "scale=2; ($c1-$c0)/500" | bc) rows/send $(echo "scale=1; $tps/($s/5)" | bc)"
