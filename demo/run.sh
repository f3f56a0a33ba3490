#!/usr/bin/env bash
# demo/run.sh — see pgbus_stream work, end to end, in about half a minute.
#
#   sudo ./demo/run.sh          (or as root; the server itself runs as user pgbus)
#   ./demo/run.sh               (as a user who can sudo, or with everything installed)
#   ./demo/run.sh --keep        leave the demo server running afterwards, and
#                               broadcast one message a second for 60 s more
#
# It installs the Debian packages it needs, builds and installs the
# extension, creates a throwaway PostgreSQL 15 cluster in demo/.cluster with
# pgbus_stream preloaded (free ports for PostgreSQL and for the SSE
# listener), creates the stream "demo", listens to it with curl for a few
# seconds while psql broadcasts a message every second, prints what curl
# received, prints the URL of the worker's viewer page for that stream, and
# stops the cluster. With --keep the cluster stays up and a background loop
# keeps broadcasting once a second for a minute, so that the viewer page
# (http://127.0.0.1:<port>/viewer?stream=demo) shows messages arriving live.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGBIN=/usr/lib/postgresql/15/bin
KEEP=0
for a in "$@"; do
	case "$a" in
	--keep) KEEP=1 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "demo/run.sh: unknown argument '$a'" >&2; exit 2 ;;
	esac
done

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# 1. packages, build, install: the test runner's own stages.
say "installing packages, building and installing pgbus_stream"
if ! "$REPO/test/run_all.sh" --only deps,build,install >"$REPO/demo/.build.log" 2>&1; then
	tail -n 40 "$REPO/demo/.build.log"
	echo "demo/run.sh: install/build failed (full log: demo/.build.log)." >&2
	[ "$(id -u)" -eq 0 ] || echo "Packages and 'make install' need root: try 'sudo ./demo/run.sh'." >&2
	exit 1
fi
echo "ok (log: demo/.build.log)"

# 2. who runs the server, and where its files go.
RUN_AS=()
if [ "$(id -u)" -eq 0 ]; then
	USER_NAME=pgbus
	id -u "$USER_NAME" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$USER_NAME"
	RUN_AS=(runuser -u "$USER_NAME" --)
else
	USER_NAME=$(id -un)
fi
CLUSTER=$REPO/demo/.cluster
if ! "${RUN_AS[@]}" test -x "$REPO/demo" 2>/dev/null; then
	CLUSTER=/tmp/pgbus_stream_demo # the repository is not reachable by $USER_NAME
fi

free_port() {
	perl -MIO::Socket::INET -e '
		for (1 .. 200) {
			my $p = 20000 + int(rand(30000));
			my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $p,
				Proto => "tcp", Listen => 1, ReuseAddr => 0) or next;
			close $s; print $p; exit 0;
		}
		exit 1;'
}
PG_PORT=$(free_port)
SSE_PORT=$(free_port)
while [ "$SSE_PORT" = "$PG_PORT" ]; do SSE_PORT=$(free_port); done

PGCTL=("${RUN_AS[@]}" "$PGBIN/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log")
PSQL=("${RUN_AS[@]}" "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER" -p "$PG_PORT" -d postgres)

stop_cluster() {
	if [ -f "$CLUSTER/data/postmaster.pid" ]; then
		"${PGCTL[@]}" -m fast stop >/dev/null 2>&1 || true
	fi
}

# 3. a throwaway cluster.
say "creating a throwaway PostgreSQL 15 cluster in $CLUSTER"
if [ -f "$CLUSTER/data/postmaster.pid" ]; then
	"${PGCTL[@]}" -m fast stop >/dev/null 2>&1 || true
fi
rm -rf "$CLUSTER"
mkdir -p "$CLUSTER"
[ ${#RUN_AS[@]} -eq 0 ] || chown "$USER_NAME:" "$CLUSTER"
"${RUN_AS[@]}" "$PGBIN/initdb" -D "$CLUSTER/data" -A trust -U "$USER_NAME" >"$CLUSTER/initdb.log" 2>&1 \
	|| { cat "$CLUSTER/initdb.log"; exit 1; }
cat >>"$CLUSTER/data/postgresql.conf" <<CONF

# demo/run.sh
port = $PG_PORT
listen_addresses = ''
unix_socket_directories = '$CLUSTER'
shared_preload_libraries = 'pgbus_stream'
pgbus_stream.port = $SSE_PORT
pgbus_stream.heartbeat_interval = 2
CONF
[ $KEEP -eq 1 ] || trap stop_cluster EXIT
"${PGCTL[@]}" -w start >/dev/null || { tail -n 20 "$CLUSTER/server.log"; exit 1; }
echo "PostgreSQL on port $PG_PORT (socket in $CLUSTER), SSE on 127.0.0.1:$SSE_PORT"

say "CREATE EXTENSION pgbus_stream; SELECT pgbus_stream.create_stream('demo', public => true);"
"${PSQL[@]}" -c 'CREATE EXTENSION pgbus_stream' \
	-c "SELECT name, queue_schema || '.' || queue_table AS queue, kind FROM pgbus_stream.create_stream('demo', public => true)"

URL="http://127.0.0.1:$SSE_PORT/streams/demo"
# wait for the listener
for _ in $(seq 1 50); do
	curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$SSE_PORT/streams/nope" && break
	sleep 0.1
done

# 4. a subscriber and a producer.
say "curl -sN $URL   (6 seconds), while psql broadcasts once per second"
OUT=$CLUSTER/curl.out
curl -sN --max-time 6 "$URL" >"$OUT" 2>&1 &
CURL_PID=$!
sleep 0.5
"${PSQL[@]}" -c "SELECT pgbus_stream.broadcast('demo', '<turbo-stream action=\"append\" target=\"messages\"><template><p>hello</p></template></turbo-stream>') AS msg_id"
for i in 2 3 4; do
	sleep 1
	"${PSQL[@]}" -At -c "SELECT 'broadcast ' || pgbus_stream.broadcast('demo', 'message $i at ' || clock_timestamp()::time(0))"
done
sleep 1
"${PSQL[@]}" -At -c "SELECT 'broadcast ' || pgbus_stream.broadcast('demo', E'two lines:\\nsecond line', 'custom:event')"
"${PSQL[@]}" -At -c "BEGIN; SELECT 'rolled back (never sent) ' || pgbus_stream.broadcast('demo', 'rolled back'); ROLLBACK;"
wait "$CURL_PID" || true

say "what curl received"
cat "$OUT"

VIEWER="http://127.0.0.1:$SSE_PORT/viewer?stream=demo"
say "stream URL: $URL"
if [ $KEEP -eq 1 ]; then
	# A producer for whoever opens the viewer: one broadcast a second for 60 s,
	# detached from this script's output (its log is $CLUSTER/ticker.log) and
	# deaf to the hangup that may follow this script's exit (sudo's pty). It
	# stops early when the cluster is stopped.
	(
		trap '' HUP
		for i in $(seq 1 60); do
			"${PSQL[@]}" -At -c "SELECT 'broadcast ' || pgbus_stream.broadcast('demo', 'tick $i/60 at ' || clock_timestamp()::time(0))" \
				|| [ -f "$CLUSTER/data/postmaster.pid" ] || break
			sleep 1
		done
	) </dev/null >"$CLUSTER/ticker.log" 2>&1 &
	TICKER_PID=$!
	cat <<EOF
The demo server is still running. Try:
  curl -sN $URL
  ${PSQL[*]} -c "SELECT pgbus_stream.broadcast('demo', 'hi')"
Stop it with:
  ${PGCTL[*]} stop
EOF
	say "viewer: $VIEWER"
	echo "Open it in a browser on this machine: a message is broadcast to 'demo' every second"
	echo "for the next 60 s (background process $TICKER_PID, log $CLUSTER/ticker.log)."
else
	stop_cluster
	trap - EXIT
	echo "demo cluster stopped (run with --keep to leave it running)"
	say "viewer: $VIEWER"
	echo "That page lists a stream's messages live while the server runs: run with --keep,"
	echo "then open it; messages keep arriving once a second for 60 s."
fi
