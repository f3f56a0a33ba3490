// Module entry: refuses to load outside shared_preload_libraries, registers
// the GUCs, requests shared memory and registers the background workers.
#include "pgbus_stream.hpp"
#include "core/names.hpp" // before postgres.h (core/ refuses to compile after it)
#include "capture/capture.hpp"
#include "capture/wal.hpp"
#include "pg/guard.hpp"
#include "shmem/awaited.hpp"
#include "shmem/shared.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace pgbs::guc {
int port = 8080;
char *listen_addresses = nullptr;
char *database = nullptr;
int workers = 1;
int max_connections = 10000;
int heartbeat_interval = 15;
int idle_timeout = 0;
int max_lifetime = 0;
int socket_send_buffer_kb = 128;
int connection_memory_kb = 32;
int ring_size_kb = 8192;
int max_streams = 1024;
int inline_payload_max = 8192;
int max_pending_events = 100000;
int queue_max_events = 1000;
int queue_max_bytes = 1048576;
int overflow_policy = 3; // lag
char *cors_origins = nullptr;
char *queue_prefix = nullptr;
char *auto_attach = nullptr;
int default_retention_s = 0;
int replay_page_size = 500;
int shutdown_drain_ms = 1000;
int memory_retention = 1000;
int memory_retention_time_ms = 1000;
char *default_event = nullptr;
int cursor_flush_interval_ms = 1000;
int retention_interval_s = 10;
int diagnostics_size = 512;
int shutdown_policy = 0;
char *admin_token = nullptr;
bool admin_loopback_only = false;
char *signing_secret = nullptr;
char *secret_key_base = nullptr;
char *jwt_secret = nullptr;
char *token_cookie = nullptr;
bool stats_enabled = false;
bool standby_records = true;
int stats_max_age_s = 7 * 86400;
int max_pending_streams = 1024;
int negative_cache_size = 10000;
int logical_hold_ms = 5000;
int stream_linger_ms = 5000;
} // namespace pgbs::guc

static shmem_request_hook_type prev_shmem_request_hook = nullptr;
static shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

static void request_shmem() {
  if (prev_shmem_request_hook)
    prev_shmem_request_hook();
  pgbs::shmem::shmem_request();
  pgbs::shmem::standby_request();
  pgbs::shmem::awaited_request();
}

static void startup_shmem() {
  if (prev_shmem_startup_hook)
    prev_shmem_startup_hook();
  pgbs::shmem::shmem_startup();
  pgbs::shmem::standby_startup();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  pgbs::shmem::awaited_startup();
  LWLockRelease(AddinShmemInitLock);
}

// An event name the SSE framing can carry: printable ASCII, no spaces (or empty).
static bool check_event_name(char **newval, void **, GucSource) {
  const char *v = *newval;
  size_t n = v ? strlen(v) : 0;
  if (n > 64)
    return false;
  for (size_t i = 0; i < n; i++)
    if (v[i] <= ' ' || v[i] > '~') {
      GUC_check_errdetail("Event names are printable ASCII characters without spaces.");
      return false;
    }
  return true;
}

// Values are pgbs::OverflowPolicy's.
static const struct config_enum_entry overflow_options[] = {{"drop_oldest", 0, false},
                                                            {"drop_newest", 1, false},
                                                            {"disconnect", 2, false},
                                                            {"lag", 3, false},
                                                            {nullptr, 0, false}};

static const struct config_enum_entry shutdown_options[] = {
    {"drain", 0, false}, {"discard", 1, false}, {nullptr, 0, false}};

static bool check_auto_attach(char **newval, void **, GucSource) {
  if (*newval == nullptr || pgbs::names::valid_auto_attach(*newval))
    return true;
  GUC_check_errdetail("A comma-separated list of queue name patterns: letters, digits, \"_\" and "
                      "\"*\" (any run of characters), at most 47 characters each.");
  return false;
}

// Alert thresholds (read by alerts() in SQL).
static int alert_failed_total = 1;
static int alert_overflow_dropped_total = 1;
static int alert_total_queued = 10000;
static double alert_queue_pressure_ratio = 0.8;

static void define_gucs() {
  using namespace pgbs::guc;
  DefineCustomIntVariable("pgbus_stream.port", "TCP port of the SSE listener (0 = no listener).",
                          nullptr, &port, 8080, 0, 65535, PGC_POSTMASTER, 0, nullptr, nullptr,
                          nullptr);
  DefineCustomStringVariable("pgbus_stream.listen_addresses",
                             "Comma-separated addresses the SSE listener binds ('*' for all).",
                             nullptr, &listen_addresses, "127.0.0.1", PGC_POSTMASTER, 0, nullptr,
                             nullptr, nullptr);
  DefineCustomStringVariable("pgbus_stream.database", "Database whose streams the workers serve.",
                             nullptr, &database, "postgres", PGC_POSTMASTER, 0, nullptr, nullptr,
                             nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.workers", "Number of worker processes sharing the listener port.", nullptr,
      &workers, 1, 1, pgbs::shmem::kMaxWorkers, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.max_connections", "Maximum SSE connections, shared among the workers.", nullptr,
      &max_connections, 10000, 1, 1000000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.heartbeat_interval", "Seconds between heartbeat comments.",
                          nullptr, &heartbeat_interval, 15, 1, 3600, PGC_SIGHUP, GUC_UNIT_S,
                          nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.idle_timeout",
      "Close connections that received only heartbeats for this long (0 = never).", nullptr,
      &idle_timeout, 0, 0, 86400 * 7, PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.max_lifetime",
      "End a stream this long after it opened (less up to 10% jitter); the client "
      "reconnects with its last id (0 = never).",
      nullptr, &max_lifetime, 0, 0, 86400 * 7, PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.socket_send_buffer",
                          "Kernel send buffer of each SSE socket (0 = kernel autotuning, up to "
                          "net.ipv4.tcp_wmem's maximum per socket).",
                          nullptr, &socket_send_buffer_kb, 128, 0, 64 * 1024, PGC_SIGHUP,
                          GUC_UNIT_KB, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.connection_memory",
      "Per-connection HTTP buffer while a request is read: its head must fit in "
      "about 45% of it. Freed once a stream's socket is taken over.",
      nullptr, &connection_memory_kb, 32, 4, 1024, PGC_POSTMASTER, GUC_UNIT_KB, nullptr, nullptr,
      nullptr);
  DefineCustomIntVariable("pgbus_stream.ring_size", "Size of the shared commit-event ring.",
                          nullptr, &ring_size_kb, 8192, 16, 1024 * 1024, PGC_POSTMASTER,
                          GUC_UNIT_KB, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.max_streams", "Streams that shared memory can track.",
                          nullptr, &max_streams, 1024, 16, 1000000, PGC_POSTMASTER, 0, nullptr,
                          nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.max_pending_streams",
      "Streams not created yet that subscriptions may wait for at once, over all workers.",
      "A subscription with a credential for a stream whose queue does not exist yet waits "
      "for it; beyond this many distinct streams it is answered 503.",
      &max_pending_streams, 1024, 1, 100000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.stream_linger",
      "How long a worker keeps a stream's shared-memory entry after its last connection "
      "there left.",
      "A reconnect within it finds the stream as it was; after it, or at once when few of "
      "max_streams entries are left, the entry is given back and a later subscription reads "
      "the stream's position from its table.",
      &stream_linger_ms, 5000, 0, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.negative_cache_size",
      "Unknown stream names each worker remembers, so that asking again reads no catalog.",
      "Forgotten when a stream is created or attached; 0 = none.", &negative_cache_size, 10000, 0,
      1000000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.inline_payload_max",
      "Largest payload carried through shared memory instead of re-read from the table.", nullptr,
      &inline_payload_max, 8192, 0, 1024 * 1024, PGC_SIGHUP, GUC_UNIT_BYTE, nullptr, nullptr,
      nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.max_pending_events",
      "Events one transaction keeps in local memory before falling back to a table "
      "catch-up by the workers.",
      nullptr, &max_pending_events, 100000, 16, 100000000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.queue_max_events", "Events queued per connection.", nullptr,
                          &queue_max_events, 1000, 1, 10000000, PGC_SIGHUP, 0, nullptr, nullptr,
                          nullptr);
  DefineCustomIntVariable("pgbus_stream.queue_max_bytes", "Bytes queued per connection.", nullptr,
                          &queue_max_bytes, 1048576, 1024, INT_MAX, PGC_SIGHUP, GUC_UNIT_BYTE,
                          nullptr, nullptr, nullptr);
  DefineCustomEnumVariable(
      "pgbus_stream.overflow_policy", "What happens when a connection's queue is full.",
      "lag: the connection waits and is refilled from memory or the tables (nothing is lost); "
      "drop_oldest, drop_newest, disconnect: live-only connections.",
      &overflow_policy, 3, overflow_options, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomStringVariable("pgbus_stream.cors_origins",
                             "Origins allowed to read streams from a browser ('*' for any).",
                             nullptr, &cors_origins, "", PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomStringVariable("pgbus_stream.queue_prefix",
                             "Prefix of queue names made by create_stream().", nullptr,
                             &queue_prefix, "pgbus_", PGC_SUSET, 0, nullptr, nullptr, nullptr);
  DefineCustomStringVariable(
      "pgbus_stream.auto_attach",
      "PGMQ queues captured without attach(): comma-separated patterns, '*' for any run of "
      "characters, an item without '*' is a prefix ('' = none).",
      nullptr, &auto_attach, "pgbus_", PGC_SIGHUP, 0, check_auto_attach, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.default_retention",
                          "Retention of streams that set_retention() never configured (0 = keep "
                          "everything).",
                          nullptr, &default_retention_s, 0, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S,
                          nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.replay_page_size", "Rows read per replay query.", nullptr,
                          &replay_page_size, 500, 10, 100000, PGC_SIGHUP, 0, nullptr, nullptr,
                          nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.shutdown_drain", "How long a clean stop flushes queued events.", nullptr,
      &shutdown_drain_ms, 1000, 0, 60000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.memory_retention",
      "Ephemeral broadcasts, and recent durable rows, each worker keeps per stream for "
      "reconnecting and lagging clients.",
      "0 = none: such clients read the table (ephemeral broadcasts are then gone).",
      &memory_retention, 1000, 0, 1000000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.memory_retention_time",
      "Recent durable rows stay in a worker's memory this long even beyond memory_retention "
      "rows, within queue_max_bytes per stream.",
      "A client that lags a fast stream for less than this is refilled without reading the "
      "table. 0 = memory_retention rows only.",
      &memory_retention_time_ms, 1000, 0, 600000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
      nullptr);
  DefineCustomStringVariable(
      "pgbus_stream.default_event",
      "SSE event name of broadcasts that name none ('' sends no event line, which "
      "EventSource delivers as 'message', as stock Turbo expects).",
      nullptr, &default_event, "turbo-stream", PGC_SIGHUP, 0, check_event_name, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.cursor_flush_interval",
                          "How often workers store durable subscribers' cursors (in one batch).",
                          nullptr, &cursor_flush_interval_ms, 1000, 10, 3600000, PGC_SIGHUP,
                          GUC_UNIT_MS, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.retention_interval",
                          "How often worker 0 removes messages past their stream's retention.",
                          nullptr, &retention_interval_s, 10, 1, 86400, PGC_SIGHUP, GUC_UNIT_S,
                          nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.diagnostics_size",
                          "Lifecycle events kept for diagnostics().", nullptr, &diagnostics_size,
                          512, 0, 100000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  DefineCustomEnumVariable(
      "pgbus_stream.shutdown_policy",
      "On a clean stop: drain (send what is queued, then pgbus:shutdown) or discard.", nullptr,
      &shutdown_policy, 0, shutdown_options, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.alert_failed_total",
                          "alerts(): failed deliveries of a stream.", nullptr, &alert_failed_total,
                          1, 0, INT_MAX, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("pgbus_stream.alert_overflow_dropped_total",
                          "alerts(): events a stream's connections dropped on overflow.", nullptr,
                          &alert_overflow_dropped_total, 1, 0, INT_MAX, PGC_SIGHUP, 0, nullptr,
                          nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.alert_total_queued", "alerts(): events queued for a stream's connections.",
      nullptr, &alert_total_queued, 10000, 0, INT_MAX, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomRealVariable("pgbus_stream.alert_queue_pressure_ratio",
                           "alerts(): a connection's queued events over queue_max_events.", nullptr,
                           &alert_queue_pressure_ratio, 0.8, 0.0, 1.0, PGC_SIGHUP, 0, nullptr,
                           nullptr, nullptr);
  DefineCustomStringVariable(
      "pgbus_stream.admin_token",
      "Bearer token required by /, /metrics, /stats.json and /healthz (empty: none).", nullptr,
      &admin_token, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, nullptr, nullptr,
      nullptr);
  // Credentials of private streams: superuser-only and hidden like admin_token.
  constexpr int kSecret = GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE;
  DefineCustomStringVariable("pgbus_stream.signing_secret",
                             "Key of pgbus signed stream names (the gem's "
                             "streams_signed_name_secret; empty: none).",
                             nullptr, &signing_secret, "", PGC_SIGHUP, kSecret, nullptr, nullptr,
                             nullptr);
  DefineCustomStringVariable("pgbus_stream.secret_key_base",
                             "The Rails app's secret_key_base: accepts its turbo-rails signed "
                             "stream names (empty: none).",
                             nullptr, &secret_key_base, "", PGC_SIGHUP, kSecret, nullptr, nullptr,
                             nullptr);
  DefineCustomStringVariable("pgbus_stream.jwt_secret",
                             "HS256 key of stream JWTs and sign_token() (empty: none).", nullptr,
                             &jwt_secret, "", PGC_SIGHUP, kSecret, nullptr, nullptr, nullptr);
  DefineCustomStringVariable("pgbus_stream.token_cookie",
                             "Cookie that may carry a stream JWT (empty: cookies are not read).",
                             nullptr, &token_cookie, "", PGC_SIGHUP, kSecret, nullptr, nullptr,
                             nullptr);
  DefineCustomBoolVariable("pgbus_stream.admin_loopback_only",
                           "Answer /, /metrics, /stats.json and /healthz only to loopback clients.",
                           nullptr, &admin_loopback_only, false, PGC_SIGHUP, 0, nullptr, nullptr,
                           nullptr);
  DefineCustomBoolVariable(
      "pgbus_stream.stats_enabled",
      "Record one row per broadcast, connect and disconnect in pgbus_stream.stream_stats.", nullptr,
      &stats_enabled, false, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.stats_max_age", "Age after which stream_stats rows are deleted.", nullptr,
      &stats_max_age_s, 7 * 86400, 60, INT_MAX, PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
  DefineCustomBoolVariable(
      "pgbus_stream.standby_records",
      "Write the WAL records hot standbys serve streams from (wal_level replica or higher); "
      "every node that replays this WAL must then preload pgbus_stream.",
      nullptr, &standby_records, true, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable(
      "pgbus_stream.logical_hold",
      "How long horizons stay below rows applied by logical replication, so that a row the "
      "publisher committed out of id order within that time is still streamed.",
      "0 = no hold: such a row is applied, reported and not streamed.", &logical_hold_ms, 5000, 0,
      3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
  MarkGUCPrefixReserved("pgbus_stream");
}

static void register_workers() {
  for (int i = 0; i < pgbs::guc::workers; i++) {
    BackgroundWorker worker;
    memset(&worker, 0, sizeof(worker));
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    // On a hot standby, as soon as it accepts read-only connections.
    worker.bgw_start_time = BgWorkerStart_ConsistentState;
    worker.bgw_restart_time = 1;
    strlcpy(worker.bgw_library_name, "pgbus_stream", BGW_MAXLEN);
    strlcpy(worker.bgw_function_name, "pgbus_stream_worker_main", BGW_MAXLEN);
    snprintf(worker.bgw_name, BGW_MAXLEN, "pgbus_stream worker %d", i);
    strlcpy(worker.bgw_type, "pgbus_stream worker", BGW_MAXLEN);
    worker.bgw_main_arg = Int32GetDatum(i);
    RegisterBackgroundWorker(&worker);
  }
}

void _PG_init(void) {
  if (!process_shared_preload_libraries_in_progress)
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("pgbus_stream must be loaded via shared_preload_libraries"),
             errhint("Add pgbus_stream to shared_preload_libraries in postgresql.conf and restart "
                     "the server.")));
  define_gucs();
  pgbs::pg::init_error_copy();
  prev_shmem_request_hook = shmem_request_hook;
  shmem_request_hook = request_shmem;
  prev_shmem_startup_hook = shmem_startup_hook;
  shmem_startup_hook = startup_shmem;
  pgbs::capture::install_callbacks();
  pgbs::wal::register_rmgr();
  register_workers();
}
