#!/usr/bin/env bash
# test/package/run.sh — the package stage of test/run_all.sh: the Debian
# package built, installed on this machine, tested against its installed
# files, and removed again.
#
#   1. dpkg-buildpackage -b -uc -us in a copy of the tree (the build writes
#      next to its source and cleans it: neither the repository nor the build
#      stage's objects are touched); its build-time check runs the regression
#      suite on a throw-away cluster (pg_virtualenv)
#   2. lintian: errors fail
#   3. dpkg -i of postgresql-N-pgbus-stream_<version>_<arch>.deb, after
#      saving the files of an earlier make install it replaces
#   4. a server of Debian's PostgreSQL preloading the installed library, and
#      plain make installcheck against it; 0.1.0 -> <version> on the
#      installed files
#   5. 001_basic (the listener) and 091_upgrade with that PostgreSQL's
#      binaries and test modules (test/run_all.sh --only tap)
#   6. dpkg --purge, and the saved files put back, so later stages and runs
#      see what make install left
#
# The package installs into Debian's PostgreSQL whatever PG_CONFIG says, so
# everything here uses that one. Needs root (or sudo -n) for dpkg.
#
# Environment: PGBUS_PACKAGE_DIR (work directory, emptied first; default
# /tmp/pgbus_stream_package), PGBUS_TEST_USER (the unprivileged user the
# servers run as when this runs as root; default pgbus).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The major tested: PG_CONFIG's (Debian's 15 by default); the build makes a
# package for every major of debian/pgversions whose server headers are
# installed (pg_buildext with PG_SUPPORTED_VERSIONS=installed).
PG_MAJOR=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
PG_MAJOR=${PG_MAJOR:-15}
PGC=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
DIR=${PGBUS_PACKAGE_DIR:-/tmp/pgbus_stream_package}
TEST_USER=${PGBUS_TEST_USER:-pgbus}
PKG=postgresql-$PG_MAJOR-pgbus-stream
IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

as_test_user() {
	if [ $IS_ROOT -eq 1 ]; then runuser -u "$TEST_USER" -- "$@"; else "$@"; fi
}
privileged() {
	if [ $IS_ROOT -eq 1 ]; then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		echo "package: need root for: $*" >&2
		return 1
	fi
}

VERSION=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$REPO/pgbus_stream.control")

# build: the .deb from a copy of the tree; prints its path.
build() {
	local arch deb
	arch=$(dpkg --print-architecture)
	deb=$DIR/${PKG}_${VERSION}_$arch.deb
	if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$REPO" && git ls-files -z -c -o --exclude-standard | tar --null --ignore-failed-read -T - -cf -) |
			tar -xf - -C "$DIR/src"
	else
		tar -C "$REPO" --exclude-vcs --exclude='*.o' --exclude='*.so' --exclude='.deps' \
			--exclude='tmp_check*' --exclude='build' --exclude='node_modules' -cf - . | tar -xf - -C "$DIR/src"
	fi || return 1
	# debian/control lists a package per major: those installed here.
	(cd "$DIR/src" && PG_SUPPORTED_VERSIONS=installed pg_buildext updatecontrol) >&2 || return 1
	echo "building $deb ($(sed -n 's/^Package: //p' "$DIR/src/debian/control" | tr '\n' ' '))" >&2
	if ! (cd "$DIR/src" && dpkg-buildpackage -b -uc -us) >"$DIR/log/build.txt" 2>&1 || [ ! -f "$deb" ]; then
		echo "dpkg-buildpackage failed; last lines of $DIR/log/build.txt:" >&2
		tail -n 60 "$DIR/log/build.txt" >&2
		return 1
	fi
	grep -E '^(test |# [0-9]|.* tests passed)' "$DIR/log/build.txt" | sed 's/^/build-time check: /' >&2
	dpkg-deb -c "$deb" | awk '{ print "  " $NF }' | grep -v '/$' >&2
	echo "$deb"
}

# installcheck VERSION: a server preloading the installed library, plain make
# installcheck against it, and the shipped upgrade path.
installcheck() {
	local version=$1 bindir rc=0 got
	bindir=$("$PGC" --bindir)
	as_test_user "$bindir/initdb" -D "$DIR/run/data" -A trust -U postgres --no-sync >"$DIR/log/initdb.txt" 2>&1 || {
		cat "$DIR/log/initdb.txt"
		return 1
	}
	# No TCP at all (the suite opens no SSE connection): the socket directory
	# is private, so the port number cannot collide.
	cat >>"$DIR/run/data/postgresql.conf" <<-CONF
		listen_addresses = ''
		unix_socket_directories = '$DIR/run'
		port = 5432
		shared_preload_libraries = 'pgbus_stream'
		pgbus_stream.port = 0
		fsync = off
	CONF
	as_test_user "$bindir/pg_ctl" -D "$DIR/run/data" -l "$DIR/log/server.log" -w start || return 1
	local psql=("$bindir/psql" -X -h "$DIR/run" -p 5432 -U postgres -v ON_ERROR_STOP=1 -qAt)
	echo "server: $(as_test_user "${psql[@]}" -c "SELECT version()" postgres)"
	as_test_user env PGHOST="$DIR/run" PGPORT=5432 PGUSER=postgres make -C "$DIR/src" installcheck PG_CONFIG="$PGC" || {
		rc=1
		[ -f "$DIR/src/regression.diffs" ] && head -n 200 "$DIR/src/regression.diffs"
	}
	got=$(as_test_user "${psql[@]}" postgres <<-SQL
		CREATE DATABASE upgrade_check;
		\c upgrade_check
		CREATE EXTENSION pgbus_stream VERSION '0.1.0';
		SELECT name FROM pgbus_stream.create_stream('pkg');
		ALTER EXTENSION pgbus_stream UPDATE;
		SELECT extversion FROM pg_extension WHERE extname = 'pgbus_stream';
		SELECT count(*) FROM pgbus_stream.streams;
	SQL
	)
	if [ "$got" = "$(printf 'pkg\n%s\n1' "$version")" ]; then
		echo "ALTER EXTENSION pgbus_stream UPDATE: 0.1.0 -> $version on the installed files"
	else
		echo "upgrade on the installed files: expected pkg/$version/1, got: $got"
		rc=1
	fi
	as_test_user "$bindir/pg_ctl" -D "$DIR/run/data" -m fast -w stop || rc=1
	return $rc
}

# tested DEB VERSION: steps 3 to 6.
tested() {
	local deb=$1 version=$2 libdir sharedir f was_installed=0 saved=() rc=0
	libdir=$("$PGC" --pkglibdir)
	sharedir=$("$PGC" --sharedir)
	dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q 'ok installed' && was_installed=1
	if [ $was_installed -eq 0 ]; then
		for f in "$libdir"/pgbus_stream.so "$sharedir"/extension/pgbus_stream.control "$sharedir"/extension/pgbus_stream--*.sql; do
			[ -e "$f" ] && saved+=("${f#/}")
		done
		if [ ${#saved[@]} -gt 0 ]; then
			tar -C / -cf "$DIR/replaced.tar" "${saved[@]}" || return 1
		fi
	fi
	privileged dpkg -i "$deb" || return 1
	if dpkg -S "$libdir/pgbus_stream.so" 2>/dev/null | grep -q "^$PKG:"; then
		installcheck "$version" || rc=1
		PG_CONFIG=$PGC PGBUS_TEST_USER=$TEST_USER PGBUS_CHECK_DIR=$DIR/check \
			PROVE_TESTS="test/t/001_basic.pl test/t/091_upgrade.pl" "$REPO/test/run_all.sh" --only tap || rc=1
	else
		echo "$libdir/pgbus_stream.so is not installed by $PKG"
		rc=1
	fi
	if [ $was_installed -eq 0 ]; then
		privileged dpkg --purge "$PKG" || rc=1
		if [ ${#saved[@]} -gt 0 ]; then
			privileged tar -C / -xf "$DIR/replaced.tar" || rc=1
			echo "put back what the package replaced: ${saved[*]}"
		fi
	fi
	return $rc
}

[ -x "$PGC" ] || { echo "$PGC not found (Debian's postgresql-server-dev-$PG_MAJOR)"; exit 1; }
rm -rf "$DIR" && mkdir -p "$DIR/src" "$DIR/run" "$DIR/log" || exit 1
DEB=$(build) || exit 1
# The servers run as the test user, which also writes the suite's results.
if [ $IS_ROOT -eq 1 ]; then
	id -u "$TEST_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$TEST_USER" || exit 1
	chown -R "$TEST_USER:" "$DIR/src" "$DIR/run" "$DIR/log" || exit 1
fi
echo "lintian $DEB"
as_test_user lintian --fail-on error "$DEB" || { echo "lintian found errors"; exit 1; }
tested "$DEB" "$VERSION"
