# Sourced by the single-purpose bench scripts: a throwaway PostgreSQL home
# with pgbus_stream preloaded. Needs BIN (the server's bindir).
#   scratch_dir NAME          TMP: a fresh directory the server user owns;
#                             on exit the pids in BG are killed, every data
#                             directory in NODES is stopped (immediate, last
#                             created first), the commands in ON_EXIT run and
#                             TMP is removed.
#   scratch_node DIR PORT HTTP_PORT
#                             initdb DIR with the settings every script
#                             shares; the caller appends its own.
# as_pg runs a command as the server user (pgbus when started as root).
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u pgbus -- "$@"; else "$@"; fi; }
BG=() NODES=() ON_EXIT=()
scratch_cleanup() {
  local p d c
  for p in "${BG[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "${NODES[@]}"; do as_pg "$BIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1 || true; done
  for c in "${ON_EXIT[@]}"; do eval "$c" || true; done
  [ -n "${TMP:-}" ] && rm -rf "$TMP"
}
scratch_dir() {
  TMP=$(mktemp -d "/tmp/pgbus_$1.XXXXXX")
  [ "$(id -u)" = 0 ] && chown pgbus "$TMP"
  trap scratch_cleanup EXIT
}
scratch_node() {
  NODES=("$1" "${NODES[@]}")
  as_pg "$BIN/initdb" -D "$1" -A trust --no-sync >/dev/null
  cat >>"$1/postgresql.conf" <<CONF
port = $2
listen_addresses = ''
unix_socket_directories = '$TMP'
shared_preload_libraries = 'pgbus_stream'
pgbus_stream.port = $3
CONF
}
