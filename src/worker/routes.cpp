// The worker's plain GET routes (worker/routes.hpp).
#include "worker/routes.hpp"

#include "core/metrics.hpp"
#include "http/status_page.hpp"
#include "settings/configs.hpp"
#include "shmem/figures.hpp"
#include "shmem/ring.hpp"

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "utils/timestamp.h"
}

namespace pgbs::worker {
namespace {

metrics::Snapshot snapshot(const Hub &hub, int worker_index, bool database_ok) {
  metrics::Snapshot s;
  s.now_us = (int64)GetCurrentTimestamp() +
             (int64)(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
  s.worker = worker_index;
  s.connections = (int64_t)shmem::node_connections();
  const engine::Counters &c = hub.engine().counters();
  s.queued = c.queued;
  s.overflow_dropped = c.overflow_dropped;
  s.catch_ups = c.catch_ups;
  s.rows_read = c.rows_read;
  s.ring_overflows = shmem::ring_overflows();
  s.database_ok = database_ok;
  // Without admin_token every client of these routes is anonymous: private
  // streams stay out of them.
  hub.fill_snapshot(&s, !settings::current().admin_token.empty());
  return s;
}

} // namespace

void register_routes(http::Server &server, const Hub &hub, int worker_index,
                     const bool *database_ok) {
  server.set_handler("/", [](std::string *body, std::string *type) {
    *body = http::status_page_html();
    *type = "text/html; charset=utf-8";
    return 200;
  });
  server.set_handler("/viewer", [](std::string *body, std::string *type) {
    *body = http::viewer_page_html();
    *type = "text/html; charset=utf-8";
    return 200;
  });
  server.set_handler("/stats.json",
                     [&hub, worker_index, database_ok](std::string *body, std::string *type) {
                       *body = metrics::render_json(snapshot(hub, worker_index, *database_ok));
                       *type = "application/json";
                       return 200;
                     });
  server.set_handler(
      "/metrics", [&hub, worker_index, database_ok](std::string *body, std::string *type) {
        *body = metrics::render_prometheus(snapshot(hub, worker_index, *database_ok));
        *type = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
      });
  server.set_handler("/healthz", [database_ok](std::string *body, std::string *type) {
    *type = "text/plain";
    *body = *database_ok ? "ok\n" : "database unavailable\n";
    return *database_ok ? 200 : 503;
  });
  // Operators' routes: behind pgbus_stream.admin_token / admin_loopback_only.
  for (const char *path : {"/", "/stats.json", "/metrics", "/healthz"})
    server.protect(path);
}

} // namespace pgbs::worker
