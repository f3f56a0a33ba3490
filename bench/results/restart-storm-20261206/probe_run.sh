#!/usr/bin/env bash
# One bench/restart_storm.sh run at 10,000 clients with five curl probes
# during the storm (2.5 s apart from the new worker's listen) and the
# client's CPU and run-queue share over those 10 s; $1 = run label. Output
# in /tmp/loop-b4/$1 (the lines of runs.txt).
cd "$(dirname "$0")/../../.."
export PG_CONFIG=${PG_CONFIG:-pg_config}
OUT=/tmp/loop-b4/$1; mkdir -p $OUT
(timeout 600 bench/restart_storm.sh --conns 10000 > $OUT/result.json 2>$OUT/err; cp /tmp/restart_storm.log $OUT/server.log) &
BENCH=$!
sleep 5; LOG=$(ls -td /tmp/pgbus_restart_storm.*/ | head -1)log
for i in $(seq 1 300); do n=$(grep -c "listening on port" $LOG 2>/dev/null); [ "${n:-0}" -ge 2 ] && break; sleep 0.2; done
PORT=$(grep "listening on port" $LOG | tail -1 | sed 's/.*port \([0-9]*\).*/\1/')
CPID=$(pgrep -f "client/restart_storm.py $PORT" | head -1)
ticks() { awk '{print $14+$15}' /proc/$1/stat 2>/dev/null; }
T0=$(date +%s.%N); C0=$(ticks $CPID); W0=$(awk '{print $2}' /proc/$CPID/schedstat)
for k in 1 2 3 4 5; do
  (curl -s -N -m 60 -o /dev/null -w "probe$k sent_after_listen=%{time_connect} firstbyte_s=%{time_starttransfer}\n" -H 'Accept: text/event-stream' http://127.0.0.1:$PORT/streams/storm > $OUT/probe$k.txt 2>&1 &)
  echo "probe$k sent $(echo "$(date +%s.%N) - $T0" | bc) s after listening" >> $OUT/probes.txt
  sleep 2
done
C1=$(ticks $CPID); T1=$(date +%s.%N); W1=$(awk '{print $2}' /proc/$CPID/schedstat)
echo "client_runqueue_wait_share_first_10s=$(echo "($W1 - $W0) / 1000000000 / ($T1 - $T0)" | bc -l | cut -c1-5)" >> $OUT/probes.txt
echo "client_cpu_share_first_10s=$(echo "($C1 - $C0) / 100 / ($T1 - $T0)" | bc -l | cut -c1-5)" >> $OUT/probes.txt
wait $BENCH
sleep 1
cat $OUT/result.json; cat $OUT/probes.txt; cat $OUT/probe*.txt; uptime
