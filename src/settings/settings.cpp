// Every pgbus_stream.* setting: its definition, and the only reads of the
// variables PostgreSQL keeps them in. See settings.hpp for how to add one.
#include "settings/settings.hpp"
#include "core/auth.hpp"
#include "core/auth_gate.hpp" // auth::Secrets
#include "core/names.hpp"
#include "core/wire.hpp"
#include "pg/spi.hpp"
#include "shmem/shared.hpp"

#include <climits>
#include <deque>
#include <functional>
#include <vector>

extern "C" {
#include "postgres.h"
#include "utils/guc.h"
}

namespace pgbs::settings {
namespace {

// The boot values: the defaults written in Settings.
const Settings kDefaults;
// Where PostgreSQL writes the values. Numbers and booleans live in g_live's
// own fields (each starting at its default, which is passed as its boot
// value); strings and enums live in slots that load() copies out.
Settings g_live;
Settings g_current;
std::deque<char *> g_strings; // a deque: slots never move
std::deque<int> g_enums;
std::vector<std::function<void(Settings &)>> g_copy_out;
char **g_jwt_secret = nullptr;
char **g_auto_attach = nullptr;

void define_int(const char *name, int Settings::*field, const char *short_desc,
                const char *long_desc, int min, int max, GucContext context, int flags) {
  int *var = &(g_live.*field);
  DefineCustomIntVariable(name, short_desc, long_desc, var, *var, min, max, context, flags, nullptr,
                          nullptr, nullptr);
}

void define_real(const char *name, double Settings::*field, const char *short_desc,
                 const char *long_desc, double min, double max, GucContext context, int flags) {
  double *var = &(g_live.*field);
  DefineCustomRealVariable(name, short_desc, long_desc, var, *var, min, max, context, flags,
                           nullptr, nullptr, nullptr);
}

void define_bool(const char *name, bool Settings::*field, const char *short_desc,
                 const char *long_desc, GucContext context, int flags) {
  bool *var = &(g_live.*field);
  DefineCustomBoolVariable(name, short_desc, long_desc, var, *var, context, flags, nullptr, nullptr,
                           nullptr);
}

char **define_string(const char *name, std::string Settings::*field, const char *short_desc,
                     const char *long_desc, GucContext context, int flags,
                     GucStringCheckHook check = nullptr) {
  char **var = &g_strings.emplace_back(nullptr); // PostgreSQL frees what it replaces
  DefineCustomStringVariable(name, short_desc, long_desc, var, (kDefaults.*field).c_str(), context,
                             flags, check, nullptr, nullptr);
  g_copy_out.push_back([var, field](Settings &s) { s.*field = *var ? *var : kDefaults.*field; });
  return var;
}

template <typename E>
void define_enum(const char *name, E Settings::*field, const char *short_desc,
                 const char *long_desc, const config_enum_entry *options, GucContext context,
                 int flags) {
  int *var = &g_enums.emplace_back((int)(kDefaults.*field));
  DefineCustomEnumVariable(name, short_desc, long_desc, var, *var, options, context, flags, nullptr,
                           nullptr, nullptr);
  g_copy_out.push_back([var, field](Settings &s) { s.*field = (E)*var; });
}

// An event name the SSE framing can carry (wire::valid_event_name), or
// empty (no event line).
bool check_event_name(char **newval, void **, GucSource) {
  if (*newval == nullptr || **newval == '\0' || pgbs::wire::valid_event_name(*newval))
    return true;
  GUC_check_errdetail("%s", pgbs::wire::kEventNameRule);
  return false;
}

bool check_auto_attach(char **newval, void **, GucSource) {
  if (*newval == nullptr || pgbs::names::valid_auto_attach(*newval))
    return true;
  GUC_check_errdetail("A comma-separated list of queue name patterns: letters, digits, \"_\" and "
                      "\"*\" (any run of characters), at most 47 characters each.");
  return false;
}

const config_enum_entry overflow_options[] = {{"drop_oldest", (int)OverflowPolicy::DropOldest, false},
                                              {"drop_newest", (int)OverflowPolicy::DropNewest, false},
                                              {"disconnect", (int)OverflowPolicy::Disconnect, false},
                                              {"lag", (int)OverflowPolicy::Lag, false},
                                              {nullptr, 0, false}};

const config_enum_entry shutdown_options[] = {{"drain", (int)ShutdownPolicy::Drain, false},
                                              {"discard", (int)ShutdownPolicy::Discard, false},
                                              {nullptr, 0, false}};

// Credentials of private streams and the operators' token: superuser-only and hidden.
// PostgreSQL 16+ with assertions requires a hidden setting to be left out of
// the sample file as well.
constexpr int kSecret = GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE;

} // namespace

// One line per setting: name, field, short and long description, bounds,
// context, flags (and a check hook). The default is the field's in Settings.
// clang-format off
void define() {
  using S = Settings;
  define_int("pgbus_stream.port", &S::port, "TCP port of the SSE listener (0 = no listener).", nullptr, 0, 65535, PGC_POSTMASTER, 0);
  define_string("pgbus_stream.listen_addresses", &S::listen_addresses, "Comma-separated addresses the SSE listener binds ('*' for all).", nullptr, PGC_POSTMASTER, 0);
  define_string("pgbus_stream.database", &S::database, "Database whose streams the workers serve.", nullptr, PGC_POSTMASTER, 0);
  define_int("pgbus_stream.workers", &S::workers, "Number of worker processes sharing the listener port.", nullptr, 1, shmem::kMaxWorkers, PGC_POSTMASTER, 0);
  define_int("pgbus_stream.max_connections", &S::max_connections, "Maximum SSE connections, shared among the workers.", nullptr, 1, 1000000, PGC_SIGHUP, 0);
  define_int("pgbus_stream.accept_rate", &S::accept_rate, "New SSE connections each worker decides per second at most (0 = no bound); the rest wait their turn, in order.", nullptr, 0, 1000000, PGC_SIGHUP, 0);
  define_int("pgbus_stream.heartbeat_interval", &S::heartbeat_interval, "Seconds between heartbeat comments.", nullptr, 1, 3600, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pgbus_stream.idle_timeout", &S::idle_timeout, "Close connections that received only heartbeats for this long (0 = never).", nullptr, 0, 86400 * 7, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pgbus_stream.max_lifetime", &S::max_lifetime, "End a stream this long after it opened (less up to 10% jitter); the client reconnects with its last id (0 = never).", nullptr, 0, 86400 * 7, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pgbus_stream.socket_send_buffer", &S::socket_send_buffer_kb, "Kernel send buffer of each SSE socket (0 = kernel autotuning, up to net.ipv4.tcp_wmem's maximum per socket).", nullptr, 0, 64 * 1024, PGC_SIGHUP, GUC_UNIT_KB);
  define_int("pgbus_stream.connection_memory", &S::connection_memory_kb, "Per-connection HTTP buffer while a request is read: its head must fit in about 45% of it. Freed once a stream's socket is taken over.", nullptr, 4, 1024, PGC_POSTMASTER, GUC_UNIT_KB);
  define_int("pgbus_stream.ring_size", &S::ring_size_kb, "Size of the shared commit-event ring.", nullptr, 16, 1024 * 1024, PGC_POSTMASTER, GUC_UNIT_KB);
  define_int("pgbus_stream.max_streams", &S::max_streams, "Streams that shared memory can track.", nullptr, 16, 1000000, PGC_POSTMASTER, 0);
  define_int("pgbus_stream.max_pending_streams", &S::max_pending_streams, "Streams not created yet that subscriptions may wait for at once, over all workers.", "A subscription with a credential for a stream whose queue does not exist yet waits for it; beyond this many distinct streams it is answered 503.", 1, 100000, PGC_POSTMASTER, 0);
  define_int("pgbus_stream.stream_linger", &S::stream_linger_ms, "How long a worker keeps a stream's shared-memory entry after its last connection there left.", "A reconnect within it finds the stream as it was; after it, or at once when few of max_streams entries are left, the entry is given back and a later subscription reads the stream's position from its table.", 0, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pgbus_stream.negative_cache_size", &S::negative_cache_size, "Unknown stream names each worker remembers, so that asking again reads no catalog.", "Forgotten when a stream is created or attached; 0 = none.", 0, 1000000, PGC_SIGHUP, 0);
  define_int("pgbus_stream.inline_payload_max", &S::inline_payload_max, "Largest payload carried through shared memory instead of re-read from the table.", nullptr, 0, 1024 * 1024, PGC_SIGHUP, GUC_UNIT_BYTE);
  define_int("pgbus_stream.max_pending_events", &S::max_pending_events, "Events one transaction keeps in local memory before falling back to a table catch-up by the workers.", nullptr, 16, 100000000, PGC_SUSET, 0);
  define_int("pgbus_stream.queue_max_events", &S::queue_max_events, "Events queued per connection.", nullptr, 1, 10000000, PGC_SIGHUP, 0);
  define_int("pgbus_stream.queue_max_bytes", &S::queue_max_bytes, "Bytes queued per connection.", nullptr, 1024, INT_MAX, PGC_SIGHUP, GUC_UNIT_BYTE);
  define_enum("pgbus_stream.overflow_policy", &S::overflow_policy, "What happens when a connection's queue is full.", "lag: the connection waits and is refilled from memory or the tables (nothing is lost); drop_oldest, drop_newest, disconnect: live-only connections.", overflow_options, PGC_SIGHUP, 0);
  define_string("pgbus_stream.cors_origins", &S::cors_origins, "Origins allowed to read streams from a browser ('*' for any).", nullptr, PGC_SIGHUP, 0);
  define_string("pgbus_stream.queue_prefix", &S::queue_prefix, "Prefix of queue names made by create_stream().", nullptr, PGC_SUSET, 0);
  g_auto_attach = define_string("pgbus_stream.auto_attach", &S::auto_attach, "PGMQ queues captured without attach(): comma-separated patterns, '*' for any run of characters, an item without '*' is a prefix ('' = none).", nullptr, PGC_SIGHUP, 0, check_auto_attach);
  define_int("pgbus_stream.default_retention", &S::default_retention_s, "Retention of streams that set_retention() never configured (0 = keep everything).", nullptr, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pgbus_stream.replay_page_size", &S::replay_page_size, "Rows read per replay query.", nullptr, 10, 100000, PGC_SIGHUP, 0);
  define_int("pgbus_stream.replay_page_bytes", &S::replay_page_bytes, "Bytes of payload one table read of a worker holds (replay, lag, rows too large for the ring).", "A read stops at the row that reaches it, so a larger row is read alone.", 65536, INT_MAX, PGC_SIGHUP, GUC_UNIT_BYTE);
  define_int("pgbus_stream.shutdown_drain", &S::shutdown_drain_ms, "How long a clean stop flushes queued events.", nullptr, 0, 60000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pgbus_stream.memory_retention", &S::memory_retention, "Ephemeral broadcasts, and recent durable rows, each worker keeps per stream for reconnecting and lagging clients.", "0 = none: such clients read the table (ephemeral broadcasts are then gone).", 0, 1000000, PGC_SIGHUP, 0);
  define_int("pgbus_stream.memory_retention_time", &S::memory_retention_time_ms, "Recent durable rows stay in a worker's memory this long even beyond memory_retention rows, within queue_max_bytes per stream.", "A client that lags a fast stream for less than this is refilled without reading the table. 0 = memory_retention rows only.", 0, 600000, PGC_SIGHUP, GUC_UNIT_MS);
  define_string("pgbus_stream.default_event", &S::default_event, "SSE event name of broadcasts that name none ('' sends no event line, which EventSource delivers as 'message', as stock Turbo expects).", nullptr, PGC_SIGHUP, 0, check_event_name);
  define_int("pgbus_stream.cursor_flush_interval", &S::cursor_flush_interval_ms, "How often workers store durable subscribers' cursors (in one batch).", nullptr, 10, 3600000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pgbus_stream.retention_interval", &S::retention_interval_s, "How often worker 0 removes messages past their stream's retention.", nullptr, 1, 86400, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pgbus_stream.diagnostics_size", &S::diagnostics_size, "Lifecycle events kept for diagnostics().", nullptr, 0, 100000, PGC_POSTMASTER, 0);
  define_enum("pgbus_stream.shutdown_policy", &S::shutdown_policy, "On a clean stop: drain (send what is queued, then pgbus:shutdown) or discard.", nullptr, shutdown_options, PGC_SIGHUP, 0);
  define_int("pgbus_stream.alert_failed_total", &S::alert_failed_total, "alerts(): failed deliveries of a stream.", nullptr, 0, INT_MAX, PGC_SIGHUP, 0);
  define_int("pgbus_stream.alert_overflow_dropped_total", &S::alert_overflow_dropped_total, "alerts(): events a stream's connections dropped on overflow.", nullptr, 0, INT_MAX, PGC_SIGHUP, 0);
  define_int("pgbus_stream.alert_total_queued", &S::alert_total_queued, "alerts(): events queued for a stream's connections.", nullptr, 0, INT_MAX, PGC_SIGHUP, 0);
  define_real("pgbus_stream.alert_queue_pressure_ratio", &S::alert_queue_pressure_ratio, "alerts(): a connection's queued events over queue_max_events.", nullptr, 0.0, 1.0, PGC_SIGHUP, 0);
  define_string("pgbus_stream.admin_token", &S::admin_token, "Bearer token required by /, /metrics, /stats.json and /healthz (empty: none).", nullptr, PGC_SIGHUP, kSecret);
  define_string("pgbus_stream.signing_secret", &S::signing_secret, "Key of pgbus signed stream names (the gem's streams_signed_name_secret; empty: none).", nullptr, PGC_SIGHUP, kSecret);
  define_string("pgbus_stream.secret_key_base", &S::secret_key_base, "The Rails app's secret_key_base: accepts its turbo-rails signed stream names (empty: none).", nullptr, PGC_SIGHUP, kSecret);
  g_jwt_secret = define_string("pgbus_stream.jwt_secret", &S::jwt_secret, "HS256 key of stream JWTs and sign_token() (empty: none).", nullptr, PGC_SIGHUP, kSecret);
  define_string("pgbus_stream.token_cookie", &S::token_cookie, "Cookie that may carry a stream JWT (empty: cookies are not read).", nullptr, PGC_SIGHUP, kSecret);
  define_bool("pgbus_stream.admin_loopback_only", &S::admin_loopback_only, "Answer /, /metrics, /stats.json and /healthz only to loopback clients.", nullptr, PGC_SIGHUP, 0);
  define_bool("pgbus_stream.stats_enabled", &S::stats_enabled, "Record one row per broadcast, connect and disconnect in pgbus_stream.stream_stats.", nullptr, PGC_SIGHUP, 0);
  define_string("pgbus_stream.stats_table", &S::stats_table, "Table stats_enabled writes, with the pgbus gem's semantics (its pgbus_stream_stats: one broadcast row per batch); empty: pgbus_stream.stream_stats, one row per broadcast.", nullptr, PGC_SIGHUP, 0);
  define_int("pgbus_stream.stats_max_age", &S::stats_max_age_s, "Age after which stream_stats rows are deleted.", nullptr, 60, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_bool("pgbus_stream.standby_records", &S::standby_records, "Write the WAL records hot standbys serve streams from (wal_level replica or higher); every node that replays this WAL must then preload pgbus_stream.", nullptr, PGC_POSTMASTER, 0);
  define_int("pgbus_stream.logical_hold", &S::logical_hold_ms, "How long horizons stay below rows applied by logical replication, so that a row the publisher committed out of id order within that time is still streamed.", "0 = no hold: such a row is applied, reported and not streamed.", 0, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS);
  MarkGUCPrefixReserved("pgbus_stream");
}
// clang-format on

const Settings &load() {
  g_current = g_live;
  for (const auto &copy : g_copy_out)
    copy(g_current);
  return g_current;
}

const Settings &current() { return g_current; }

shmem::Sizes shmem_sizes(const Settings &s) {
  shmem::Sizes z;
  z.ring_bytes = (size_t)s.ring_size_kb * 1024;
  z.max_streams = s.max_streams;
  z.workers = s.workers;
  z.max_connections = s.max_connections;
  z.diagnostics_size = s.diagnostics_size;
  z.max_pending_streams = s.max_pending_streams;
  return z;
}

auth::Secrets secrets(const Settings &s) {
  auth::Secrets out;
  auto one = [](const char *name, const std::string &setting, std::string *key) {
    std::string err;
    if (!auth::resolve_secret(setting, key, &err))
      pg::warn(std::string(name) + ": " + err);
  };
  one("pgbus_stream.signing_secret", s.signing_secret, &out.signing_secret);
  one("pgbus_stream.secret_key_base", s.secret_key_base, &out.secret_key_base);
  one("pgbus_stream.jwt_secret", s.jwt_secret, &out.jwt_secret);
  return out;
}

std::string admin_token(const Settings &s) {
  std::string token, err;
  if (!auth::resolve_secret(s.admin_token, &token, &err)) {
    pg::warn("pgbus_stream.admin_token: " + err + " (the operators' routes answer 401)");
    token = std::string(64, '\0') + "unreadable"; // matches no token a client can send
  }
  return token;
}

int max_pending_events() { return g_live.max_pending_events; }
int inline_payload_max() { return g_live.inline_payload_max; }
int logical_hold_ms() { return g_live.logical_hold_ms; }
bool standby_records() { return g_live.standby_records; }
const char *jwt_secret() { return g_jwt_secret && *g_jwt_secret ? *g_jwt_secret : ""; }
const char *auto_attach() { return g_auto_attach && *g_auto_attach ? *g_auto_attach : ""; }

} // namespace pgbs::settings
