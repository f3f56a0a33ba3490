// The status page served at GET /: one self-contained HTML document (inline
// CSS and JavaScript, no external assets) that polls /stats.json every second
// and shows per-stream figures and a chart of deliveries/s and p99 latency.
#pragma once
#include "core/no_postgres.hpp"

#include <string>

namespace pgbs::http {

// The page's bytes (UTF-8, text/html); built once, never changes.
const std::string &status_page_html();

} // namespace pgbs::http
