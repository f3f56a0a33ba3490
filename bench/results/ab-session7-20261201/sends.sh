#!/bin/bash
# sends per second and worker CPU per send during a fan-out run: B=build FAN=N
cd /work/main
o=/tmp/ab/sends-$B-$FAN-$1
(PGBIN=/opt/pg-$B/lib/postgresql/15/bin bench/run.sh --quick --no-install --systems pgbus --scenarios fanout --fanout $FAN --duration 6 --out $o > $o.log 2>&1 &)
for i in $(seq 1 240); do sleep 0.25; p=$(grep "worker pids" $o.log 2>/dev/null | sed 's/.*pids: //'); pgrep -f "publisher" >/dev/null && [ -n "$p" ] && break; done
sleep 1.5
t0=0; for x in $p; do t0=$((t0 + $(awk '{print $14+$15}' /proc/$x/stat))); done
c0=$(pgrep -x sse_load | head -1); ct0=$(awk '{print $14+$15}' /proc/$c0/stat)
perf stat -e syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,raw_syscalls:sys_enter -p $(echo $p | tr ' ' ',') -x, -o $o.stat -- sleep 3 >/dev/null 2>&1
t1=0; for x in $p; do t1=$((t1 + $(awk '{print $14+$15}' /proc/$x/stat))); done
ct1=$(awk '{print $14+$15}' /proc/$c0/stat)
while pgrep -f "bench/run.sh" >/dev/null; do sleep 1; done
python3 - "$o" $t0 $t1 $ct0 $ct1 <<'PY'
import sys,json,glob
o,t0,t1,c0,c1=sys.argv[1],*map(int,sys.argv[2:])
cnt={}
for l in open(o+'.stat'):
    f=l.strip().split(',')
    if len(f)>2 and f[0].isdigit(): cnt[f[2]]=int(f[0])
s=cnt.get('syscalls:sys_enter_sendto',0); e=cnt.get('syscalls:sys_enter_epoll_wait',0); a=cnt.get('raw_syscalls:sys_enter',0)
w=(t1-t0)/100; c=(c1-c0)/100
d=json.load(open(glob.glob(o+'/pgbus_*.json')[0])); cl=d['client']; lat=cl['latency_us']
print(f"{o.split('/')[-1]}: sends/s {s/3:.0f} epoll_wait/s {e/3:.0f} syscalls/s {a/3:.0f}; worker CPU {w/3:.2f} cores, {w*1e6/max(s,1):.1f} us per send; load client {c/3:.2f} cores; deliveries/s {cl['deliveries_per_s']:.0f}, per send {cl['deliveries_per_s']*3/max(s,1):.1f}; p50 {lat['p50']/1000:.1f} p99 {lat['p99']/1000:.1f} ms")
PY
