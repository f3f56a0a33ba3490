// Request-target parsing for the HTTP listener: routes, percent-decoding,
// query parameters, CORS origin matching. Pure functions, no libmicrohttpd and
// no PostgreSQL, so that they can be unit-tested and fuzzed on their own.
#pragma once
#include "core/no_postgres.hpp"
#include "http/server.hpp"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pgbs::http {

// Percent-decodes `in` into *out. With `form` set, '+' becomes a space (query
// strings); in a path it stays a '+'. Fails on a malformed escape and on a
// decoded NUL byte (no NUL may reach a stream name, cursor or token).
bool percent_decode(std::string_view in, bool form, std::string *out);

enum class Route {
  NotFound,
  Stream,  // GET /streams/{name}
  Streams, // GET /streams?stream=a&stream=b
  Signed,  // GET /pgbus/streams/{signed-name}
};

// The request target split into a raw path and decoded query parameters, in order.
struct Target {
  std::string_view path; // raw (still percent-encoded), points into the parsed URI
  std::vector<std::pair<std::string, std::string>> query;
};

// Splits a raw request target ("/streams/a%20b?since=4&x"). A parameter
// without '=' gets an empty value. Fails (with *err) on a target that does not
// start with '/' or on bad percent-encoding.
bool parse_target(std::string_view raw, Target *out, std::string *err);

// Classifies a path into one of the SSE routes.
Route classify(std::string_view raw_path);

// The SSE part of a request that the route and query decide. A
// /streams/{x} whose x has the shape of a signed name (auth::looks_signed) is
// the signed route too: what follows the prefix is the token, '/' included
// (the gem renders it unescaped). Fills
// req->streams / creds.signed_name / since / replay / subscriber / presence / creds.token from the
// target. On a client error returns the HTTP status (400 or 404) and sets
// *reason; returns 0 on success. Stream names must satisfy
// cursor::valid_stream_name (anything else cannot be a stream: 404); at most
// `max_streams` distinct streams per request (400 beyond); blank values count
// as absent; ?since= wins over ?last_event_id=.
int fill_sse_request(Route route, const Target &t, size_t max_streams, Request *req,
                     std::string *reason);

// The value of cookie `name` in a Cookie header ("a=1; b=2"), quotes
// removed; false when absent or blank. Names compare exactly.
bool cookie_value(std::string_view cookie_header, std::string_view name, std::string *value);

// Extracts the token of an "Authorization: Bearer <token>" header value
// (scheme case-insensitive). False when the header is not a non-blank Bearer.
bool bearer_token(std::string_view authorization, std::string *token);

// True when `origin` (non-empty) is allowed by a comma-separated `cors_origins`
// list; "*" allows any origin; entries are compared exactly after trimming.
bool origin_allowed(std::string_view cors_origins, std::string_view origin);
// True when `origin` is named in the list itself ("*" does not count): only
// such origins may send credentials (cookies) along (Access-Control-Allow-Credentials).
bool origin_listed(std::string_view cors_origins, std::string_view origin);

// True when `addr`, a client address as the listener writes it ("a.b.c.d:port"
// or "[v6]:port"), is on the loopback: 127.0.0.0/8, ::1, or 127.0.0.0/8
// mapped into IPv6 (admin_loopback_only).
bool is_loopback(std::string_view addr);

} // namespace pgbs::http
