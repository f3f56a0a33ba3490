#!/usr/bin/env bash
# End-to-end tests of the HTTP/SSE listener: the driver (driver.cpp) serves
# on 127.0.0.1 with real sockets; curl and rawclient.pl talk to it.
#
#   ./run.sh [path/to/driver]        (make -C test/http run)
#   VALGRIND=1 ./run.sh              every driver under valgrind; fails on
#                                    leaks or invalid accesses
# Output is TAP-like; the exit status is the number of failures (max 99).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
DRIVER=${1:-$HERE/build/driver}
RAW="perl $HERE/rawclient.pl"
T=$(mktemp -d)
PASS=0
FAIL=0
DPID=
SLOW=1 # timing slack factor
WRAP=()
if [ "${VALGRIND:-0}" = 1 ]; then
  SLOW=3
  WRAP=(valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect
        --errors-for-leak-kinds=definite,indirect --error-exitcode=99
        --log-file="$T/valgrind.%p.log")
fi

cleanup() {
  [ -n "$DPID" ] && kill "$DPID" 2>/dev/null
  jobs -p | xargs -r kill 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

ok() { PASS=$((PASS + 1)); echo "ok - $1"; }
not_ok() {
  FAIL=$((FAIL + 1)); echo "not ok - $1"
  [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/#   /'
}
# check DESCRIPTION COMMAND...: passes when the command succeeds.
check() { local d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }
# same_text DESCRIPTION EXPECTED ACTUAL
same_text() {
  if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1" "expected: $(printf %q "$2")
got:      $(printf %q "$3")"; fi
}
# within LO HI VALUE (decimals allowed)
within() { awk -v lo="$1" -v hi="$2" -v v="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# start_driver OPTIONS...: starts the driver on an ephemeral port; sets PORT, URL.
start_driver() {
  rm -f "$T/ctl" "$T/driver.log"
  mkfifo "$T/ctl"
  "${WRAP[@]}" "$DRIVER" --port 0 "$@" <"$T/ctl" >"$T/driver.log" 2>&1 &
  DPID=$!
  exec 3>"$T/ctl"
  for _ in $(seq 1 $((100 * SLOW))); do
    grep -q '^listening' "$T/driver.log" 2>/dev/null && break
    sleep 0.05
  done
  PORT=$(awk '/^listening/ { print $2; exit }' "$T/driver.log")
  URL="http://127.0.0.1:$PORT"
  [ -n "$PORT" ] || { not_ok "driver starts" "$(cat "$T/driver.log")"; exit 1; }
}
# stop_driver: asks for a clean shutdown; checks the exit status.
stop_driver() {
  echo shutdown >&3
  exec 3>&-
  wait "$DPID"
  local rc=$?
  DPID=
  [ "$rc" = 0 ] || not_ok "driver exits cleanly" "exit status $rc; $(tail -5 "$T/driver.log")"
}
ctl() { echo "$*" >&3; }
# wait_log REGEX SECONDS: waits until the driver log has a matching line.
wait_log() {
  local n=$(awk -v s="$2" -v k="$SLOW" 'BEGIN { print int(s * k * 20) }')
  for _ in $(seq 1 "$n"); do
    grep -Eq "$1" "$T/driver.log" && return 0
    sleep 0.05
  done
  return 1
}
# wait_stuck ID: waits until connection ID has data queued (its socket is full).
wait_stuck() {
  for _ in $(seq 1 $((40 * SLOW))); do
    ctl stats
    sleep 0.1
    grep "^conn $1 " "$T/driver.log" | tail -1 | grep -Eq 'queued_events=[1-9]' && return 0
  done
  return 1
}
# mark_pending; ...start a client...; id=$(next_pending): waits for the first
# request that arrived after the mark and prints its id.
mark_pending() { PMARK=$(grep -c '^pending' "$T/driver.log"); }
# next_pending [STREAM]: the same, for the first such request on STREAM.
next_pending() {
  local id
  for _ in $(seq 1 $((60 * SLOW))); do
    id=$(grep '^pending' "$T/driver.log" | sed -n "$((PMARK + 1)),\$p" |
         awk -v s="${1:-}" 's == "" || $3 == s { print $2; exit }')
    [ -n "$id" ] && { echo "$id"; return 0; }
    sleep 0.05
  done
  return 1
}
# header_names FILE: lower-cased header names of a response, sorted, one line.
header_names() { tr -d '\r' <"$1" | sed -n '2,/^$/p' | sed '/^$/d' | cut -d: -f1 | tr 'A-Z' 'a-z' | sort | tr '\n' ' '; }
hdr() { tr -d '\r' <"$1" | grep -i "^$2:" | head -1 | cut -d' ' -f2-; }
status() { head -1 "$1" | cut -d' ' -f2; }
sse() { curl -sS -N -D "$T/h" -o "$T/b" --max-time "$@" 2>/dev/null; }

# ---------------------------------------------------------------------------
echo "# SSE response: headers, preamble, frames"
start_driver --frames 3 --interval-ms 100 --cors "https://a.example, https://b.example"

mark_pending
sse 1 "$URL/streams/chat"
same_text "SSE status 200" 200 "$(status "$T/h")"
same_text "SSE header set (no CORS without Origin)" \
  "cache-control content-type date transfer-encoding x-accel-buffering " "$(header_names "$T/h")"
same_text "content-type" "text/event-stream" "$(hdr "$T/h" content-type)"
same_text "cache-control" "no-cache, no-transform" "$(hdr "$T/h" cache-control)"
same_text "x-accel-buffering" "no" "$(hdr "$T/h" x-accel-buffering)"
id=$(next_pending)
expected=$(printf 'retry: 2000\n: pgbus stream open since_id=0 stream=chat\nevent: pgbus:connected\ndata: {"connectionId":"%x"}\n\nid: 1\ndata: frame 1\n\nid: 2\ndata: frame 2\n\nid: 3\ndata: frame 3\n\n' "$id")
same_text "preamble then frames 1..3, in order" "$expected" "$(cat "$T/b")"

sse 1 -H 'Origin: https://b.example' "$URL/streams/chat"
same_text "CORS: allowed origin echoed" "https://b.example" "$(hdr "$T/h" access-control-allow-origin)"
same_text "CORS: Vary: Origin" "Origin" "$(hdr "$T/h" vary)"
same_text "CORS: header set" \
  "access-control-allow-credentials access-control-allow-origin cache-control content-type date transfer-encoding vary x-accel-buffering " \
  "$(header_names "$T/h")"
curl -sS -D "$T/h" -o "$T/b" --max-time 2 -H 'Origin: https://evil.example' "$URL/streams/chat"
same_text "CORS: other origin refused: 403" 403 "$(status "$T/h")"
same_text "CORS: other origin gets no CORS header" "" "$(hdr "$T/h" access-control-allow-origin)"

curl -sS -D "$T/h" -o /dev/null -X OPTIONS -H 'Origin: https://a.example' \
  -H 'Access-Control-Request-Method: GET' "$URL/streams/chat"
same_text "preflight from allowed origin: 204" 204 "$(status "$T/h")"
same_text "preflight: Allow-Origin" "https://a.example" "$(hdr "$T/h" access-control-allow-origin)"
check "preflight: Allow-Methods has GET" grep -qi '^access-control-allow-methods: GET' "$T/h"
curl -sS -D "$T/h" -o /dev/null -X OPTIONS -H 'Origin: https://evil.example' "$URL/streams/chat"
same_text "preflight from other origin: 403" 403 "$(status "$T/h")"

echo "# status codes"
code() { curl -sS -o "$T/b" -D "$T/h" -w '%{http_code}' --max-time 2 "$@"; }
same_text "unknown stream (worker rule): 404" 404 "$(code "$URL/streams/missing")"
same_text "  with the worker's reason" "unknown stream: missing" "$(cat "$T/b")"
same_text "unknown path: 404" 404 "$(code "$URL/nope")"
same_text "invalid stream name: 404" 404 "$(code "$URL/streams/a%20b")"
same_text "name with a slash: 404" 404 "$(code "$URL/streams/a/b")"
same_text "POST: 405" 405 "$(code -X POST "$URL/streams/chat")"
same_text "  Allow: GET, OPTIONS" "GET, OPTIONS" "$(hdr "$T/h" allow)"
same_text "POST with a body: 405" 405 "$(code -X POST --data x "$URL/streams/chat")"
same_text "HEAD: 405" 405 "$(code -I "$URL/streams/chat")"
same_text "bad ?since cursor: 400" 400 "$(code "$URL/streams/chat?since=bad")"
same_text "bad Last-Event-ID: 400" 400 "$(code -H 'Last-Event-ID: bad' "$URL/streams/chat")"
same_text "/streams without stream: 400" 400 "$(code "$URL/streams")"
same_text "bad percent-encoding: 400" 400 "$(code "$URL/streams/chat?since=%zz")"
same_text "GET with a body: 400" 400 "$(code -X GET --data x "$URL/streams/chat")"
same_text "reject 401 (worker rule)" 401 "$(code "$URL/streams/deny")"
same_text "  WWW-Authenticate: Bearer" "Bearer" "$(hdr "$T/h" www-authenticate)"
same_text "handler route /healthz: 200" 200 "$(code "$URL/healthz")"
same_text "  body" "ok" "$(cat "$T/b")"
long=$(head -c 10000 /dev/zero | tr '\0' a)
same_text "10 KB request target: 414" 414 "$(code "$URL/streams/chat?x=$long")"
huge=$(head -c 100000 /dev/zero | tr '\0' a)
same_text "100 KB request target: 414" 414 "$(code "$URL/streams/chat?x=$huge")"
same_text "20 KB header: 431" 431 "$(code -H "X-Big: ${long}${long}" "$URL/streams/chat")"
same_text "100 KB header: 431" 431 "$(code -H "X-Big: $huge" "$URL/streams/chat")"
same_text "server still serves after oversize requests" 200 "$(code "$URL/healthz")"
curl -sv -o /dev/null -o /dev/null "$URL/healthz" "$URL/healthz" 2>"$T/v"
check "keep-alive after a handler response" grep -q 'Re-using existing connection' "$T/v"
sse 1 --http1.0 "$URL/streams/chat"
check "HTTP/1.0 client gets the stream (close-delimited)" grep -q '^data: frame 3$' "$T/b"

echo "# request fields handed to the worker"
# pend CURL_ARGS...: the driver's "pending" line for this request (none: empty).
pend() {
  mark_pending
  curl -sS -o /dev/null --max-time 0.5 "$@" 2>/dev/null
  grep '^pending' "$T/driver.log" | sed -n "$((PMARK + 1)),\$p" | tail -1
}
check "?stream=a&stream=b&stream=a -> a,b" \
  grep -q ' a,b ' <<<"$(pend "$URL/streams?stream=a&stream=b&stream=a")"
check "blank ?since= is absent, ?last_event_id= used" \
  grep -q 'since=7 ' <<<"$(pend "$URL/streams/quiet?since=&last_event_id=7")"
check "?since= wins over ?last_event_id=" \
  grep -q 'since=5 ' <<<"$(pend "$URL/streams/quiet?since=5&last_event_id=7")"
check "blank Last-Event-ID is absent" \
  grep -q 'last_event_id=- ' <<<"$(pend -H 'Last-Event-ID:  ' "$URL/streams/quiet")"
check "Last-Event-ID header" \
  grep -q 'last_event_id=chat:7~42_44 ' <<<"$(pend -H 'Last-Event-ID: chat:7~42_44' "$URL/streams/quiet")"
check "Authorization: Bearer -> token" \
  grep -q 'token=tok123 ' <<<"$(pend -H 'Authorization: Bearer tok123' "$URL/streams/quiet")"
check "?token= -> token" grep -q 'token=t2 ' <<<"$(pend "$URL/streams/quiet?token=t2")"
check "replay and subscriber" \
  grep -q 'replay=all subscriber=sub1 ' <<<"$(pend "$URL/streams/quiet?replay=all&subscriber=sub1")"
check "signed name, URL-decoded" \
  grep -q 'signed=ab/c+d==--99 ' <<<"$(pend "$URL/pgbus/streams/ab%2Fc+d%3D%3D--99")"
check "percent-decoded stream name" grep -q ' q_1 ' <<<"$(pend "$URL/streams/q%5F1")"
check "remote address ip:port" grep -Eq 'remote=127\.0\.0\.1:[0-9]+$' <<<"$(pend "$URL/streams/quiet")"

echo "# client disconnects"
mark_pending
curl -sS -N -o /dev/null "$URL/streams/quiet" & cpid=$!
id=$(next_pending)
sleep 0.3
t0=$(now); kill $cpid; wait $cpid 2>/dev/null
check "closed idle (suspended) stream seen at once as 'client'" wait_log "^closed $id client\$" 1
ctl stats
check "connection count back to 0" wait_log '^stats end count=0$' 2
stop_driver

# ---------------------------------------------------------------------------
echo "# undecided requests"
start_driver --request-timeout 1
t0=$(now)
# (200 with only a short retry: and the end: an EventSource comes back, where
# a 503 would make it give up)
same_text "a request never decided gets 200 and a retry: (3 x request_timeout)" 200 "$(code --max-time 10 "$URL/streams/undecided")"
check "  its body is a retry: of 250-750 ms" grep -Eq '^retry: ([2-6][0-9]{2}|7[0-4][0-9]|750)$' "$T/b"
check "  after about 3 s ($(elapsed "$t0") s)" within 2.5 $((5 * SLOW)) "$(elapsed "$t0")"
check "  reported closed as 'server'" wait_log '^closed [0-9]+ server$' 1
mark_pending
curl -sS -N -o /dev/null "$URL/streams/undecided" & cpid=$!
id=$(next_pending)
sleep 0.2
kill $cpid; wait $cpid 2>/dev/null
check "a client leaving while its request is pending is reported as 'client'" wait_log "^closed $id client\$" 1
stop_driver

echo "# heartbeats and idle timeout"
start_driver --heartbeat 1 --idle 2 --frames 8 --interval-ms 500
t0=$(now)
curl -sS -N -o "$T/q" --max-time 8 "$URL/streams/quiet"; rc=$?
e=$(elapsed "$t0")
same_text "idle stream ended by the server, cleanly (curl exit 0)" 0 "$rc"
check "  after the idle timeout (2 s < $e s < 4 s)" within 2 $((4 * SLOW)) "$e"
check "  heartbeats arrived" grep -Eq '^: heartbeat [0-9]{10}$' "$T/q"
check "  closed as idle" wait_log '^closed [0-9]+ idle$' 1
sse 5 "$URL/streams/chat"
same_text "stream with events every 0.5 s is not idle: 8 frames in 5 s" 8 "$(grep -c '^data: frame' "$T/b")"
stop_driver

# ---------------------------------------------------------------------------
echo "# slowloris"
start_driver --request-timeout 2
out=$($RAW slowloris "$PORT" /streams/chat 0.5)
check "trickled headers cut after request_timeout ($out)" within 1.8 $((3 * SLOW)) "${out#closed_after }"
out=$($RAW silent "$PORT")
check "silent connection cut after request_timeout ($out)" within 1.8 $((3 * SLOW)) "${out#closed_after }"
sse 3 "$URL/streams/quiet"
same_text "an open stream outlives request_timeout (curl ends it: exit 28)" 28 "$?"
same_text "  it was a stream: 200" 200 "$(status "$T/h")"
check "  with its preamble" grep -q '^event: pgbus:connected$' "$T/b"
stop_driver

# ---------------------------------------------------------------------------
echo "# capacity"
start_driver --max-connections 2
curl -sS -N -o /dev/null "$URL/streams/quiet" & c1=$!
curl -sS -N -o /dev/null "$URL/streams/quiet" & c2=$!
wait_log '^pending 2 quiet' 2
sleep 0.2
same_text "third SSE connection: 503" 503 "$(code "$URL/streams/quiet")"
same_text "  Retry-After" 2 "$(hdr "$T/h" retry-after)"
same_text "/healthz still answers at capacity" 200 "$(code "$URL/healthz")"
kill $c1 $c2; wait $c1 $c2 2>/dev/null
sleep 0.3
sse 0.5 "$URL/streams/quiet"
same_text "a slot frees when a client leaves" 200 "$(status "$T/h")"
stop_driver

# ---------------------------------------------------------------------------
echo "# slow clients: overflow policies"
start_driver --policy disconnect --frames 3 --interval-ms 100 --flood-per-tick 50 --flood-size 4096
mark_pending
$RAW noread "$PORT" /streams/flood 8 >/dev/null & r1=$!
flood_id=$(next_pending)
t0=$(now)
sse 1.5 "$URL/streams/chat"
check "a stuck client does not delay others (3 frames within 1.5 s)" \
  test "$(grep -c '^data: frame' "$T/b")" = 3
check "disconnect policy closes the stuck client as 'overflow'" wait_log "^closed $flood_id overflow\$" 6
kill $r1 2>/dev/null; wait $r1 2>/dev/null
stop_driver

start_driver --policy drop_oldest --queue-events 100 --queue-bytes 1000000 --flood-per-tick 100 --flood-size 4000
mark_pending
$RAW stall "$PORT" /streams/flood 2 1 >"$T/stall" & r1=$!
flood_id=$(next_pending)
sleep 1.5
ctl stats
wait_log '^stats end' 2
line=$(grep "^conn $flood_id " "$T/driver.log" | tail -1)
dropped=$(sed -n 's/.*overflow_dropped=\([0-9]*\).*/\1/p' <<<"$line")
qe=$(sed -n 's/.*queued_events=\([0-9]*\).*/\1/p' <<<"$line")
check "drop_oldest: stuck client drops events ($line)" test "${dropped:-0}" -gt 0
check "  and its queue stays within queue_max_events" test "${qe:-999}" -le 100
wait $r1
check "  the client is told: pgbus:gap-detected with a count and a resume id" \
  grep -Eq '^data: \{"reason":"overflow","dropped":[0-9]+,"resume":"[0-9]+"\}$' "$T/stall"
check "  gap notice is a whole event" grep -A1 -x 'event: pgbus:gap-detected' "$T/stall" -q
framing=$(perl -e '
  local $/; my $b = <STDIN>; my @ev = split /\n\n/, $b; pop @ev; # the last one may be cut
  my ($bad, $last, $n, @resume) = (0, 0, 0);
  my (%seen, %next); # ids received; the id received right after each
  for my $e (@ev) {
    if ($e =~ /^id: (\d+)\ndata: x{4000}$/) { $bad++ if $1 <= $last; $next{$last} = $1; $seen{$1} = 1; $last = $1; $n++ }
    elsif ($e =~ /^event: pgbus:gap-detected\ndata: \{"reason":"overflow","dropped":\d+,"resume":"(\d+)"\}$/) {
      # resume names a frame this client received, the last one before a drop
      $bad++ unless $seen{$1};
      push @resume, $1;
    }
    elsif ($e =~ /^retry: 2000\n: pgbus stream open .*\nevent: pgbus:connected\ndata: \{.*\}$/) {}
    elsif ($e =~ /^: heartbeat \d+$/) {}
    else { $bad++ }
  }
  for my $r (@resume) { $bad++ if defined $next{$r} && $next{$r} == $r + 1 }
  print $n > 0 && @resume && $bad == 0 ? "ok" : "bad=$bad frames=$n notices=" . scalar(@resume);' <"$T/stall")
same_text "  every event intact, ids ascending, each resume id the last frame before a drop" ok "$framing"
stop_driver

# ---------------------------------------------------------------------------
echo "# connection_memory bounds a request's head"
cookie() { head -c "$1" /dev/zero | tr '\0' c; }
start_driver --memory-limit 4096 --frames 1 --interval-ms 100
sse 2 -H "Cookie: s=$(cookie 1000)" "$URL/streams/chat"
check "4 kB per connection: a stream request with a 1 kB cookie is served" grep -q '^data: frame 1$' "$T/b"
same_text "4 kB per connection: a 6 kB cookie gets 431" 431 "$(code -H "Cookie: s=$(cookie 6000)" "$URL/streams/chat")"
same_text "  and the server still serves" 200 "$(code "$URL/healthz")"
stop_driver
start_driver --memory-limit 16384 --frames 1 --interval-ms 100
sse 2 -H "Cookie: s=$(cookie 6000)" "$URL/streams/chat"
check "16 kB per connection: a 6 kB cookie is served" grep -q '^data: frame 1$' "$T/b"
stop_driver
start_driver --frames 2 --interval-ms 300
sse 2 -H "Cookie: s=$(cookie 9000)" "$URL/streams/chat"
check "the default: a stream request with a 9 kB cookie is served" grep -q '^data: frame 1$' "$T/b"
check "  and the stream goes on once its socket is the server's" grep -q '^data: frame 2$' "$T/b"
same_text "the default: a 64 kB cookie gets 431" 431 "$(code -H "Cookie: s=$(cookie 65536)" "$URL/streams/chat")"
same_text "  and the server still serves" 200 "$(code "$URL/healthz")"
stop_driver

# ---------------------------------------------------------------------------
echo "# shutdown"
start_driver --drain-ms 2000 --flood-per-tick 100 --flood-size 4000
mark_pending
curl -sS -N -o "$T/s" --max-time 10 "$URL/streams/quiet" & c1=$!
$RAW noread "$PORT" /streams/flood 20 >/dev/null & r1=$!
flood_id=$(next_pending flood)
check "the flood client is stuck (its queue backs up)" wait_stuck "$flood_id"
t0=$(now)
echo shutdown >&3; exec 3>&-
wait "$DPID"; rc=$?; DPID=
e=$(elapsed "$t0")
wait $c1; crc=$?
same_text "driver exits 0 after shutdown" 0 "$rc"
check "  within drain_ms even with a stuck client (2 s <= $e s < 3 s)" within 1.9 $((3 * SLOW)) "$e"
check "  the client got event: pgbus:shutdown, without an id: line" \
  grep -Pzq '\n\nevent: pgbus:shutdown\ndata: \{"reason":"worker_restart"\}\n\n' "$T/s"
same_text "  and a clean end of stream (curl exit 0)" 0 "$crc"
check "  closed reported as 'shutdown'" grep -Eq '^closed [0-9]+ shutdown$' "$T/driver.log"
kill $r1 2>/dev/null; wait $r1 2>/dev/null

# ---------------------------------------------------------------------------
if [ "${VALGRIND:-0}" = 1 ]; then
  errs=$(cat "$T"/valgrind.*.log 2>/dev/null)
  if [ -z "$errs" ]; then ok "valgrind: no errors, no leaks"; else not_ok "valgrind" "$errs"; fi
fi
echo "# passed $PASS, failed $FAIL"
[ "$FAIL" -lt 99 ] && exit "$FAIL" || exit 99
