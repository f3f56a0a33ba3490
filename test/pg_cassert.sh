#!/usr/bin/env bash
# test/pg_cassert.sh — builds PostgreSQL with assertions once, from Debian's
# source package, and prints the path of its pg_config.
#
#   PGC=$(./test/pg_cassert.sh)         15 (the default): build if missing, else reuse
#   PGC=$(./test/pg_cassert.sh 18)      another major
#
# The installation is cached in $PGBUS_CASSERT_PREFIX (default
# /var/cache/pgbus_stream/pgN-cassert as root, else
# ~/.cache/pgbus_stream/pgN-cassert); the source and build tree sit next to
# it (…-src) and can be removed after a build. The source package comes from
# the machine's own suites when they carry postgresql-N (15 on bookworm),
# else from Debian sid, through a private apt configuration next to the
# cache (…-apt): the machine's apt sources are not touched for that. Built from the upstream
# sources of the package (Debian's patches left out): the server, its client
# programs and libraries, pg_regress, headers, PGXS, the TAP modules and the
# contrib modules the tests use ($CONTRIB below); no other contrib, no extra
# libraries (ICU, readline, zlib, LLVM).
# Progress goes to stderr; stdout carries only the pg_config path.
set -euo pipefail

PG_MAJOR=${1:-15}
case $PG_MAJOR in '' | *[!0-9]*) echo "pg_cassert: the major is a number, not '$PG_MAJOR'" >&2; exit 2 ;; esac
if [ "$(id -u)" -eq 0 ]; then
	DEFAULT=/var/cache/pgbus_stream/pg$PG_MAJOR-cassert
else
	DEFAULT=${XDG_CACHE_HOME:-$HOME/.cache}/pgbus_stream/pg$PG_MAJOR-cassert
fi
PREFIX=${PGBUS_CASSERT_PREFIX:-$DEFAULT}
# One at a time per cache (two runs on one machine would undo each other).
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9
SRC=$PREFIX-src
JOBS=${JOBS:-2}
STAMP=$PREFIX/.complete
# What the cache was built with: another set of options means another build.
OPTIONS="--enable-cassert --enable-debug --enable-tap-tests --without-icu --without-readline --without-zlib --without-llvm"
CFLAGS_BUILD='-O1 -g'
# The contrib modules the tests use (Debian's server packages ship them all).
CONTRIB="pg_surgery"

say() { echo "pg_cassert: $*" >&2; }

if [ -f "$STAMP" ] && [ -x "$PREFIX/bin/pg_config" ] &&
	[ "$(sed -n 2p "$STAMP")" = "$OPTIONS CFLAGS=$CFLAGS_BUILD" ]; then
	missing=""
	for m in $CONTRIB; do
		[ -f "$PREFIX/share/postgresql/extension/$m.control" ] || missing="$missing $m"
	done
	# (none when the source and build tree were removed after the build)
	TREE=$(find "$SRC" -mindepth 1 -maxdepth 1 -type d -name 'postgresql-*' 2>/dev/null | head -n 1 || true)
	for m in $missing; do
		# A cache from before the module was on the list: add it from the
		# build tree when that is still there, else build everything again.
		[ -n "$TREE" ] && [ -d "$TREE/contrib/$m" ] || { missing=rebuild; break; }
		say "adding contrib/$m to $PREFIX"
		make -C "$TREE/contrib/$m" -s install >>"$SRC/install.log" 2>&1 || { missing=rebuild; break; }
	done
	if [ "$missing" != rebuild ]; then
		say "reusing $PREFIX ($(head -n 1 "$STAMP"))"
		echo "$PREFIX/bin/pg_config"
		exit 0
	fi
fi

# Debian's source package: needs a deb-src entry for the running suites.
APT_OPTS=()
if [ "$PG_MAJOR" != 15 ] && ! apt-cache showsrc "postgresql-$PG_MAJOR" 2>/dev/null | grep -q '^Version:'; then
	# Not in the machine's suites: sid's source package, from the mirror the
	# machine already uses, with apt's lists kept next to the cache.
	APTDIR=$PREFIX-apt
	MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n 1)
	[ -n "$MIRROR" ] || MIRROR=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\(http[^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | grep -v security | head -n 1)
	MIRROR=${MIRROR:-http://deb.debian.org/debian}
	mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
	echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR sid main" >"$APTDIR/sources.list"
	APT_OPTS=(-o "Dir::Etc::SourceList=$APTDIR/sources.list" -o "Dir::Etc::SourceParts=$APTDIR/none"
		-o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache")
	say "apt-get update for sid's sources ($MIRROR, lists in $APTDIR)"
	apt-get "${APT_OPTS[@]}" update -qq >&2
elif ! apt-get source --print-uris -qq "postgresql-$PG_MAJOR" >/dev/null 2>&1; then
	[ "$(id -u)" -eq 0 ] || { say "need root to add a deb-src entry"; exit 1; }
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		sed -n '/^Types: deb$/,/^$/p' /etc/apt/sources.list.d/debian.sources |
			sed 's/^Types: deb$/Types: deb-src/' >/etc/apt/sources.list.d/pgbus-deb-src.sources
	else
		grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' >/etc/apt/sources.list.d/pgbus-deb-src.list
	fi
	say "added a deb-src entry; apt-get update"
	apt-get update -qq >&2
fi
command -v dpkg-source >/dev/null || { say "dpkg-dev missing (apt-get install dpkg-dev)"; exit 1; }

rm -rf "$SRC"
mkdir -p "$SRC"
say "fetching the source of postgresql-$PG_MAJOR into $SRC"
# Newest version first; a mirror may lack the newest source (security pool).
fetched=0
for v in $(apt-cache "${APT_OPTS[@]}" showsrc "postgresql-$PG_MAJOR" | sed -n 's/^Version: //p' | sort -rV); do
	if (cd "$SRC" && apt-get "${APT_OPTS[@]}" source -qq --download-only "postgresql-$PG_MAJOR=$v" >&2); then
		fetched=1
		break
	fi
	say "version $v not fetched; trying an older one"
	rm -rf "${SRC:?}"/*
done
[ $fetched -eq 1 ] || { say "could not fetch the source of postgresql-$PG_MAJOR"; exit 1; }
# Upstream sources only: Debian's patches hard-code the library directory to
# /usr/lib/postgresql/<major>/lib, which would install over the system's files.
DSC=$(find "$SRC" -maxdepth 1 -name "postgresql-${PG_MAJOR}_*.dsc" | head -n 1)
[ -n "$DSC" ] || { say "no .dsc under $SRC"; exit 1; }
VERSION=$(basename "$DSC" .dsc)
TREE=$SRC/$VERSION
dpkg-source --skip-patches -x "$DSC" "$TREE" >&2

say "configuring $VERSION (--enable-cassert --enable-debug) for $PREFIX"
cd "$TREE"
# shellcheck disable=SC2086
./configure --prefix="$PREFIX" $OPTIONS CFLAGS="$CFLAGS_BUILD" >"$SRC/configure.log" 2>&1 ||
	{ tail -n 30 "$SRC/configure.log" >&2; exit 1; }

say "building with -j$JOBS (several minutes)"
make -j"$JOBS" -s >"$SRC/build.log" 2>&1 || { tail -n 40 "$SRC/build.log" >&2; exit 1; }
make -C src/test/regress -j"$JOBS" -s >>"$SRC/build.log" 2>&1 || { tail -n 40 "$SRC/build.log" >&2; exit 1; }
for m in $CONTRIB; do
	make -C "contrib/$m" -j"$JOBS" -s >>"$SRC/build.log" 2>&1 || { tail -n 40 "$SRC/build.log" >&2; exit 1; }
done
# Everything must land under the prefix, never over another installation:
# these are the directories make install writes to.
if grep '^#define' src/port/pg_config_paths.h | grep -v "\"$PREFIX/" >&2; then
	say "the directories above are outside $PREFIX: not installing"
	exit 1
fi
rm -rf "$PREFIX"
make -s install >>"$SRC/install.log" 2>&1 || { tail -n 40 "$SRC/install.log" >&2; exit 1; }
for m in $CONTRIB; do
	make -C "contrib/$m" -s install >>"$SRC/install.log" 2>&1 || { tail -n 40 "$SRC/install.log" >&2; exit 1; }
done
printf '%s %s\n%s\n' "$VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$OPTIONS CFLAGS=$CFLAGS_BUILD" >"$STAMP"
say "installed $VERSION into $PREFIX"
echo "$PREFIX/bin/pg_config"
