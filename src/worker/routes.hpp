// The worker's plain GET routes: the status page, the viewer, /stats.json,
// /metrics and /healthz.
#pragma once
#include "http/server.hpp"
#include "worker/hub.hpp"

namespace pgbs::worker {

// Registers the routes of worker `worker_index` on `server`. They run inside
// libmicrohttpd callbacks on the worker's thread and only read shared memory,
// the hub and *database_ok (the last probe's answer): no PostgreSQL calls.
void register_routes(http::Server &server, const Hub &hub, int worker_index,
                     const bool *database_ok);

} // namespace pgbs::worker
