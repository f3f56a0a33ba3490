#!/usr/bin/env bash
# Side-by-side benchmark: pgbus_stream vs nginx+nchan vs a LISTEN/NOTIFY->SSE
# relay in Node, driven by the same load client (bench/bin/sse_load) and
# publisher (bench/bin/publisher). See bench/README.md.
#
#   bench/run.sh [--quick] [--systems pgbus,nchan,relay]
#                [--scenarios fanout,saturation,streams,producer,idle,slow] [options]
#
# Results: bench/results/<timestamp>/ (*.json per scenario, summary.json,
# results.md, throughput.png, latency.png). Everything it starts is stopped on
# exit; the throwaway cluster and peer state live in bench/.tmp. PERF_EVENTS:
# perf events counted in the pgbus_stream workers during each measured run
# (raw/<name>.perf), e.g. a uprobe on http::Server::tick(), once per turn.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
# PG_CONFIG selects the PostgreSQL (15, 17 or 18; default Debian's 15), or
# PGBIN its programs directly.
if [ -z "${PGBIN:-}" ] && [ -n "${PG_CONFIG:-}" ]; then
    PGBIN=$("$PG_CONFIG" --bindir) || { echo "run.sh: $PG_CONFIG --bindir failed" >&2; exit 1; }
fi
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_MAJOR=$("$PGBIN/pg_config" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
PG_MAJOR=${PG_MAJOR:-15}

# ---------------------------------------------------------------- options ----
SYSTEMS=pgbus,nchan,relay
SCENARIOS=fanout,saturation,streams,producer,idle,slow
QUICK=0
DURATION=""            # publish seconds per fan-out / saturation / streams run
WARMUP=""
RATE=1000
FANOUT_NS=""
SAT_PUB_CONNS=8
FIXED_PUB_CONNS=8
STREAMS=1000
SUBS_PER_STREAM=10
STREAMS_RATE=1000
PGBENCH_TIME=""
PGBENCH_CLIENTS=1,8
PRODUCER_COMMIT=off,on  # synchronous_commit of the producer runs
PRODUCER_ROUNDS=""      # producer variants interleaved this many times
ROUNDS=""               # load and idle scenarios repeated this many times, systems interleaved
IDLE_CONNS=""
IDLE_HOLD=""
WORKERS=2
CLIENT_PROCS=auto
SRC_ADDRS=127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8
RAMP_TIMEOUT=""
OUT=""
KEEP=0
NO_INSTALL=0
PAD=0
SLOW_LIVE=1000          # slow scenario: live subscribers
SLOW_STALLED=1000       # slow scenario: clients that stop reading, in the last run
SLOW_RATE=200
SLOW_PAD=2048
STALLED=0               # run_load: clients that stop reading, started before the live ones
PGBUS_READY_EVENT="pgbus:connected"
PGBUS_BROADCAST_SQL='SELECT pgbus_stream.broadcast($1, $2)'
PGBUS_CREATE_SQL="SELECT pgbus_stream.create_stream(%s, public => true)"     # %s -> quoted stream name
HOOK_TABLE=pgbus_stream.q_bench_hook                          # attach() finds pgmq.q_<queue> or pgbus_stream.q_<queue>
PGBUS_ATTACH_SQL="SELECT pgbus_stream.attach('bench_hook', public => true)"
HOOK_STREAM=bench_hook                                        # watched during the producer runs
IDLE_HOOK_TABLE=pgbus_stream.q_bench_idle                     # attached, nobody connected
PGBUS_ATTACH_IDLE_SQL="SELECT pgbus_stream.attach('bench_idle', public => true)"
PGBUS_CONF="pgbus_stream.max_connections = 20000"             # extra postgresql.conf lines, ';'-separated

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

Options (defaults in brackets; --quick shortens durations and sizes):
  --systems LIST         pgbus,nchan,relay [$SYSTEMS]
  --scenarios LIST       fanout,saturation,streams,producer,idle,slow [$SCENARIOS]
  --quick                whole run under ~3 minutes
  --duration S           publish seconds per fan-out run [8; quick 3]
  --warmup S             not-measured seconds at the start of each run [1; quick 0.5]
  --rate R               fixed publish rate, msg/s [$RATE]
  --fanout N1,N2,..      subscriber counts [100,1000,10000; quick 100,1000]
  --sat-pub-conns P      publisher connections at saturation (--rate 0) [$SAT_PUB_CONNS]
  --pub-conns P          publisher connections sharing a fixed rate [$FIXED_PUB_CONNS]
  --streams S            streams in the many-streams run [$STREAMS]
  --subs-per-stream K    subscribers per stream [$SUBS_PER_STREAM]
  --streams-rate R       total msg/s over all streams [$STREAMS_RATE]
  --pgbench-time T       seconds per pgbench run [8; quick 4]
  --pgbench-clients L    [$PGBENCH_CLIENTS]
  --producer-commit L    synchronous_commit values of the producer runs [$PRODUCER_COMMIT]
  --producer-rounds N    producer variants interleaved N times, medians reported [3; quick 1]
  --rounds N             idle, fan-out, saturation, streams and slow scenarios repeated N
                         times, every system once per round; medians and ranges reported [3; quick 1]
  --idle-conns K         connections held in the idle run [10000; quick 2000]
  --idle-hold S          seconds they are held [5; quick 2]
  --workers N            pgbus_stream.workers [$WORKERS]
  --client-procs N|auto  load-client processes [auto: 1 per 12000 connections]
  --src-addrs LIST       client source addresses [127.0.0.1..127.0.0.8]
  --ramp-timeout S       connections not up after S seconds count as failed [30; quick 5]
  --pad N                bytes of padding per message [$PAD]
  --slow-live N          slow scenario: live subscribers [$SLOW_LIVE]
  --slow-stalled N       slow scenario: stalled clients in its last run [$SLOW_STALLED]
  --slow-rate R          slow scenario: msg/s [$SLOW_RATE]
  --slow-pad N           slow scenario: padding bytes per message [$SLOW_PAD]
  --out DIR              results directory [bench/results/<timestamp>]
  --keep                 keep bench/.tmp (cluster, logs) after the run
  --no-install           never call apt-get / npm
  --pgbus-ready-event E  SSE event that marks a pgbus connection live ['$PGBUS_READY_EVENT'; '' = headers]
  --pgbus-broadcast-sql Q  [$PGBUS_BROADCAST_SQL]
  --hook-table T         PGMQ-layout table created for the attach run [$HOOK_TABLE]
  --pgbus-attach-sql Q   [$PGBUS_ATTACH_SQL]
  --hook-stream S        stream of --hook-table, watched by one live and one stalled client [$HOOK_STREAM]
  --idle-hook-table T    second attached table, nobody connected [$IDLE_HOOK_TABLE]
  --pgbus-attach-idle-sql Q  [$PGBUS_ATTACH_IDLE_SQL]
  --pgbus-conf 'k=v;..'  extra postgresql.conf lines for pgbus runs ['$PGBUS_CONF']
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --systems) SYSTEMS=$2; shift 2 ;;
        --scenarios) SCENARIOS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --fanout) FANOUT_NS=$2; shift 2 ;;
        --sat-pub-conns) SAT_PUB_CONNS=$2; shift 2 ;;
        --pub-conns) FIXED_PUB_CONNS=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --subs-per-stream) SUBS_PER_STREAM=$2; shift 2 ;;
        --streams-rate) STREAMS_RATE=$2; shift 2 ;;
        --pgbench-time) PGBENCH_TIME=$2; shift 2 ;;
        --pgbench-clients) PGBENCH_CLIENTS=$2; shift 2 ;;
        --producer-commit) PRODUCER_COMMIT=$2; shift 2 ;;
        --producer-rounds) PRODUCER_ROUNDS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --idle-conns) IDLE_CONNS=$2; shift 2 ;;
        --idle-hold) IDLE_HOLD=$2; shift 2 ;;
        --workers) WORKERS=$2; shift 2 ;;
        --client-procs) CLIENT_PROCS=$2; shift 2 ;;
        --src-addrs) SRC_ADDRS=$2; shift 2 ;;
        --ramp-timeout) RAMP_TIMEOUT=$2; shift 2 ;;
        --pad) PAD=$2; shift 2 ;;
        --slow-live) SLOW_LIVE=$2; shift 2 ;;
        --slow-stalled) SLOW_STALLED=$2; shift 2 ;;
        --slow-rate) SLOW_RATE=$2; shift 2 ;;
        --slow-pad) SLOW_PAD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --no-install) NO_INSTALL=1; shift ;;
        --pgbus-ready-event) PGBUS_READY_EVENT=$2; shift 2 ;;
        --pgbus-broadcast-sql) PGBUS_BROADCAST_SQL=$2; shift 2 ;;
        --pgbus-attach-sql) PGBUS_ATTACH_SQL=$2; shift 2 ;;
        --hook-table) HOOK_TABLE=$2; shift 2 ;;
        --hook-stream) HOOK_STREAM=$2; shift 2 ;;
        --idle-hook-table) IDLE_HOOK_TABLE=$2; shift 2 ;;
        --pgbus-attach-idle-sql) PGBUS_ATTACH_IDLE_SQL=$2; shift 2 ;;
        --pgbus-conf) PGBUS_CONF=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

PAUSE=1   # seconds between runs
if [ "$QUICK" = 1 ]; then
    PAUSE=0.3
    : "${DURATION:=3}" "${WARMUP:=0.5}" "${FANOUT_NS:=100,1000}" "${PGBENCH_TIME:=4}" "${PRODUCER_ROUNDS:=1}" "${ROUNDS:=1}"
    : "${IDLE_CONNS:=2000}" "${IDLE_HOLD:=2}" "${RAMP_TIMEOUT:=5}"
else
    : "${DURATION:=8}" "${WARMUP:=1}" "${FANOUT_NS:=100,1000,10000}" "${PGBENCH_TIME:=8}" "${PRODUCER_ROUNDS:=3}" "${ROUNDS:=3}"
    : "${IDLE_CONNS:=10000}" "${IDLE_HOLD:=5}" "${RAMP_TIMEOUT:=30}"
fi

has() { case ",$1," in *",$2,"*) return 0 ;; *) return 1 ;; esac; }
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'run.sh: ERROR: %s\n' "$*" >&2; exit 1; }

for s in ${SYSTEMS//,/ }; do
    case $s in pgbus|nchan|relay) ;; *) die "unknown system '$s' (pgbus, nchan, relay)" ;; esac
done
for s in ${SCENARIOS//,/ }; do
    case $s in fanout|saturation|streams|producer|idle|slow) ;; *) die "unknown scenario '$s'" ;; esac
done
for v in ROUNDS PRODUCER_ROUNDS; do
    opt=${v,,}; opt=${opt//_/-}
    [[ "${!v}" =~ ^[1-9][0-9]?$ ]] || die "--$opt must be a whole number from 1 to 99 (got '${!v}')"
done

TMP=${BENCH_TMP:-$BENCH/.tmp}   # BENCH_TMP: put the cluster elsewhere
exec 9>"$BENCH/.run.lock"
flock -n 9 || die "another bench/run.sh is running (lock $BENCH/.run.lock)"
STAMP=$(date +%Y%m%d-%H%M%S)
[ -n "$OUT" ] || OUT=$BENCH/results/$STAMP
RAW=$OUT/raw
LOGS=$OUT/logs
T_START=$(date +%s)
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------- process control ---
BG_PIDS=()
PG_STARTED=0
PG_PID=""
PGDATA=$TMP/pg
cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    for pid in "${BG_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        local alive=0
        for pid in "${BG_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.3
    done
    for pid in "${BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    if [ "$PG_STARTED" = 1 ]; then
        as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
            as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m immediate -w -t 10 stop >/dev/null 2>&1
        # pg_ctl can fail (e.g. the data directory changed owner under us): signal the postmaster itself
        if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null; then
            kill -QUIT "$PG_PID" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.5; done
            kill -KILL "$PG_PID" 2>/dev/null
        fi
    fi
    if [ "$KEEP" = 0 ] && [ -d "$TMP" ]; then
        [ -d "$LOGS" ] && cp -f "$TMP"/*.log "$TMP"/nchan/error.log "$LOGS"/ 2>/dev/null
        rm -rf "$TMP"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

bg_forget() { local keep=() p; for p in "${BG_PIDS[@]}"; do [ "$p" != "$1" ] && keep+=("$p"); done; BG_PIDS=("${keep[@]}"); }

if [ "$(id -u)" = 0 ]; then
    as_pg() { runuser -u postgres -- "$@"; }
    PGUSER_OWNER=postgres
else
    as_pg() { "$@"; }
    PGUSER_OWNER=$(id -un)
fi

port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
pick_port() {
    local p=$1
    while ! port_free "$p" || has "${USED_PORTS:-}" "$p"; do p=$((p + 1)); [ $p -lt $(($1 + 500)) ] || die "no free port near $1"; done
    USED_PORTS="${USED_PORTS:-},$p"
    echo "$p"
}

# http_status PORT PATH -> prints the status code (000 when nothing answers)
http_status() {
    local code
    code=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
             printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
             IFS= read -r -t 3 line <&3 && echo "$line") 2>/dev/null | awk '{print $2}')
    echo "${code:-000}"
}
wait_http_any() {   # PORT PATH TIMEOUT_S: any HTTP status will do
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        [ "$(http_status "$1" "$2")" != 000 ] && return 0
        sleep 0.1
    done
    return 1
}
wait_http() {   # PORT PATH TIMEOUT_S PID(optional, must stay alive)
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        [ "$(http_status "$1" "$2")" = 200 ] && return 0
        if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then return 1; fi
        sleep 0.1
    done
    return 1
}

# ------------------------------------------------------------ /proc helpers ---
# ticks PID [with_children] -> utime+stime (+cutime+cstime) in clock ticks
ticks() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s "${2:-0}"
    local with=${!#}
    if [ "$with" = 1 ]; then echo $((${12} + ${13} + ${14} + ${15})); else echo $((${12} + ${13})); fi
}
children() { pgrep -P "$1" 2>/dev/null | tr '\n' ' '; }
postmaster_pid() { head -1 "$PGDATA/postmaster.pid" 2>/dev/null; }
# CPU ticks of the whole cluster: live processes + reaped children of the postmaster
pg_ticks() {
    local pm t c
    pm=$(postmaster_pid)
    [ -n "$pm" ] || { echo 0; return; }
    t=$(ticks "$pm" 1)
    for c in $(children "$pm"); do t=$((t + $(ticks "$c"))); done
    echo "$t"
}
pids_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
# tree_ticks PID: the process and its direct children
tree_ticks() { local t c; t=$(ticks "$1" 1); for c in $(children "$1"); do t=$((t + $(ticks "$c"))); done; echo "$t"; }
# mem PIDS... -> "rss_kb pss_kb" summed over the processes (smaps_rollup)
mem() {
    local r=0 p=0 pid
    for pid in "$@"; do
        [ -r "/proc/$pid/smaps_rollup" ] || continue
        read -r rr pp < <(awk '/^Rss:/{r=$2} /^Pss:/{p=$2} END{print r+0, p+0}' "/proc/$pid/smaps_rollup")
        r=$((r + rr)); p=$((p + pp))
    done
    echo "$r $p"
}
sec() { awk -v t="$1" -v h="$CLK_TCK" 'BEGIN{printf "%.3f", t / h}'; }

# Peak memory sampler: writes "max_rss max_pss" to $1 every 0.5 s; bounded.
start_sampler() {
    local out=$1; shift
    (
        maxr=0; maxp=0
        for ((i = 0; i < 2400; i++)); do
            read -r r p < <(mem "$@")
            [ "$r" -gt "$maxr" ] && maxr=$r
            [ "$p" -gt "$maxp" ] && maxp=$p
            echo "$maxr $maxp" > "$out.tmp" && mv -f "$out.tmp" "$out"
            sleep 0.5
        done
    ) 9>&- &
    SAMPLER_PID=$!
    BG_PIDS+=("$SAMPLER_PID")
}
stop_sampler() { kill "$SAMPLER_PID" 2>/dev/null; wait "$SAMPLER_PID" 2>/dev/null || true; bg_forget "$SAMPLER_PID"; }

# --------------------------------------------------------------- preflight ---
need_pgbus() { has "$SYSTEMS" pgbus; }
need_relay() { has "$SYSTEMS" relay; }
need_nchan() { has "$SYSTEMS" nchan; }
needs_pg() { need_pgbus || need_relay || has "$SCENARIOS" producer; }

install_pkgs() {
    [ "$NO_INSTALL" = 1 ] && die "missing packages: $* (rerun without --no-install, or install them)"
    [ "$(id -u)" = 0 ] || die "missing packages: $* (run as root or install them: apt-get install $*)"
    log "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "$@" >"$TMP/apt.log" 2>&1 ||
        { apt-get update >>"$TMP/apt.log" 2>&1 && apt-get install -y --no-install-recommends "$@" >>"$TMP/apt.log" 2>&1; } ||
        { tail -20 "$TMP/apt.log" >&2; die "apt-get install $* failed"; }
}

mkdir -p "$TMP" "$OUT" "$RAW" "$LOGS"
# stale state from an interrupted run
if [ -f "$PGDATA/postmaster.pid" ]; then
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
fi
rm -rf "${TMP:?}"/*

missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
[ -f /usr/include/postgresql/libpq-fe.h ] || missing+=(libpq-dev)
if needs_pg; then [ -x "$PGBIN/initdb" ] && [ -x "$PGBIN/pgbench" ] || missing+=("postgresql-$PG_MAJOR" postgresql-contrib); fi
command -v node >/dev/null || missing+=(nodejs)
command -v jq >/dev/null || missing+=(jq)
if need_relay; then command -v npm >/dev/null || missing+=(npm); fi
if need_nchan; then
    command -v nginx >/dev/null || missing+=(nginx-core)
    [ -f /usr/lib/nginx/modules/ngx_nchan_module.so ] || missing+=(libnginx-mod-nchan)
fi
command -v gnuplot >/dev/null || missing+=(gnuplot-nox)
[ ${#missing[@]} -eq 0 ] || install_pkgs "${missing[@]}"

if need_pgbus; then
    libdir=$("$PGBIN/pg_config" --pkglibdir)
    sharedir=$("$PGBIN/pg_config" --sharedir)
    [ -f "$libdir/pgbus_stream.so" ] && [ -f "$sharedir/extension/pgbus_stream.control" ] ||
        die "the pgbus_stream extension is not installed for PostgreSQL $PG_MAJOR ($libdir/pgbus_stream.so, $sharedir/extension/pgbus_stream.control).
  Run 'make install PG_CONFIG=$PGBIN/pg_config' in the repository root first, or leave it out: --systems nchan,relay"
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge 4096 ] || log "warning: only $(ulimit -n) open files allowed; large runs will fail"

log "building load client and publisher"
make -s -C "$BENCH" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; die "build failed"; }
SSE_LOAD=$BENCH/bin/sse_load
PUBLISHER=$BENCH/bin/publisher

# ------------------------------------------------------------ start systems ---
PGPORT=$(pick_port 25432)
PGBUS_PORT=$(pick_port 28080)
NCHAN_PORT=$(pick_port 28090)
RELAY_PORT=$(pick_port 28100)
PGSOCK=$TMP/sock
CONNINFO="host=$PGSOCK port=$PGPORT dbname=postgres user=postgres"
psql_q() { "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -q -At -h "$PGSOCK" -p "$PGPORT" -U postgres -d postgres "$@"; }
PGBUS_WORKER_PIDS=""

start_pg() {
    log "initdb + start PostgreSQL $PG_MAJOR ($PGBIN) on port $PGPORT"
    mkdir -p "$PGDATA" "$PGSOCK"
    chown "$PGUSER_OWNER" "$TMP" "$PGDATA" "$PGSOCK" 2>/dev/null || true
    chmod 700 "$PGDATA"
    as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --no-sync >"$TMP/initdb.log" 2>&1 ||
        { cat "$TMP/initdb.log" >&2; die "initdb failed"; }
    {
        echo "port = $PGPORT"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$PGSOCK'"
        echo "max_connections = 200"
        echo "max_locks_per_transaction = 256"
        echo "shared_buffers = 512MB"
        echo "max_wal_size = 8GB"
        echo "checkpoint_timeout = 30min"
        echo "log_min_messages = warning"
        if need_pgbus; then
            echo "shared_preload_libraries = 'pgbus_stream'"
            echo "pgbus_stream.port = $PGBUS_PORT"
            echo "pgbus_stream.workers = $WORKERS"
            printf '%s\n' "$PGBUS_CONF" | tr ';' '\n' | sed -e 's/^ *//' -e '/^$/d'
        fi
    } >> "$PGDATA/postgresql.conf"
    pg_up
    if need_pgbus; then
        local err
        err=$(psql_q -c "CREATE EXTENSION pgbus_stream" 2>&1) ||
            die "CREATE EXTENSION pgbus_stream failed: $err"
        err=$(psql_q -c "$(printf "$PGBUS_CREATE_SQL" "'bench'")" 2>&1) ||
            die "creating stream 'bench' failed: $err"
        if has "$SCENARIOS" streams; then
            log "creating $STREAMS pgbus streams"
            local i sql=""
            for ((i = 0; i < STREAMS; i++)); do
                sql+="$(printf "$PGBUS_CREATE_SQL" "'bench_$i'");"$'\n'
                # one transaction per 100 streams: each takes several locks
                if [ $(((i + 1) % 100)) = 0 ] || [ $((i + 1)) = "$STREAMS" ]; then
                    err=$(printf 'BEGIN;\n%sCOMMIT;\n' "$sql" | psql_q 2>&1 >/dev/null) ||
                        die "creating streams failed: $err"
                    sql=""
                fi
            done
        fi
        find_workers
    fi
}
pg_up() {
    # runuser goes through PAM, which resets the open-files limit: raise it inside
    as_pg bash -c 'ulimit -n "$(ulimit -Hn)"; exec "$@"' _ \
        "$PGBIN/pg_ctl" -D "$PGDATA" -l "$TMP/postgres.log" -w -t 60 start >/dev/null 2>&1 9>&- ||
        { tail -30 "$TMP/postgres.log" >&2; die "PostgreSQL did not start (log above)"; }
    PG_STARTED=1
    PG_PID=$(postmaster_pid)
}
find_workers() {
    wait_http_any "$PGBUS_PORT" /healthz 20 ||
        die "pgbus_stream does not answer HTTP on 127.0.0.1:$PGBUS_PORT (see $LOGS/postgres.log)"
    local hs
    hs=$(http_status "$PGBUS_PORT" /healthz)
    [ "$hs" = 200 ] || log "note: pgbus_stream answers GET /healthz with $hs (the README lists /healthz)"
    PGBUS_WORKER_PIDS=$(psql_q -c "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'pgbus_stream%'" | tr '\n' ' ')
    [ -n "${PGBUS_WORKER_PIDS// /}" ] ||
        die "no pgbus_stream worker in pg_stat_activity (backend_type LIKE 'pgbus_stream%')"
    log "pgbus_stream on 127.0.0.1:$PGBUS_PORT, worker pids: $PGBUS_WORKER_PIDS"
}
# a fresh server (the idle runs after the first round): same cluster and streams
restart_pg() {
    log "restarting PostgreSQL for a fresh worker"
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null 2>&1 || die "PostgreSQL did not stop"
    pg_up
    find_workers
}

NGINX_PID=""
start_nchan() {
    log "starting nginx + nchan on port $NCHAN_PORT"
    "$BENCH/peers/start_nchan.sh" "$NCHAN_PORT" "$TMP/nchan" >"$TMP/nchan.log" 2>&1 9>&- &
    NGINX_PID=$!
    BG_PIDS+=("$NGINX_PID")
    wait_http "$NCHAN_PORT" /healthz 20 "$NGINX_PID" ||
        { cat "$TMP/nchan.log" "$TMP/nchan/error.log" 2>/dev/null | tail -20 >&2; die "nginx+nchan did not start"; }
}
nchan_workers() { children "$NGINX_PID"; }
stop_bg() {   # PID: TERM, wait up to 5 s, then KILL
    local pid=$1 i
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    bg_forget "$pid"
}

RELAY_PID=""
start_relay() {
    log "starting LISTEN/NOTIFY relay on port $RELAY_PORT"
    if [ ! -d "$BENCH/peers/notify_relay/node_modules/pg" ] && [ "$NO_INSTALL" = 1 ]; then
        die "bench/peers/notify_relay needs 'npm ci' (pg package); rerun without --no-install"
    fi
    PGHOST=127.0.0.1 PGPORT=$PGPORT PGUSER=postgres PGDATABASE=postgres \
        "$BENCH/peers/notify_relay/start_relay.sh" "$RELAY_PORT" >"$TMP/relay.log" 2>&1 9>&- &
    RELAY_PID=$!
    BG_PIDS+=("$RELAY_PID")
    wait_http "$RELAY_PORT" /healthz 60 "$RELAY_PID" ||
        { tail -20 "$TMP/relay.log" >&2; die "notify relay did not start"; }
}

# Every run starts from a fresh peer process, and no other peer runs beside it
# (a relay that fell behind keeps draining its backlog for minutes and would
# spoil whatever runs next, its own run or another system's); pgbus_stream
# (not restartable without restarting PostgreSQL) must at least be idle.
fresh_system() {
    stop_bg "$NGINX_PID"; NGINX_PID=""
    stop_bg "$RELAY_PID"; RELAY_PID=""
    case $1 in
        nchan) start_nchan ;;
        relay) start_relay ;;
        pgbus) settle_pgbus ;;
    esac
}
# wait (at most 20 s) until the pgbus_stream workers are idle
settle_pgbus() {
    local i a b
    for ((i = 0; i < 40; i++)); do
        # shellcheck disable=SC2086
        a=$(pids_ticks $PGBUS_WORKER_PIDS); sleep 0.5
        # shellcheck disable=SC2086
        b=$(pids_ticks $PGBUS_WORKER_PIDS)
        [ $((b - a)) -le $((CLK_TCK / 20)) ] && return 0
    done
    log "warning: pgbus_stream workers still busy after 20 s"
}

if needs_pg; then start_pg; fi
if need_nchan; then start_nchan; fi
if need_relay; then start_relay; fi

# -------------------------------------------------------------- scenarios ----
client_procs_for() {
    if [ "$CLIENT_PROCS" = auto ]; then echo $(( ($1 + 11999) / 12000 )); else echo "$CLIENT_PROCS"; fi
}
sys_port() { case $1 in pgbus) echo "$PGBUS_PORT" ;; nchan) echo "$NCHAN_PORT" ;; relay) echo "$RELAY_PORT" ;; esac; }
# server-side pids whose memory is the system's own
sys_mem_pids() {
    case $1 in
        pgbus) echo "$PGBUS_WORKER_PIDS" ;;
        nchan) nchan_workers ;;
        relay) echo "$RELAY_PID" ;;
    esac
}
# CPU of the whole system under test, in ticks (see README: what is counted)
sys_ticks() {
    case $1 in
        pgbus) pg_ticks ;;
        nchan) tree_ticks "$NGINX_PID" ;;
        relay) echo $(( $(pg_ticks) + $(ticks "$RELAY_PID") )) ;;
    esac
}
# pgbus: the workers found at start are still there (a crash makes the
# postmaster restart them under new pids); /healthz alone is not a liveness
# test, a worker still draining a 10 000-connection backlog answers late.
pgbus_alive() {
    local p
    [ -n "$PGBUS_WORKER_PIDS" ] || return 1
    for p in $PGBUS_WORKER_PIDS; do kill -0 "$p" 2>/dev/null || return 1; done
}
alive_check() {
    case $1 in
        pgbus) pgbus_alive ;;
        nchan) kill -0 "$NGINX_PID" 2>/dev/null ;;
        relay) kill -0 "$RELAY_PID" 2>/dev/null ;;
    esac
}

FAILURES=0
META_EXTRA=()   # key=value pairs every write_meta adds (the round of the load scenarios)
# write_meta NAME key=value... (numbers unquoted when they look like numbers)
write_meta() {
    local name=$1; shift
    local kv k v first=1
    {
        printf '{'
        for kv in "$@" "${META_EXTRA[@]}"; do
            k=${kv%%=*}; v=${kv#*=}
            [ $first = 1 ] || printf ','
            first=0
            if [[ "$v" =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then printf '"%s":%s' "$k" "$v"
            else v=${v//\\/\\\\}; v=${v//\"/\\\"}; printf '"%s":"%s"' "$k" "$v"; fi
        done
        printf '}\n'
    } > "$RAW/$name.meta.json"
}

# wait_ready FILE PID: until the load client PID wrote its ready FILE (or died),
# at most the ramp timeout plus 20 s
wait_ready() {
    local i
    for ((i = 0; i < (RAMP_TIMEOUT + 20) * 10; i++)); do
        [ -f "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# run_load SYSTEM SCENARIO NAME CONNS STREAMS RATE PUB_CONNS DURATION
run_load() {
    local sys=$1 scen=$2 name=$3 conns=$4 streams=$5 rate=$6 pconns=$7 dur=$8
    local port path procs ready expect cdur rc=0 prc=0
    port=$(sys_port "$sys")
    if [ "$streams" -gt 1 ]; then path='/streams/bench_{i}'; else path=/streams/bench; fi
    procs=$(client_procs_for "$conns")
    ready=$TMP/$name.ready
    expect=$TMP/$name.expect
    rm -f "$ready" "$expect"
    # the client outlives a publisher that falls behind schedule (its hard stop is
    # duration + max(5, duration)); it ends early once every seq has arrived
    cdur=$(awk -v d="$dur" 'BEGIN{printf "%d", 2 * d + (d > 5 ? 0 : 5 - d) + 10}')
    fresh_system "$sys"
    if ! alive_check "$sys"; then
        log "$name: SKIPPED, $sys is not running"
        write_meta "$name" system="$sys" scenario="$scen" status=system_down conns="$conns" streams="$streams" rate="$rate"
        FAILURES=$((FAILURES + 1))
        return
    fi
    local ev_args=()
    [ "$sys" = pgbus ] && [ -n "$PGBUS_READY_EVENT" ] && ev_args=(--ready-event "$PGBUS_READY_EVENT")
    local mem_before spid="" stalled_ok=0
    local od0=0
    [ "$sys" = pgbus ] && od0=$(psql_q -c "SELECT coalesce(sum(overflow_dropped),0) FROM pgbus_stream.stats()" 2>/dev/null || echo 0)
    if [ "$STALLED" -gt 0 ]; then
        # clients that read their first event, then never read again (small
        # receive buffer, so the server's socket buffer fills soon)
        log "$name: $STALLED client(s) that stop reading"
        rm -f "$TMP/$name.stalled.ready"
        "$SSE_LOAD" --host 127.0.0.1 --port "$port" --path "$path" --streams "$streams" --conns "$STALLED" \
            --procs "$(client_procs_for "$STALLED")" --src-addrs "$SRC_ADDRS" --warmup 0 --duration $((cdur + 30)) \
            --ramp-timeout "$RAMP_TIMEOUT" --stall --rcvbuf 4096 --ready-file "$TMP/$name.stalled.ready" \
            --label "$name-stalled" "${ev_args[@]}" >"$RAW/$name.stalled.json" 2>"$LOGS/$name.stalled.log" 9>&- &
        spid=$!
        BG_PIDS+=("$spid")
        wait_ready "$TMP/$name.stalled.ready" "$spid" || true
        stalled_ok=$(sed -n 's/^ok=\([0-9]*\).*/\1/p' "$TMP/$name.stalled.ready" 2>/dev/null)
        stalled_ok=${stalled_ok:-0}
    fi
    log "$name: $conns subscribers on $streams stream(s), rate ${rate/#0/max} msg/s x ${dur}s"
    "$SSE_LOAD" --host 127.0.0.1 --port "$port" --path "$path" --streams "$streams" --conns "$conns" \
        --procs "$procs" --src-addrs "$SRC_ADDRS" --warmup "$WARMUP" --duration "$cdur" \
        --ramp-timeout "$RAMP_TIMEOUT" --drain 3 --ready-file "$ready" --expect-file "$expect" \
        --label "$name" "${ev_args[@]}" >"$RAW/$name.client.json" 2>"$LOGS/$name.client.log" 9>&- &
    local cpid=$!
    BG_PIDS+=("$cpid")
    wait_ready "$ready" "$cpid" || true
    if [ ! -f "$ready" ]; then
        wait "$cpid" || true
        bg_forget "$cpid"
        log "$name: FAILED, the client never got its connections up: $(tail -3 "$LOGS/$name.client.log" | tr '\n' ' ')"
        write_meta "$name" system="$sys" scenario="$scen" status=client_failed conns="$conns" streams="$streams" rate="$rate"
        FAILURES=$((FAILURES + 1))
        return
    fi
    local mem_pids t0 t_wall0 t1 t_wall1 w0 w1
    mem_pids=$(sys_mem_pids "$sys")
    # shellcheck disable=SC2086
    mem_before=$(mem $mem_pids)   # every connection up, nothing published yet
    # shellcheck disable=SC2086
    start_sampler "$TMP/$name.peakmem" $mem_pids
    t0=$(sys_ticks "$sys")
    [ "$sys" = pgbus ] && w0=$(pids_ticks $PGBUS_WORKER_PIDS)
    # PERF_EVENTS (e.g. a uprobe on the worker's turn): counted in the
    # workers for the measured window, into raw/<name>.perf
    local perf_pid=""
    if [ "$sys" = pgbus ] && [ -n "${PERF_EVENTS:-}" ]; then
        perf stat -x, -e "$PERF_EVENTS" -p "$(echo $PGBUS_WORKER_PIDS | tr ' ' ,)" -o "$RAW/$name.perf" &
        perf_pid=$!
        BG_PIDS+=("$perf_pid")
    fi
    t_wall0=$(date +%s.%N)
    if [ "$sys" = nchan ]; then
        "$PUBLISHER" --target nchan --host 127.0.0.1 --port "$NCHAN_PORT" --pub-path '/pub/{s}' --stream bench --streams "$streams" --stream-prefix bench_ \
            --rate "$rate" --duration "$dur" --conns "$pconns" --pad "$PAD" --expect-out "$expect" \
            --label "$name" >"$RAW/$name.publisher.json" 2>"$LOGS/$name.publisher.log" || prc=$?
    else
        local sql
        if [ "$sys" = pgbus ]; then sql=$PGBUS_BROADCAST_SQL; else sql='SELECT pg_notify($1, $2)'; fi
        "$PUBLISHER" --target sql --sql "$sql" --conninfo "$CONNINFO" --stream bench --streams "$streams" \
            --stream-prefix bench_ --rate "$rate" --duration "$dur" --conns "$pconns" --pad "$PAD" \
            --expect-out "$expect" --label "$name" >"$RAW/$name.publisher.json" 2>"$LOGS/$name.publisher.log" || prc=$?
    fi
    wait "$cpid" || rc=$?
    bg_forget "$cpid"
    t1=$(sys_ticks "$sys")
    [ "$sys" = pgbus ] && w1=$(pids_ticks $PGBUS_WORKER_PIDS)
    t_wall1=$(date +%s.%N)
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null; wait "$perf_pid" 2>/dev/null || true
        bg_forget "$perf_pid"
    fi
    stop_sampler
    local mem_end stalled_extra=()
    # shellcheck disable=SC2086
    mem_end=$(mem $(sys_mem_pids "$sys"))
    if [ -n "$spid" ]; then
        # still connected at the end = not disconnected by the server
        local still q=""
        still=$(ss -Htn state established "dport = :$port" 2>/dev/null | wc -l)
        if [ "$sys" = pgbus ]; then
            # the server's own view: what the stalled connections hold queued
            # (connections() is at most 500 ms old) and what the policy dropped
            q=$(psql_q -F ' ' -c "SELECT coalesce(sum(queued_events),0), coalesce(sum(queued_bytes),0), coalesce(max(queued_events),0), coalesce(max(queued_bytes),0) FROM pgbus_stream.connections()" \
                -c "SELECT coalesce(sum(overflow_dropped),0) FROM pgbus_stream.stats()" 2>/dev/null | tr '\n' ' ')
        fi
        kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null || true
        bg_forget "$spid"
        stalled_extra=(stalled="$STALLED" stalled_up="$stalled_ok" established_at_end="$still")
        if [ -n "$q" ]; then
            read -r qe qb qmaxe qmaxb od <<< "$q"
            stalled_extra+=(queued_events_end="$qe" queued_bytes_end="$qb" queued_events_max_conn="$qmaxe" \
                queued_bytes_max_conn="$qmaxb" overflow_dropped="$((od - od0))")
        fi
    fi
    local peak_rss=0 peak_pss=0
    [ -f "$TMP/$name.peakmem" ] && read -r peak_rss peak_pss < "$TMP/$name.peakmem"
    local wall status=ok
    wall=$(awk -v a="$t_wall0" -v b="$t_wall1" 'BEGIN{printf "%.3f", b - a}')
    if [ $prc -ne 0 ]; then
        status=publisher_failed
        log "$name: PUBLISHER FAILED: $(tail -3 "$LOGS/$name.publisher.log" | tr '\n' ' ')"
        FAILURES=$((FAILURES + 1))
    fi
    [ $rc -ne 0 ] && [ "$status" = ok ] && status=client_rc_$rc
    if ! alive_check "$sys"; then
        status=server_died
        log "$name: $sys DIED during the run"
        FAILURES=$((FAILURES + 1))
    fi
    local extra=()
    [ "$sys" = pgbus ] && extra=(worker_cpu_s="$(sec $((w1 - w0)))")
    write_meta "$name" system="$sys" scenario="$scen" status="$status" conns="$conns" streams="$streams" \
        rate="$rate" publisher_conns="$pconns" duration_s="$dur" wall_s="$wall" \
        server_cpu_s="$(sec $((t1 - t0)))" server_peak_rss_kb="$peak_rss" server_peak_pss_kb="$peak_pss" \
        client_procs="$procs" rss_before_kb="${mem_before% *}" pss_before_kb="${mem_before#* }" \
        rss_end_kb="${mem_end% *}" pss_end_kb="${mem_end#* }" pad="$PAD" "${extra[@]}" "${stalled_extra[@]}"
    if [ -s "$RAW/$name.client.json" ] && command -v jq >/dev/null; then
        log "$name: $(jq -r '"\(.deliveries_per_s|floor) deliveries/s, p50 \(.latency_us.p50)us p99 \(.latency_us.p99)us, lost \(.loss.missing_in_gaps) undelivered \(.loss.missing_tail) dups \(.loss.duplicates_total), ok \(.connections_ok)/\(.conns)"' "$RAW/$name.client.json")"
    fi
    sleep "$PAUSE"
}

run_idle() {   # SYSTEM CONNS HOLD_S [NAME_SUFFIX]
    local sys=$1 k=$2 hold=$3 name="$1_idle_k$2${4:-}"
    local port procs ready
    port=$(sys_port "$sys")
    procs=$(client_procs_for "$k")
    ready=$TMP/$name.ready
    rm -f "$ready"
    fresh_system "$sys"
    if ! alive_check "$sys"; then
        write_meta "$name" system="$sys" scenario=idle status=system_down conns="$k"
        FAILURES=$((FAILURES + 1))
        return
    fi
    local mem_pids before after ev_args=()
    mem_pids=$(sys_mem_pids "$sys")
    [ "$sys" = pgbus ] && [ -n "$PGBUS_READY_EVENT" ] && ev_args=(--ready-event "$PGBUS_READY_EVENT")
    # shellcheck disable=SC2086
    before=$(mem $mem_pids)
    log "$name: holding $k idle connections for ${hold}s"
    local t0 t1
    t0=$(sys_ticks "$sys")
    "$SSE_LOAD" --host 127.0.0.1 --port "$port" --path /streams/bench --conns "$k" --procs "$procs" \
        --src-addrs "$SRC_ADDRS" --warmup 0 --duration "$hold" --ramp-timeout "$RAMP_TIMEOUT" \
        --ready-file "$ready" --label "$name" "${ev_args[@]}" >"$RAW/$name.client.json" 2>"$LOGS/$name.client.log" 9>&- &
    local cpid=$!
    BG_PIDS+=("$cpid")
    wait_ready "$ready" "$cpid" || true
    sleep 1
    # shellcheck disable=SC2086
    after=$(mem $mem_pids)
    wait "$cpid" || true
    bg_forget "$cpid"
    t1=$(sys_ticks "$sys")
    local ok=0
    [ -s "$RAW/$name.client.json" ] && ok=$(jq -r '.connections_ok // 0' "$RAW/$name.client.json" 2>/dev/null || echo 0)
    local status=ok
    [ "$ok" -gt 0 ] || { status=client_failed; FAILURES=$((FAILURES + 1)); }
    write_meta "$name" system="$sys" scenario=idle status="$status" conns="$k" hold_s="$hold" \
        connections_held="$ok" rss_before_kb="${before% *}" pss_before_kb="${before#* }" \
        rss_after_kb="${after% *}" pss_after_kb="${after#* }" server_cpu_s="$(sec $((t1 - t0)))"
    log "$name: $ok connections held; RSS ${before% *} -> ${after% *} kB, PSS ${before#* } -> ${after#* } kB"
    sleep "$PAUSE"
}

setup_producer_tables() {
    local ddl
    ddl() { echo "CREATE TABLE $1(msg_id bigint generated always as identity primary key, read_ct int default 0, enqueued_at timestamptz default now(), last_read_at timestamptz, vt timestamptz default now(), message jsonb, headers jsonb);"; }
    psql_q -c "$(ddl q_plain)" -c "$(ddl q_notify)" \
        -c "CREATE FUNCTION bench_notify_insert() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN PERFORM pg_notify('q_notify', NEW.msg_id::text); RETURN NEW; END \$\$;" \
        -c "CREATE TRIGGER q_notify_insert AFTER INSERT ON q_notify FOR EACH ROW EXECUTE FUNCTION bench_notify_insert();" \
        >/dev/null
    if need_pgbus; then
        psql_q -c "$(ddl "$HOOK_TABLE")" -c "$(ddl "$IDLE_HOOK_TABLE")" >/dev/null
        local err
        err=$(psql_q -c "$PGBUS_ATTACH_SQL" 2>&1 >/dev/null) || die "attaching $HOOK_TABLE failed ($PGBUS_ATTACH_SQL): $err"
        err=$(psql_q -c "$PGBUS_ATTACH_IDLE_SQL" 2>&1 >/dev/null) || die "attaching $IDLE_HOOK_TABLE failed ($PGBUS_ATTACH_IDLE_SQL): $err"
    fi
}

# One live and one stalled subscriber on the watched hook stream for the
# whole producer scenario (bounded by its expected length plus a margin).
PROD_SUB_PIDS=()
start_producer_subscribers() {
    local secs=$1 kind pid args ev_args=()
    [ -n "$PGBUS_READY_EVENT" ] && ev_args=(--ready-event "$PGBUS_READY_EVENT")
    for kind in live stalled; do
        args=()
        [ $kind = stalled ] && args=(--stall --rcvbuf 4096)
        rm -f "$TMP/producer_$kind.ready"
        "$SSE_LOAD" --host 127.0.0.1 --port "$PGBUS_PORT" --path "/streams/$HOOK_STREAM" --conns 1 \
            --warmup 0 --duration "$secs" --ramp-timeout "$RAMP_TIMEOUT" --ready-file "$TMP/producer_$kind.ready" \
            --label "producer_$kind" "${ev_args[@]}" "${args[@]}" \
            >"$RAW/producer_subscriber_$kind.json" 2>"$LOGS/producer_subscriber_$kind.log" 9>&- &
        pid=$!
        PROD_SUB_PIDS+=("$pid")
        BG_PIDS+=("$pid")
        wait_ready "$TMP/producer_$kind.ready" "$pid" || die "the $kind subscriber of $HOOK_STREAM did not connect"
    done
    log "producer: one live and one stalled subscriber on /streams/$HOOK_STREAM"
}
stop_producer_subscribers() {
    local p
    for p in "${PROD_SUB_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; bg_forget "$p"; done
    PROD_SUB_PIDS=()
}

# run_pgbench VARIANT TABLE CLIENTS COMMIT ROUND (synchronous_commit = COMMIT
# in the pgbench sessions only)
run_pgbench() {
    local variant=$1 table=$2 clients=$3 commit=$4 round=$5 name="producer_$1_c$3_sc$4_r$5"
    local script=$TMP/$name.sql
    cat > "$script" <<EOF
INSERT INTO $table (message) VALUES ('{"html":"<turbo-stream action=\\"append\\" target=\\"messages\\"><template><p>hello</p></template></turbo-stream>"}');
EOF
    psql_q -c "CHECKPOINT" >/dev/null
    log "$name: pgbench -c $clients -T $PGBENCH_TIME into $table, synchronous_commit=$commit"
    local t0 t1 w0 w1 out rc=0
    t0=$(pg_ticks); w0=$(pids_ticks $PGBUS_WORKER_PIDS)
    out=$(PGOPTIONS="-c synchronous_commit=$commit" "$PGBIN/pgbench" -n -r -M prepared -c "$clients" -j "$clients" \
        -T "$PGBENCH_TIME" -f "$script" -h "$PGSOCK" -p "$PGPORT" -U postgres postgres 2>&1) || rc=$?
    # the backends' CPU counts once the postmaster has reaped them
    sleep 0.5
    t1=$(pg_ticks); w1=$(pids_ticks $PGBUS_WORKER_PIDS)
    printf '%s\n' "$out" > "$RAW/$name.pgbench.txt"
    local tps lat status=ok
    tps=$(printf '%s\n' "$out" | sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p')
    lat=$(printf '%s\n' "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
    if [ $rc -ne 0 ] || [ -z "$tps" ]; then
        status=pgbench_failed; FAILURES=$((FAILURES + 1))
        log "$name: FAILED: $(printf '%s\n' "$out" | tail -3 | tr '\n' ' ')"
    fi
    write_meta "$name" system="$variant" scenario=producer status="$status" variant="$variant" table="$table" \
        clients="$clients" synchronous_commit="$commit" round="$round" duration_s="$PGBENCH_TIME" \
        tps="${tps:-0}" latency_avg_ms="${lat:-0}" server_cpu_s="$(sec $((t1 - t0)))" \
        workers_cpu_s="$(sec $((w1 - w0)))"
    log "$name: ${tps:-?} tps, avg latency ${lat:-?} ms"
}

IFS=',' read -r -a SYS_LIST <<< "$SYSTEMS"
IFS=',' read -r -a N_LIST <<< "$FANOUT_NS"
IFS=',' read -r -a C_LIST <<< "$PGBENCH_CLIENTS"

# The load scenarios ROUNDS times, every system once per scenario and round:
# a slow spell of the shared machine hits every system of that round. Names
# carry _round<R> when there is more than one round; the report gives the
# median over the rounds with the range.
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    META_EXTRA=(round="$ROUND")
    R=""
    [ "$ROUNDS" -gt 1 ] && R="_round$ROUND" && log "round $ROUND of $ROUNDS"
    # idle first: every server process is fresh, so its memory baseline is
    # clean (nchan and the relay start afresh for every run; PostgreSQL is
    # restarted for the idle runs after the first round)
    if has "$SCENARIOS" idle; then
        for s in "${SYS_LIST[@]}"; do
            [ "$s" = pgbus ] && [ "$ROUND" -gt 1 ] && restart_pg
            run_idle "$s" "$IDLE_CONNS" "$IDLE_HOLD" "$R"
        done
    fi
    if has "$SCENARIOS" fanout; then
        for n in "${N_LIST[@]}"; do for s in "${SYS_LIST[@]}"; do
            run_load "$s" fanout "${s}_fanout_n${n}_r${RATE}$R" "$n" 1 "$RATE" "$FIXED_PUB_CONNS" "$DURATION"
        done; done
    fi
    if has "$SCENARIOS" saturation; then
        for n in "${N_LIST[@]}"; do for s in "${SYS_LIST[@]}"; do
            run_load "$s" saturation "${s}_saturation_n${n}$R" "$n" 1 0 "$SAT_PUB_CONNS" "$DURATION"
        done; done
    fi
    # Half the saturation rate, per system, at 1 000 subscribers (the latency
    # target is stated there): needs this round's saturation run at 1 000.
    if has "$SCENARIOS" saturation && has "$FANOUT_NS" 1000; then
        for s in "${SYS_LIST[@]}"; do
            sat=$(jq -r '.rate_achieved // 0' "$RAW/${s}_saturation_n1000$R.publisher.json" 2>/dev/null || echo 0)
            half=$(awk -v r="$sat" 'BEGIN{printf "%d", r / 2}')
            if [ "${half:-0}" -ge 1 ]; then
                run_load "$s" halfsat "${s}_halfsat_n1000_r${half}$R" 1000 1 "$half" "$FIXED_PUB_CONNS" "$DURATION"
            else
                log "${s}_halfsat$R: no saturation rate measured, skipped"
            fi
        done
    fi
    if has "$SCENARIOS" streams; then
        for s in "${SYS_LIST[@]}"; do
            run_load "$s" streams "${s}_streams_s${STREAMS}x${SUBS_PER_STREAM}$R" $((STREAMS * SUBS_PER_STREAM)) \
                "$STREAMS" "$STREAMS_RATE" "$FIXED_PUB_CONNS" "$DURATION"
        done
    fi
    if has "$SCENARIOS" slow; then
        # 1 000 live subscribers alone, then beside 1 stalled client, then beside
        # $SLOW_STALLED stalled clients (memory bound); larger payloads fill the
        # stalled clients' socket buffers and server-side queues within the run
        SAVED_PAD=$PAD; PAD=$SLOW_PAD
        for s in "${SYS_LIST[@]}"; do
            for st in 0 1 "$SLOW_STALLED"; do
                STALLED=$st
                # a worker returns freed heap to the kernel ~2 s after its
                # connections went: every run starts from a settled RSS
                sleep 2.5
                run_load "$s" slow "${s}_slow_stalled${st}$R" "$SLOW_LIVE" 1 "$SLOW_RATE" "$FIXED_PUB_CONNS" "$DURATION"
            done
        done
        STALLED=0; PAD=$SAVED_PAD
    fi
done
META_EXTRA=()
if has "$SCENARIOS" producer; then
    setup_producer_tables
    IFS=',' read -r -a SC_LIST <<< "$PRODUCER_COMMIT"
    prod_variants=(plain)
    if need_pgbus; then prod_variants+=(pgbus_unwatched pgbus_watched); fi
    prod_variants+=(notify_trigger)
    prod_runs=$(( ${#C_LIST[@]} * ${#SC_LIST[@]} * ${#prod_variants[@]} * PRODUCER_ROUNDS ))
    if need_pgbus; then start_producer_subscribers $(( prod_runs * (PGBENCH_TIME + 5) + 60 )); fi
    # variants interleaved round by round: a slow spell of the shared machine
    # (or of its disk) hits every variant of that round
    for c in "${C_LIST[@]}"; do for sc in "${SC_LIST[@]}"; do
        for ((round = 1; round <= PRODUCER_ROUNDS; round++)); do
            for v in "${prod_variants[@]}"; do
                case $v in
                    plain) t=q_plain ;;
                    pgbus_unwatched) t=$IDLE_HOOK_TABLE ;;
                    pgbus_watched) t=$HOOK_TABLE ;;
                    notify_trigger) t=q_notify ;;
                esac
                run_pgbench "$v" "$t" "$c" "$sc" "$round"
            done
        done
    done; done
    if need_pgbus; then
        # the subscribers were there all along: what the stream counted for them
        log "producer: $HOOK_STREAM stats: $(psql_q -c "SELECT 'subscribers ' || subscribers || ', emitted ' || emitted || ', queued ' || queued FROM pgbus_stream.stats() WHERE stream = '$HOOK_STREAM'" 2>&1)"
        stop_producer_subscribers
    fi
fi

# ----------------------------------------------------------------- report ----
T_END=$(date +%s)
write_meta _run started="$STAMP" elapsed_s=$((T_END - T_START)) systems="$SYSTEMS" scenarios="$SCENARIOS" \
    quick="$QUICK" rounds="$ROUNDS" producer_rounds="$PRODUCER_ROUNDS" rate="$RATE" duration_s="$DURATION" warmup_s="$WARMUP" workers="$WORKERS" \
    host="$(uname -srm)" cores="$(nproc)" failures="$FAILURES"
node "$BENCH/lib/report.js" "$OUT" || die "report generation failed"
log "done in $((T_END - T_START))s: $OUT/results.md"
[ "$FAILURES" -eq 0 ] || { log "$FAILURES scenario(s) failed, see results.md"; exit 1; }
