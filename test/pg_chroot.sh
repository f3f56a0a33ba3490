#!/usr/bin/env bash
# test/pg_chroot.sh — a Debian root holding another PostgreSQL major from
# Debian's binary packages (17 from trixie by default), made once with
# debootstrap and reused; runs commands inside it. Needs root.
#
#   ROOT=$(./test/pg_chroot.sh)               bootstrap if missing; prints the root
#   ./test/pg_chroot.sh --run CMD [ARG...]    CMD inside the root (as root)
#   PG_MAJOR=17 SUITE=trixie ./test/pg_chroot.sh ...
#
# The root is cached in $PGBUS_CHROOT (default
# /var/cache/pgbus_stream/$SUITE-pg$PG_MAJOR). It holds the server, its
# headers and PGXS, the TAP modules, what the extension builds with, what the
# browser stage runs (chromium, nginx, node) and what the package test builds
# with (debhelper, postgresql-server-dev-all). No cluster is created and no
# service starts (policy-rc.d). A command runs in a private mount namespace
# (unshare), where /proc, /dev, /dev/pts, /dev/shm and /sys are mounted for
# it: nothing stays mounted after it ends. The network is the machine's own,
# so a server started inside listens on the machine's loopback.
# Progress goes to stderr; stdout carries only the root's path (first form).
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-17}
SUITE=${SUITE:-trixie}
if [ "$(id -u)" -ne 0 ]; then
	echo "pg_chroot: needs root (debootstrap, chroot)" >&2
	exit 77
fi
ROOT=${PGBUS_CHROOT:-/var/cache/pgbus_stream/$SUITE-pg$PG_MAJOR}
# One at a time per cache (two runs on one machine would undo each other).
mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9
STAMP=$ROOT/.pgbus_complete
PACKAGES="postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-client-$PG_MAJOR
	libmicrohttpd-dev libssl-dev pkg-config g++ make libipc-run-perl perl curl procps passwd util-linux
	git ca-certificates
	chromium nginx nodejs openssl
	build-essential debhelper dpkg-dev postgresql-server-dev-all fakeroot lintian"

say() { echo "pg_chroot: $*" >&2; }

# in_root CMD...: CMD in $ROOT with the kernel file systems mounted, in a
# mount namespace of its own.
in_root() {
	cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
	unshare --mount --propagation private -- /bin/sh -ec '
		root=$1; shift
		mount -t proc proc "$root/proc"
		mount -t sysfs sys "$root/sys"
		mount --bind /dev "$root/dev"
		mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null || mount --bind /dev/pts "$root/dev/pts"
		mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
		exec chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 TERM=dumb "$@"' sh "$ROOT" "$@"
}

# install_packages: the packages above, into an existing root.
install_packages() {
	say "apt-get install (in $ROOT): $(echo $PACKAGES)"
	# shellcheck disable=SC2086
	in_root /bin/sh -ec "export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold $(echo $PACKAGES) >/dev/null
		apt-get clean" >&2 || return 1
	in_root /bin/sh -ec 'id -u pgbus >/dev/null 2>&1 || useradd --create-home --shell /bin/bash pgbus' >&2
	printf '%s\n%s\n%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$SUITE" "$(echo $PACKAGES)" >"$STAMP"
	say "ready: $ROOT ($(in_root /usr/lib/postgresql/$PG_MAJOR/bin/postgres --version))"
}

bootstrap() {
	command -v debootstrap >/dev/null || {
		say "installing debootstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
	}
	local mirror
	mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n 1)
	[ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\(http[^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | grep -v security | head -n 1)
	mirror=${mirror:-http://deb.debian.org/debian}
	rm -rf "$ROOT"
	mkdir -p "$(dirname "$ROOT")"
	say "debootstrap --variant=minbase $SUITE $ROOT $mirror"
	debootstrap --variant=minbase "$SUITE" "$ROOT" "$mirror" >"$ROOT.debootstrap.log" 2>&1 ||
		{ tail -n 30 "$ROOT.debootstrap.log" >&2; return 1; }
	# No service starts inside (nginx, postgresql); no default cluster.
	printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
	chmod 755 "$ROOT/usr/sbin/policy-rc.d"
	mkdir -p "$ROOT/etc/postgresql-common"
	echo "create_main_cluster = false" >"$ROOT/etc/postgresql-common/createcluster.conf"
	install_packages
}

# A root of another suite is made again; one that lacks packages of the list
# gets them.
if [ ! -f "$STAMP" ] || [ "$(sed -n 2p "$STAMP")" != "$SUITE" ]; then
	bootstrap
elif [ "$(sed -n 3p "$STAMP")" != "$(echo $PACKAGES)" ] ||
	[ ! -x "$ROOT/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" ]; then
	install_packages
fi

if [ "${1:-}" = --run ]; then
	shift
	exec 9>&- # the lock guards the making only, not what runs inside
	in_root "$@"
else
	echo "$ROOT"
fi
