#!/usr/bin/env bash
# test/run_all.sh — the project's single test command.
#
#   ./test/run_all.sh                   everything (root or not)
#   ./test/run_all.sh --skip deps,fuzz  leave stages out
#   ./test/run_all.sh --only tap        run only these stages (build/install are not implied)
#   PROVE_TESTS='test/t/001_basic.pl' ./test/run_all.sh --only tap
#
# Stages, in order:
#   deps      install missing Debian packages (apt; as root, or through sudo -n)
#   checks    the sources against themselves, in seconds: every comment that
#             cites the architecture document names a heading of it that
#             exists (test/lint/citations.pl), and every fault of the mutation stage
#             still matches the code (test/mutations/run.sh --check), and every C SQL
#             function goes through PGBS_SQL_FUNCTION (test/lint/sql_functions.pl)
#   build     make (and make -C test/e2e, the TAP tests' helper programs, if present)
#   install   make install
#   regress   make installcheck-temp (pg_regress with a temporary instance)
#   unit      make -C test/unit run             (if test/unit/Makefile exists)
#   unit-san  make -C test/unit SAN=1 run       (same, clang + ASan/UBSan)
#   engine    make -C test/engine run           (the delivery engine's seeded simulation:
#             SIM_SEEDS seeds, 100000 by default, within SIM_SECONDS, 600)
#   http      make -C test/http run             (if test/http/Makefile exists)
#   fuzz      make -C test/fuzz run FUZZ_SECONDS=$FUZZ_SECONDS (if test/fuzz/Makefile exists)
#   tap       prove test/t/*.pl (PostgreSQL::Test::Cluster nodes with the worker
#             listening); from 17 on the nodes are copies of one initdb made at
#             the start of the stage (INITDB_TEMPLATE), not an initdb each
#   browser   bash test/browser/run.sh          (if it exists; real headless browser)
#   package   bash test/package/run.sh: dpkg-buildpackage -b, lintian, dpkg -i,
#             make installcheck against a running server of Debian's PostgreSQL
#             preloading the installed library, 001_basic and 091_upgrade on
#             the installed files, dpkg --purge (what it replaced is put back)
#   cassert   the same build, install, regress, tap and logs stages against
#             PostgreSQL 15 built with --enable-cassert (test/pg_cassert.sh:
#             built once from Debian's source package, then reused from its
#             cache), on a copy of the tree in $PGBUS_CASSERT_DIR; tap there
#             runs the 17 files of $PGBUS_CASSERT_TESTS (the ones through
#             what differs on 15; "all": every file), or $PROVE_TESTS
#   pg18      build (warnings as errors), install, regress, tap, the browser's
#             edge test and logs against PostgreSQL 18 built with
#             --enable-cassert (test/pg_cassert.sh 18: sid's source package,
#             built once and cached), on a copy of the tree in $PGBUS_PG18_DIR
#   pg17      build (warnings as errors), install, regress, tap, the browser's
#             edge test, package and logs against Debian trixie's PostgreSQL 17
#             packages (no assertions), inside a trixie root made once by
#             test/pg_chroot.sh (root only; the servers listen on the
#             machine's loopback)
#             cassert, pg18 and pg17 start preparing their server (a build, a
#             build, a debootstrap; reused from the cache on later runs) in
#             the background when the run begins, at nice 10 (log:
#             <dir>/prepare.log), while the other stages run.
#             So the default run has regress, tap and the browser's edge test
#             on 15, 17 and 18, and assertions on 15 (cassert: regress and
#             17 TAP files) and 18 (pg18: regress, every TAP file, the edge
#             test).
#   logs      every server log of regress, tap and browser (test/lib/LogScan.pm):
#             a process killed by a signal, a worker exit while the server was
#             not stopping, or a FATAL line of the extension fails, except kills
#             and exits a test announced (<log>.expected_signals)
#   mutations test/mutations/run.sh: plants each fault of
#             test/mutations/faults.txt, runs the test that must kill it, fails
#             if any survives. MUTATIONS_ROTATION=N plants only the faults whose
#             place in the list is the day number (UTC days since 1970) modulo
#             N, so N consecutive days plant them all. The default run (no
#             --only) uses N=3; --only mutations plants every fault.
#
# A stage that cannot run (returns 77: something it needs is missing) counts
# as a failure.
#
# PostgreSQL refuses to run as root. When this script runs as root (CI does),
# the stages that start a server (regress, tap) run as the unprivileged user
# $PGBUS_TEST_USER (default: pgbus, created if missing) in a check directory
# that user owns; the repository itself is only read. The check directory is
# $PGBUS_CHECK_DIR, else <repo>/test/t/tmp_check when that user can reach the
# repository, else /tmp/pgbus_stream_check. Logs stay there after the run.
#
# Environment: FUZZ_SECONDS (15), SIM_SEEDS, SIM_SECONDS, PROVE_TESTS (test files, default all),
# MUTATIONS_ROTATION (see mutations),
# PROVE_FLAGS (extra prove options), PROVE_JOBS (TAP files at once, default
# JOBS + 1), PGBUS_TEST_USER, PGBUS_CHECK_DIR, JOBS,
# PG_CONFIG, PGBUS_CASSERT_DIR (default /tmp/pgbus_stream_cassert),
# PGBUS_CASSERT_TESTS (cassert's TAP files, see cassert),
# PGBUS_CASSERT_PREFIX (see test/pg_cassert.sh), PGBUS_PG18_DIR,
# PGBUS_PG17_DIR, PGBUS_PG17_TREE (where pg18 and pg17 work),
# PGBUS_NESTED_STAGES (the stages pg18 and pg17 run, instead of theirs).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# PG_CONFIG (environment) selects another PostgreSQL installation (15, 17 or
# 18), e.g. an assert-enabled build or a private copy; default: Debian's 15.
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PG_MAJOR=$("$PG_CONFIG" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
PG_MAJOR=${PG_MAJOR:-15}
PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/$PG_MAJOR/bin)
PGXS_DIR=$(dirname "$(dirname "$(dirname "$("$PG_CONFIG" --pgxs 2>/dev/null || echo /usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/makefiles/pgxs.mk)")")")
PG_REGRESS=$PGXS_DIR/src/test/regress/pg_regress
PG_PERL=$PGXS_DIR/src/test/perl
export PG_CONFIG
TEST_USER=${PGBUS_TEST_USER:-pgbus}
FUZZ_SECONDS=${FUZZ_SECONDS:-15}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
ALL_STAGES=(deps checks build install regress unit unit-san engine http fuzz tap browser package cassert pg18 pg17 logs mutations)

# Debian packages the stages need (build, server, TAP harness, unit tests, demo,
# Debian package, PostgreSQL 18 from source, the trixie root of pg17).
PACKAGES=(make g++ clang libclang-rt-14-dev pkg-config libgtest-dev
	postgresql-common postgresql-15 postgresql-client-15 postgresql-server-dev-15
	libpq-dev libmicrohttpd-dev libssl-dev libipc-run-perl perl curl procps passwd util-linux
	build-essential debhelper dpkg-dev postgresql-server-dev-all lintian
	bison flex debootstrap)

ONLY=""
SKIP=""
while [ $# -gt 0 ]; do
	case "$1" in
	--only) ONLY=",$2,"; shift 2 ;;
	--only=*) ONLY=",${1#--only=},"; shift ;;
	--skip) SKIP=",$2,"; shift 2 ;;
	--skip=*) SKIP=",${1#--skip=},"; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "run_all.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done

for _s in ${ONLY//,/ } ${SKIP//,/ }; do
	[[ " ${ALL_STAGES[*]} " == *" $_s "* ]] || { echo "run_all.sh: unknown stage '$_s' (stages: ${ALL_STAGES[*]})" >&2; exit 2; }
done

wanted() {
	local s=$1
	[ -n "$ONLY" ] && [[ "$ONLY" != *",$s,"* ]] && return 1
	[[ "$SKIP" == *",$s,"* ]] && return 1
	return 0
}

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

log() { printf '\n=== %s\n' "$*"; }

now() { date +%s.%N; }

RESULTS=()    # "stage|status|seconds"
FAILED=0
PASSED=0

# run_stage NAME FUNCTION: runs FUNCTION unless NAME is deselected, times it
# and records PASS or FAIL. A function returning 77 could not run (something
# missing): that is recorded as "FAIL (skipped)", never as a pass.
run_stage() {
	local name=$1 fn=$2
	if ! wanted "$name"; then
		RESULTS+=("$name|not run|0")
		return 0
	fi
	log "stage $name"
	local t0 t1 rc
	t0=$(now)
	"$fn"
	rc=$?
	t1=$(now)
	local secs
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	if [ $rc -eq 0 ]; then
		RESULTS+=("$name|PASS|$secs")
		PASSED=$((PASSED + 1))
	elif [ $rc -eq 77 ]; then
		# A stage that could not run proves nothing: it is not a pass.
		RESULTS+=("$name|FAIL (skipped)|$secs")
		FAILED=$((FAILED + 1))
	else
		RESULTS+=("$name|FAIL (exit $rc)|$secs")
		FAILED=$((FAILED + 1))
	fi
	log "stage $name: $(echo "${RESULTS[-1]}" | cut -d'|' -f2) (${secs}s)"
	return 0
}

# as_test_user CMD...: runs CMD as the unprivileged test user when root.
as_test_user() {
	if [ $IS_ROOT -eq 1 ]; then
		runuser -u "$TEST_USER" -- "$@"
	else
		"$@"
	fi
}

# privileged CMD...: runs CMD as root (directly, or through sudo -n).
privileged() {
	if [ $IS_ROOT -eq 1 ]; then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		echo "run_all.sh: need root for: $*" >&2
		return 1
	fi
}

# ---------------------------------------------------------------- stages

stage_deps() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "installing: ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		privileged apt-get update -qq || return 1
		# No default cluster on port 5432: the tests make their own.
		if ! dpkg-query -W -f='${Status}' postgresql-common 2>/dev/null | grep -q 'ok installed'; then
			privileged apt-get install -y -qq --no-install-recommends postgresql-common || return 1
		fi
		if [ -f /etc/postgresql-common/createcluster.conf ]; then
			privileged sed -ri 's/^#?\s*create_main_cluster\s*=.*/create_main_cluster = false/' \
				/etc/postgresql-common/createcluster.conf || return 1
		fi
		privileged apt-get install -y -qq --no-install-recommends "${missing[@]}" || return 1
	else
		echo "all packages present"
	fi
	if [ $IS_ROOT -eq 1 ] && ! id -u "$TEST_USER" >/dev/null 2>&1; then
		echo "creating user $TEST_USER (PostgreSQL does not run as root)"
		useradd --create-home --shell /bin/bash "$TEST_USER" || return 1
	fi
	return 0
}

stage_build() {
	make -C "$REPO" -j"$JOBS" PG_CONFIG="$PG_CONFIG" || return 1
	# end-to-end test programs driven by the TAP tests
	if [ -f "$REPO/test/e2e/Makefile" ]; then
		make -C "$REPO/test/e2e" || return 1
	fi
}

stage_install() {
	privileged make -C "$REPO" install PG_CONFIG="$PG_CONFIG"
}

# prepare_check_dir: a fresh directory owned by the test user, holding a copy
# of what the server stages read (so the repository is never written to by
# them and needs no ownership change).
CHECK_DIR=""
PREPARED=0
resolve_check_dir() {
	if [ -n "${PGBUS_CHECK_DIR:-}" ]; then
		CHECK_DIR=$PGBUS_CHECK_DIR
	elif as_test_user test -x "$REPO" -a -r "$REPO/Makefile" 2>/dev/null; then
		CHECK_DIR=$REPO/test/t/tmp_check
	else
		CHECK_DIR=/tmp/pgbus_stream_check
	fi
}
prepare_check_dir() {
	[ $PREPARED -eq 1 ] && return 0
	if [ $IS_ROOT -eq 1 ] && ! id -u "$TEST_USER" >/dev/null 2>&1; then
		useradd --create-home --shell /bin/bash "$TEST_USER" || return 1
	fi
	resolve_check_dir
	PREPARED=1
	rm -rf "$CHECK_DIR"
	mkdir -p "$CHECK_DIR/tree/test" "$CHECK_DIR/tap" || return 1
	(cd "$REPO" && cp -R Makefile ./*.control sql "$CHECK_DIR/tree/") || return 1
	# release files, read by test/t/090_version.pl
	mkdir -p "$CHECK_DIR/tree/debian" || return 1
	(cd "$REPO" && cp META.json LICENSE README.md "$CHECK_DIR/tree/" && cp debian/changelog debian/control debian/control.in "$CHECK_DIR/tree/debian/") || return 1
	[ -d "$REPO/expected" ] && cp -R "$REPO/expected" "$CHECK_DIR/tree/"
	cp "$REPO/test/regress.conf" "$CHECK_DIR/tree/test/" 2>/dev/null
	mkdir -p "$CHECK_DIR/tree/test/t" || return 1
	cp "$REPO"/test/t/*.pl "$CHECK_DIR/tree/test/t/" 2>/dev/null
	cp -R "$REPO/test/lib" "$CHECK_DIR/tree/test/" || return 1
	[ -d "$REPO/test/e2e" ] && cp -R "$REPO/test/e2e" "$CHECK_DIR/tree/test/"
	[ -d "$REPO/test/unit/fixtures" ] && mkdir -p "$CHECK_DIR/tree/test/unit" && cp -R "$REPO/test/unit/fixtures" "$CHECK_DIR/tree/test/unit/"
	if [ $IS_ROOT -eq 1 ]; then
		chown -R "$TEST_USER:" "$CHECK_DIR" || return 1
		# The test user must be able to reach the directory.
		local d=$CHECK_DIR
		while [ "$d" != / ]; do
			d=$(dirname "$d")
			as_test_user test -x "$d" || { echo "$TEST_USER cannot enter $d" >&2; return 1; }
		done
	fi
	echo "check directory: $CHECK_DIR"
}

stage_regress() {
	prepare_check_dir || return 1
	local out=$CHECK_DIR/tree
	as_test_user env PATH="$PGBIN:$PATH" \
		make -C "$out" installcheck-temp PG_CONFIG="$PG_CONFIG"
	local rc=$?
	if [ $rc -ne 0 ] && [ -f "$out/regression.diffs" ]; then
		echo "---- $out/regression.diffs (first 200 lines)"
		head -n 200 "$out/regression.diffs"
	fi
	return $rc
}

make_if_present() {
	local dir=$1
	shift
	if [ ! -f "$REPO/$dir/Makefile" ]; then
		echo "$dir/Makefile not found: skipped"
		return 77
	fi
	make -C "$REPO/$dir" "$@"
}

stage_unit() { make_if_present test/unit run; }
stage_unit_san() { make_if_present test/unit SAN=1 run; }
stage_engine() { make_if_present test/engine run; }
stage_http() { make_if_present test/http run; }
stage_fuzz() { make_if_present test/fuzz run FUZZ_SECONDS="$FUZZ_SECONDS"; }
stage_browser() {
	if [ ! -f "$REPO/test/browser/run.sh" ]; then
		echo "test/browser/run.sh not found: skipped"
		return 77
	fi
	BROWSER_RAN=1
	# PGBUS_BROWSER_TESTS: a filter of test/browser/run.sh (default: all).
	# shellcheck disable=SC2086
	bash "$REPO/test/browser/run.sh" ${PGBUS_BROWSER_TESTS:-}
}

stage_checks() {
	local rc=0
	perl "$REPO/test/lint/citations.pl" "$REPO" || rc=1
	bash "$REPO/test/mutations/run.sh" --check || rc=1
	perl "$REPO/test/lint/sql_functions.pl" "$REPO" || rc=1
	return $rc
}

stage_mutations() {
	if [ -n "${MUTATIONS_ROTATION:-}" ]; then
		bash "$REPO/test/mutations/run.sh" --rotation "$MUTATIONS_ROTATION" $(($(date -u +%s) / 86400))
	else
		bash "$REPO/test/mutations/run.sh"
	fi
}

stage_tap() {
	prepare_check_dir || return 1
	local tree=$CHECK_DIR/tree tests=()
	if [ -n "${PROVE_TESTS:-}" ]; then
		local t
		for t in $PROVE_TESTS; do tests+=("$tree/test/t/$(basename "$t")"); done
	else
		# The longest files first, so that they do not start last and run alone.
		local slow=(050_shmem 061_gem_scale 031_slow_clients 032_reload 030_hostile 006_torture) f
		for f in "${slow[@]}"; do [ -f "$tree/test/t/$f.pl" ] && tests+=("$tree/test/t/$f.pl"); done
		for f in "$tree"/test/t/*.pl; do
			[[ " ${slow[*]} " == *" $(basename "$f" .pl) "* ]] || tests+=("$f")
		done
	fi
	if [ ! -f "${tests[0]}" ]; then
		echo "no TAP test found (${tests[*]})"
		return 1
	fi
	# Test files mostly wait on servers and sockets (about a quarter of a core
	# each): PROVE_JOBS of them run at once, default one more than the cores.
	# Every node takes its ports through PostgreSQL::Test::Cluster's port
	# locks, so files never collide.
	local jobs=${PROVE_JOBS:-$((JOBS + 1))}
	# From 17 on, PostgreSQL::Test::Cluster copies a data directory made once
	# (INITDB_TEMPLATE) into each node that asks initdb for nothing of its own
	# (none of these tests does) instead of running initdb for it: made here,
	# once per run, with the options and locale environment Cluster.pm's own
	# initdb would have (-A trust -N; LC_ALL and LANGUAGE unset, messages in C).
	local template=()
	if [ "$PG_MAJOR" -ge 17 ]; then
		local tmpl=$CHECK_DIR/tap/initdb_template
		rm -rf "$tmpl"
		if ! as_test_user env -u LC_ALL -u LANGUAGE LC_MESSAGES=C LC_NUMERIC=C PATH="$PGBIN:$PATH" \
			initdb -D "$tmpl" -A trust -N --no-instructions >"$CHECK_DIR/tap/initdb_template.log" 2>&1; then
			echo "initdb of the nodes' template failed:"
			cat "$CHECK_DIR/tap/initdb_template.log"
			return 1
		fi
		template=(INITDB_TEMPLATE="$tmpl")
	fi
	# TESTDATADIR and TESTLOGDIR (read from PostgreSQL 16 on; 15 derives the
	# same directories from TESTDIR): the nodes' data directories as absolute
	# paths, which tests hand to the server (whose working directory is its
	# data directory), and the logs where 15 keeps them.
	# shellcheck disable=SC2086
	(cd "$CHECK_DIR/tap" && as_test_user env \
		PATH="$PGBIN:$PATH" PG_REGRESS="$PG_REGRESS" TESTDIR="$CHECK_DIR/tap" \
		TESTDATADIR="$CHECK_DIR/tap/tmp_check" TESTLOGDIR="$CHECK_DIR/tap/tmp_check/log" \
		PG_TEST_EXTRA="${PG_TEST_EXTRA:-}" "${template[@]}" \
		prove --timer -j"$jobs" ${PROVE_FLAGS:-} -I "$tree/test/lib" -I "$PG_PERL" "${tests[@]}") 2>&1 \
		| tee "$CHECK_DIR/tap/prove.out"
	local rc=${PIPESTATUS[0]}
	if [ $rc -ne 0 ]; then
		echo "---- logs: $CHECK_DIR/tap/tmp_check/log/"
		ls "$CHECK_DIR/tap/tmp_check/log/" 2>/dev/null
		WHAT_FAILED+=$(tap_digest "$CHECK_DIR/tap")$'\n'
	fi
	return $rc
}

# tap_digest DIR: for each test file prove reported as failed (DIR/prove.out),
# the failed assertions and what they got, from its regress log (bounded), so
# that the end of a long run says which check failed and how.
tap_digest() {
	local dir=$1 t log
	for t in $(grep -oE '[0-9]{3}_[a-z0-9_]+\.pl' <(sed -n '/^Test Summary Report/,$p' "$dir/prove.out") | sort -u); do
		log=$dir/tmp_check/log/regress_log_${t%.pl}
		echo "-- tap: $t failed"
		if [ -f "$log" ]; then
			grep -E -A4 '(^|\) )(not ok |# +Failed test)|# Looks like|Died at|died at' "$log" | head -n 60
		else
			echo "(no log $log; what prove printed of it:)"
			grep -F -A8 "$t" "$dir/prove.out" | head -n 30
		fi
	done
}

# stage_package: test/package/run.sh (the Debian package built, installed,
# tested against its installed files and removed; the files it replaced are
# put back), in the check directory.
stage_package() {
	prepare_check_dir || return 1
	PGBUS_TEST_USER=$TEST_USER PGBUS_PACKAGE_DIR=$CHECK_DIR/package bash "$REPO/test/package/run.sh"
}

# stage_cassert: the server stages again, against an assert-enabled
# PostgreSQL (built once, then cached), on a copy of the tree so that the
# objects of the main build are left alone. The nested run checks its own
# server logs; PROVE_TESTS and PROVE_FLAGS apply to it as well.
CASSERT_DIR=${PGBUS_CASSERT_DIR:-/tmp/pgbus_stream_cassert}
# The TAP files cassert runs (PGBUS_CASSERT_TESTS; "all": every file). Every
# file runs on 15 in the tap stage and with assertions on 18 in pg18; these
# are the ones through the code that differs on 15 (src/pg/compat.hpp) and
# the parts of PostgreSQL it meets: the capture's per-backend slots and
# paths (001, 003, 011, 033), the worker's wait event set across kills,
# cancels and errors (005, 033, 053, 057), the warning once per transaction
# (036), the WAL records and the WAL writer's wake (070, 071, 072, 085,
# 093), the extension owner's presence (066, 093), the queue names' varlena
# text (060), upgrade and dump/restore (091, 092).
CASSERT_TESTS=${PGBUS_CASSERT_TESTS:-001_basic 003_concurrency 005_restart 011_capture_paths 033_no_loss 036_logical 053_errors_shutdown 057_error_memory 060_gem_queues 066_presence 070_standby 071_failover 072_standby_records 085_wal_without_library 091_upgrade 092_dump_restore 093_pg_versions}
stage_cassert() {
	local pgc dir=$CASSERT_DIR tests=${PROVE_TESTS:-} t
	if [ -z "$tests" ] && [ "$CASSERT_TESTS" != all ]; then
		for t in $CASSERT_TESTS; do tests+="test/t/$t.pl "; done
	fi
	prepare_wait cassert "$dir/prepare" || return 1
	pgc=$PREPARE_OUT
	copy_tree "$dir/tree" || return 1
	chmod -R a+rX "$dir"
	PG_CONFIG=$pgc PGBUS_CHECK_DIR=$dir/check PROVE_TESTS=$tests \
		"$dir/tree/test/run_all.sh" --only build,install,regress,tap,logs
}

# copy_tree DIR: DIR emptied, then the tree's files as they are in the
# working tree (tracked and new; deleted ones skipped), without build output;
# the browser tests' node_modules too, when present (not fetched again).
copy_tree() {
	local dir=$1
	rm -rf "$dir"
	mkdir -p "$dir" || return 1
	if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$REPO" && git ls-files -co --exclude-standard -z |
			while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
			xargs -0 cp --parents -t "$dir") || return 1
	else
		cp -R "$REPO"/. "$dir" || return 1
		make -C "$dir" clean >/dev/null 2>&1
	fi
	if [ -d "$REPO/test/browser/node_modules" ]; then
		cp -R "$REPO/test/browser/node_modules" "$dir/test/browser/" || return 1
	fi
}

# The servers of cassert, pg18 and pg17 take minutes to prepare the first
# time on a machine (two builds from source, a debootstrap): started in the
# background when the run begins, awaited by their stage. prepare_bg NAME
# DIR CMD... runs CMD with its output in DIR/prepare.log and its stdout in
# DIR/prepare.out, at a lower priority (nice 10): it takes the CPU the
# stages in the foreground leave (the TAP and browser stages mostly wait on
# servers and sockets), and those keep the larger share while it builds.
declare -A PREPARE_PID=()
prepare_bg() {
	local name=$1 dir=$2
	shift 2
	mkdir -p "$dir" || return 1
	rm -f "$dir/prepare.out" "$dir/prepare.rc"
	(nice -n 10 "$@" >"$dir/prepare.out" 2>"$dir/prepare.log"; echo $? >"$dir/prepare.rc") &
	PREPARE_PID[$name]=$!
	echo "preparing $name in the background: $* (log: $dir/prepare.log)"
}
# prepare_wait NAME DIR: waits for it (in this shell: a command
# substitution could not wait for it); its stdout in PREPARE_OUT; fails as it did.
PREPARE_OUT=""
prepare_wait() {
	local name=$1 dir=$2
	PREPARE_OUT=""
	if [ -z "${PREPARE_PID[$name]:-}" ]; then
		return 1
	fi
	wait "${PREPARE_PID[$name]}" 2>/dev/null
	cat "$dir/prepare.log" >&2
	[ "$(cat "$dir/prepare.rc" 2>/dev/null)" = 0 ] || return 1
	PREPARE_OUT=$(cat "$dir/prepare.out")
}

PG18_DIR=${PGBUS_PG18_DIR:-/tmp/pgbus_stream_pg18}
PG17_DIR=${PGBUS_PG17_DIR:-/tmp/pgbus_stream_pg17}
# The server stages of another major, nested on a copy of the tree: warnings
# are errors there, and the browser stage runs its edge test (a hot standby
# beside the primary) only.
NESTED_STAGES=${PGBUS_NESTED_STAGES:-build,install,regress,tap,browser,logs}
# Where pg17 copies the tree inside its root.
PG17_TREE=${PGBUS_PG17_TREE:-/opt/pgbus_stream}
# pg17's stages: those of pg18, and the package besides.
pg17_stages() {
	if [ -n "${PGBUS_NESTED_STAGES:-}" ]; then
		echo "$PGBUS_NESTED_STAGES"
	else
		echo "$NESTED_STAGES,package"
	fi
}

# stage_pg18: PostgreSQL 18 with assertions (test/pg_cassert.sh 18).
stage_pg18() {
	local pgc
	prepare_wait pg18 "$PG18_DIR/prepare" || return 1
	pgc=$PREPARE_OUT
	copy_tree "$PG18_DIR/tree" || return 1
	chmod -R a+rX "$PG18_DIR"
	PG_CONFIG=$pgc PGBUS_CHECK_DIR=$PG18_DIR/check WERROR=-Werror PGBUS_BROWSER_TESTS=edge \
		"$PG18_DIR/tree/test/run_all.sh" --only "$NESTED_STAGES"
}

# stage_pg17: Debian's PostgreSQL 17, in a trixie root (test/pg_chroot.sh).
# The tree is copied into the root and its run_all.sh runs there as root (it
# starts the servers as its own unprivileged user); the package stage builds
# postgresql-17-pgbus-stream there.
stage_pg17() {
	local root
	if [ $IS_ROOT -ne 1 ]; then
		echo "pg17 needs root (debootstrap, chroot)"
		return 77
	fi
	prepare_wait pg17 "$PG17_DIR/prepare" || return 1
	root=$PREPARE_OUT
	copy_tree "$root$PG17_TREE" || return 1
	# The browser test's node modules, when the tree has none, are fetched
	# from the machine: npm there has the machine's certificates and proxy
	# settings, which the root does not.
	if [[ ",$(pg17_stages)," == *",browser,"* ]] && [ ! -d "$root$PG17_TREE/test/browser/node_modules" ] &&
		command -v npm >/dev/null; then
		(cd "$root$PG17_TREE/test/browser" && npm ci --no-audit --no-fund --loglevel=error) || return 1
	fi
	chmod -R a+rX "$root$PG17_TREE"
	# shellcheck disable=SC2016
	PG_MAJOR=17 "$REPO/test/pg_chroot.sh" --run /bin/sh -c 'cd "$6" &&
		PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config WERROR=-Werror PGBUS_BROWSER_TESTS=edge \
		JOBS=$1 PROVE_JOBS=$2 PROVE_TESTS="$3" PROVE_FLAGS="$4" \
		./test/run_all.sh --only "$5"' sh "$JOBS" "${PROVE_JOBS:-}" "${PROVE_TESTS:-}" "${PROVE_FLAGS:-}" \
		"$(pg17_stages)" "$PG17_TREE"
	local rc=$?
	# The logs stay readable from the machine.
	rm -rf "$PG17_DIR/check"
	mkdir -p "$PG17_DIR/check"
	ln -sfn "$root$PG17_TREE/test/t/tmp_check" "$PG17_DIR/check/tmp_check"
	return $rc
}

# stage_logs: every server log of this run (regress, tap, and the browser
# stage's when it ran), checked by test/lib/scan_logs.pl (rule:
# test/lib/LogScan.pm): a process killed by a signal, a worker that exited
# while the server was not stopping, a FATAL line of the extension. Kills and
# exits a TAP test caused on purpose are listed in <log>.expected_signals
# (one fixed string per line, e.g. "(PID 123) was terminated by signal 9").
BROWSER_RAN=0
stage_logs() {
	# Without a server stage in this invocation, check the previous run's logs.
	[ -n "$CHECK_DIR" ] || resolve_check_dir 2>/dev/null
	local logs=() f
	if [ -d "$CHECK_DIR" ]; then
		while IFS= read -r -d '' f; do logs+=("$f"); done < <(
			find "$CHECK_DIR" \( -path '*/log/*.log' -o -name 'postmaster.log' \) \
				! -name 'regress_log_*' -type f -print0 2>/dev/null)
	fi
	if [ $BROWSER_RAN -eq 1 ]; then
		f=$REPO/test/browser/output/postgres.log
		[ -f "$f" ] || { echo "FAIL: the browser stage ran but left no server log ($f)"; return 1; }
		logs+=("$f")
		# The hot standby of 08-edge (its test copies the log when it stops it).
		f=$REPO/test/browser/output/standby.log
		[ -f "$f" ] && logs+=("$f")
	fi
	if [ ${#logs[@]} -eq 0 ]; then
		echo "no server log found (check directory: $CHECK_DIR)"
		return 77
	fi
	perl "$REPO/test/lib/scan_logs.pl" "${logs[@]}"
	local bad=$?
	echo "${#logs[@]} server log(s) checked"
	return $bad
}

# ---------------------------------------------------------------- main

START=$(now)
# Failure details gathered by the stages (which run in this shell), printed
# after the summary.
WHAT_FAILED=""
echo "pgbus_stream: run_all.sh in $REPO ($(id -un), $(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
export PATH="$PGBIN:$PATH"

run_stage deps stage_deps
run_stage checks stage_checks
# The slow preparations of cassert, pg18 and pg17 (once per machine) in the
# background, while the other stages run; after deps, which installs what
# they need.
if wanted cassert; then
	prepare_bg cassert "$CASSERT_DIR/prepare" env JOBS="$JOBS" "$REPO/test/pg_cassert.sh"
fi
if wanted pg18; then
	prepare_bg pg18 "$PG18_DIR/prepare" env JOBS="$JOBS" "$REPO/test/pg_cassert.sh" 18
fi
if wanted pg17 && [ $IS_ROOT -eq 1 ]; then
	prepare_bg pg17 "$PG17_DIR/prepare" env PG_MAJOR=17 "$REPO/test/pg_chroot.sh"
fi
run_stage build stage_build
BUILD_OK=1
case "${RESULTS[-1]}" in build\|FAIL*) BUILD_OK=0 ;; esac
if [ $BUILD_OK -eq 1 ]; then
	run_stage install stage_install
	case "${RESULTS[-1]}" in install\|FAIL*) BUILD_OK=0 ;; esac
fi
if [ $BUILD_OK -eq 1 ]; then
	run_stage regress stage_regress
else
	RESULTS+=("regress|not run (build/install failed)|0")
	FAILED=$((FAILED + 1))
fi
run_stage unit stage_unit
run_stage unit-san stage_unit_san
run_stage engine stage_engine
run_stage http stage_http
run_stage fuzz stage_fuzz
if [ $BUILD_OK -eq 1 ]; then
	run_stage tap stage_tap
else
	RESULTS+=("tap|not run (build/install failed)|0")
	FAILED=$((FAILED + 1))
fi
if [ $BUILD_OK -eq 1 ]; then
	run_stage browser stage_browser
else
	RESULTS+=("browser|not run (build/install failed)|0")
fi
run_stage package stage_package
run_stage cassert stage_cassert
run_stage pg18 stage_pg18
run_stage pg17 stage_pg17
run_stage logs stage_logs
# The default run plants a rotating third of the faults (every fault within
# three days of CI runs); --only mutations plants them all.
if [ -z "$ONLY" ] && [ -z "${MUTATIONS_ROTATION:-}" ]; then
	MUTATIONS_ROTATION=3
fi
run_stage mutations stage_mutations

END=$(now)
log "summary"
printf '%-10s %-32s %8s\n' stage result seconds
for r in "${RESULTS[@]}"; do
	IFS='|' read -r s st secs <<<"$r"
	printf '%-10s %-32s %8s\n' "$s" "$st" "$secs"
done
printf '%-10s %-32s %8s\n' total "" "$(awk -v a="$START" -v b="$END" 'BEGIN { printf "%.1f", b - a }')"
[ -n "$CHECK_DIR" ] && echo "logs: $CHECK_DIR"
if [ -n "$WHAT_FAILED" ]; then
	log "what failed"
	printf '%s' "$WHAT_FAILED"
fi
echo "run_all: $PASSED passed, $FAILED failed"
[ $FAILED -eq 0 ]
