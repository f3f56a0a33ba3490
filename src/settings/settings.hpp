// The module's settings (pgbus_stream.* GUCs) as one value. settings.cpp
// defines every one of them and is the only code that reads PostgreSQL's
// variables; everything else gets a Settings value, or an accessor below.
//
// To add a setting:
//   1. a field in Settings below, with its default (the one place the
//      default is written: it is also the setting's boot value);
//   2. one define_*() line in define() (settings.cpp), with its name,
//      descriptions, bounds, context and flags;
//   3. read it where it is used: the worker from current() (or through
//      engine_config()/http_config() in configs.hpp), a backend (capture, an
//      SQL function) through an accessor here, which reads the live value;
//   4. a row in the README's settings table.
// This header is PostgreSQL-free (include it before postgres.h).
#pragma once
#include "core/outqueue.hpp" // OverflowPolicy

#include <cstdint>
#include <string>

namespace pgbs::auth {
struct Secrets;
}
namespace pgbs::shmem {
struct Sizes;
}

namespace pgbs::settings {

enum class ShutdownPolicy { Drain, Discard };

struct Settings {
  // The listener and the workers
  int port = 8080; // 0: no listener
  std::string listen_addresses = "127.0.0.1";
  std::string database = "postgres";
  int workers = 1;
  int max_connections = 10000;
  int accept_rate = 0;          // new SSE connections decided per second per worker (0: no bound)
  int heartbeat_interval = 15; // s
  int idle_timeout = 0;        // s, 0 = never
  int max_lifetime = 0;        // s, 0 = never
  int socket_send_buffer_kb = 128;
  int connection_memory_kb = 32;
  std::string cors_origins = "";
  // Shared memory (sized once, at server start)
  int ring_size_kb = 8192;
  int max_streams = 1024;
  int max_pending_streams = 1024; // awaited streams, over all workers
  int diagnostics_size = 512;
  // Producers (capture)
  int inline_payload_max = 8192; // bytes
  int max_pending_events = 100000;
  bool standby_records = true; // capture writes WAL records for hot standbys
  int logical_hold_ms = 5000;  // horizons held below rows applied by logical replication
  // Connections and the engine
  int queue_max_events = 1000;
  int queue_max_bytes = 1048576;
  OverflowPolicy overflow_policy = OverflowPolicy::Lag;
  int replay_page_size = 500;
  int replay_page_bytes = 4 * 1024 * 1024; // bytes of rows one table read holds (one row at least)
  int memory_retention = 1000;
  int memory_retention_time_ms = 1000;
  std::string default_event = "turbo-stream";
  int negative_cache_size = 10000;
  int stream_linger_ms = 5000; // a stream without connections keeps its shared-memory entry
  // Streams and queues
  std::string queue_prefix = "pgbus_";
  std::string auto_attach = "pgbus_"; // patterns of PGMQ queues captured without attach()
  int default_retention_s = 0;        // 0 = none
  // The worker's periodic duties and its stop
  int cursor_flush_interval_ms = 1000;
  int retention_interval_s = 10;
  int shutdown_drain_ms = 1000;
  ShutdownPolicy shutdown_policy = ShutdownPolicy::Drain;
  // Operators' routes and credentials (secrets: superuser-only, hidden)
  std::string admin_token = "";
  bool admin_loopback_only = false;
  std::string signing_secret = "";
  std::string secret_key_base = "";
  std::string jwt_secret = "";
  std::string token_cookie = "";
  // History and alerts (alerts() reads the thresholds in SQL)
  bool stats_enabled = false;
  std::string stats_table = ""; // the app's history table ("": pgbus_stream.stream_stats)
  int stats_max_age_s = 7 * 86400;
  int alert_failed_total = 1;
  int alert_overflow_dropped_total = 1;
  int alert_total_queued = 10000;
  double alert_queue_pressure_ratio = 0.8;
};

// The worker's periodic duties, in milliseconds.
struct Intervals {
  int64_t cursor_flush_ms;
  int64_t retention_ms;
  int64_t shutdown_drain_ms; // 0 when shutdown_policy is discard
};
inline Intervals intervals(const Settings &s) {
  return {s.cursor_flush_interval_ms, 1000LL * s.retention_interval_s,
          s.shutdown_policy == ShutdownPolicy::Drain ? s.shutdown_drain_ms : 0};
}

// ---- PostgreSQL side (settings.cpp)

// Defines every setting (_PG_init).
void define();
// Reads every setting into current() and returns it: the worker at start and
// after each SIGHUP, the postmaster to size shared memory.
const Settings &load();
// The value the last load() read.
const Settings &current();
// What shared memory is sized by (read once, when it is requested).
shmem::Sizes shmem_sizes(const Settings &s);
// The credentials' keys of s; one that names an unreadable file counts as
// unset (its credentials are refused) and is reported.
auth::Secrets secrets(const Settings &s);
// admin_token resolved like the keys; unreadable: a value no client can send.
std::string admin_token(const Settings &s);

// Backends read these live (a session's SET and a reload apply at once).
int max_pending_events();
int inline_payload_max();
int logical_hold_ms();
bool standby_records();
const char *jwt_secret();  // never null
const char *auto_attach(); // never null

} // namespace pgbs::settings
