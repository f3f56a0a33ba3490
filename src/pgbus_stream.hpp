// Module-wide settings (GUC variables) shared by every layer that runs inside
// PostgreSQL. Defined and registered in pgbus_stream.cpp.
#pragma once

namespace pgbs::guc {
extern int port;
extern char *listen_addresses;
extern char *database;
extern int workers;
extern int max_connections;
extern int heartbeat_interval;
extern int accept_rate; // new SSE connections decided per second per worker (0: no bound)
extern int idle_timeout;
extern int max_lifetime;
extern int socket_send_buffer_kb;
extern int connection_memory_kb;
extern int ring_size_kb;
extern int max_streams;
extern int inline_payload_max;
extern int max_pending_events;
extern int queue_max_events;
extern int queue_max_bytes;
extern int overflow_policy; // pgbs::OverflowPolicy as int
extern char *cors_origins;
extern char *queue_prefix;
extern char *auto_attach;       // patterns of PGMQ queues captured without attach()
extern int default_retention_s; // 0 = none
extern int replay_page_size;
extern int shutdown_drain_ms;
extern int memory_retention;
extern int memory_retention_time_ms;
extern char *default_event;
extern int cursor_flush_interval_ms;
extern int retention_interval_s;
extern int diagnostics_size;
extern int shutdown_policy; // 0 drain, 1 discard
extern char *admin_token;
extern bool admin_loopback_only;
extern char *signing_secret;
extern char *secret_key_base;
extern char *jwt_secret;
extern char *token_cookie;
extern bool stats_enabled;
extern bool standby_records; // capture writes WAL records for hot standbys
extern int stats_max_age_s;
extern int max_pending_streams; // awaited streams in shared memory (restart)
extern int negative_cache_size;
extern int logical_hold_ms; // horizons held below rows applied by logical replication
extern int stream_linger_ms; // a stream without connections keeps its shared-memory entry this long
} // namespace pgbs::guc
