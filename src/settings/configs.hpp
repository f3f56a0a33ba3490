// The engine's and the listener's configuration from the settings: the one
// place that turns settings into engine::Config and http::Config, whose
// setting-driven fields have no defaults of their own. PostgreSQL-free, so
// the simulator and the HTTP driver start from the same defaults
// (engine_config(Settings{}, false), http_config(Settings{})).
#pragma once
#include "engine/engine.hpp"
#include "http/server.hpp"
#include "settings/settings.hpp"

namespace pgbs::settings {

// standby: a hot standby writes nothing (no history rows, no retention: the
// primary's deletions replicate).
inline engine::Config engine_config(const Settings &s, bool standby) {
  engine::Config c;
  c.queue_max_events = (size_t)s.queue_max_events;
  c.queue_max_bytes = (size_t)s.queue_max_bytes;
  c.overflow_policy = s.overflow_policy;
  c.memory_retention = (size_t)s.memory_retention;
  c.memory_retention_us = (int64_t)s.memory_retention_time_ms * 1000;
  c.replay_page_size = (size_t)s.replay_page_size;
  c.replay_page_bytes = (size_t)s.replay_page_bytes;
  c.default_event = s.default_event;
  c.stats_enabled = s.stats_enabled && !standby;
  c.stats_per_batch = !s.stats_table.empty();
  c.default_retention = s.default_retention_s > 0 && !standby;
  c.max_pending_streams = (size_t)s.max_pending_streams;
  c.negative_cache_size = (size_t)s.negative_cache_size;
  c.stream_linger_us = (int64_t)s.stream_linger_ms * 1000;
  return c;
}

// The listener's tunables; what belongs to one worker process (connection
// places, id base, socket budget) and the resolved admin_token are the
// worker's to add.
inline http::Config http_config(const Settings &s) {
  http::Config c;
  c.listen_addresses = s.listen_addresses;
  c.port = s.port;
  c.max_connections = s.max_connections;
  c.heartbeat_interval_s = s.heartbeat_interval;
  c.idle_timeout_s = s.idle_timeout;
  c.max_lifetime_s = s.max_lifetime;
  c.socket_send_buffer = s.socket_send_buffer_kb * 1024;
  c.connection_memory_limit = (size_t)s.connection_memory_kb * 1024;
  c.cors_origins = s.cors_origins;
  c.queue_max_events = (size_t)s.queue_max_events;
  c.queue_max_bytes = (size_t)s.queue_max_bytes;
  c.overflow_policy = s.overflow_policy;
  c.admin_loopback_only = s.admin_loopback_only;
  c.token_cookie = s.token_cookie;
  return c;
}

} // namespace pgbs::settings
