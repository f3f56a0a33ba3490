#!/bin/bash
cd /work/main
o=/tmp/s8/$TAG-$B
PGBIN=/opt/pg-$B/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios producer --pgbench-clients 8 --producer-commit off --producer-rounds 1 --pgbench-time 10 --out $o > $o.log 2>&1 &
bp=$!
for v in ${VARS:-pgbus_unwatched pgbus_watched}; do
for i in $(seq 1 3000); do grep -q "producer_${v}_c8_scoff_r1: pgbench" $o.log 2>/dev/null && break; sleep 0.1; done
W=$(grep "worker pids" $o.log | sed 's/.*pids: //' | tr ' ' ',' | sed 's/,$//')
sleep 2; perf stat --per-thread -e 'task-clock,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_read,syscalls:sys_enter_kill' -p $W -o $o-$v.stat -- sleep 5 >/dev/null 2>&1
echo "== $v"; grep syscalls $o-$v.stat
done
wait $bp
grep "INSERT" $o/results.md | cut -c1-200
