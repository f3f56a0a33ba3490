// The worker's two HTML pages, each one self-contained document (inline CSS
// and JavaScript, no external assets):
//
//  - the status page (GET /) polls /stats.json every second and shows
//    per-stream figures and a chart of deliveries/s and p99 latency;
//  - the stream viewer (GET /viewer?stream=<name>, default "demo") opens an
//    EventSource on /streams/<name> of the same origin and lists every event
//    it receives (type, data, id), newest at the bottom, with the connection
//    state. EventSource cannot subscribe to "every event name", so the viewer
//    shows only turbo-stream, message, pgbus:connected, pgbus:gap-detected,
//    pgbus:shutdown, plus the names given in ?events=a,b; broadcasts with any
//    other event name arrive but are not shown.
#pragma once
#include "core/no_postgres.hpp"

#include <string>

namespace pgbs::http {

// The status page's bytes (UTF-8, text/html); built once, never changes.
const std::string &status_page_html();

// The stream viewer's bytes (UTF-8, text/html); built once, never changes.
const std::string &viewer_page_html();

} // namespace pgbs::http
