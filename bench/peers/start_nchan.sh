#!/usr/bin/env bash
# Starts nginx + nchan in the foreground on 127.0.0.1:<port>.
#   bench/peers/start_nchan.sh <port> <runtime-dir>
# Installs nginx-core and libnginx-mod-nchan with apt-get when missing.
# Prints nothing on success until nginx exits; the caller backgrounds it and
# polls GET /healthz.
set -euo pipefail
port=${1:?usage: start_nchan.sh <port> <runtime-dir>}
dir=${2:?usage: start_nchan.sh <port> <runtime-dir>}
here=$(cd "$(dirname "$0")" && pwd)

if ! command -v nginx >/dev/null 2>&1 || [ ! -f /usr/lib/nginx/modules/ngx_nchan_module.so ]; then
    echo "start_nchan: installing nginx-core libnginx-mod-nchan" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends nginx-core libnginx-mod-nchan >&2 ||
        { apt-get update >&2 && apt-get install -y --no-install-recommends nginx-core libnginx-mod-nchan >&2; }
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
hard=$(ulimit -Hn)
ulimit -n "$hard" 2>/dev/null || true
nofile=$(ulimit -n)
wc=$(( nofile > 1100 ? nofile - 100 : 1024 ))
sed -e "s|@PORT@|$port|g" -e "s|@PREFIX@|$dir|g" -e "s|@NOFILE@|$nofile|g" \
    -e "s|@WORKER_CONNECTIONS@|$wc|g" "$here/nchan.conf" > "$dir/nginx.conf"
nginx -t -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >/dev/null 2>"$dir/configtest.log" || {
    cat "$dir/configtest.log" >&2
    exit 1
}
exec nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
