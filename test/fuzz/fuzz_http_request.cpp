// libFuzzer target for http/request: the pure request-target and header
// parsing the listener applies to whatever a client sends.
//
// Input: one byte choosing max_streams (0..39), then up to four fields
// separated by NUL bytes (libmicrohttpd hands them over as C strings, so
// none of them can contain a NUL): the raw request target, an Authorization
// header value, a cors_origins list and an Origin header value.
//
// Checked, beyond "no crash, no sanitizer report":
//  - percent_decode agrees with a straightforward reference decoder, never
//    yields a NUL, and re-encoding its output decodes back to it;
//  - trim removes exactly the leading/trailing spaces and tabs;
//  - parse_target: the path is a non-empty prefix of the target starting
//    with '/', without '?' or '#'; a failure has a reason; the query
//    parameters survive re-encoding and re-parsing unchanged;
//  - classify matches the route prefixes;
//  - fill_sse_request: on success every stream name is valid per
//    cursor::valid_stream_name, distinct, at most max_streams of them, and is
//    what the path or a ?stream= parameter said; since/replay/subscriber/token
//    are trimmed and come from the right parameters; a preset token is kept;
//    on failure the status is 400 or 404 with a reason;
//  - bearer_token and origin_allowed agree with reference implementations.
#include "core/auth.hpp"
#include "core/cursor.hpp"
#include "core/text.hpp"
#include "http/request.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using namespace pgbs;
using namespace pgbs::http;

namespace {

std::string_view g_input;

void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz_http_request: %s\ninput (%zu bytes):", what, g_input.size());
  for (unsigned char c : g_input)
    std::fprintf(stderr, " %02x", c);
  std::fprintf(stderr, "\n");
  std::abort();
}

bool blank(char c) { return c == ' ' || c == '\t'; }

int hex(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// Reference decoder: "%XY" needs two hex digits, '+' is a space only in a
// query (form), a decoded NUL is an error.
bool ref_decode(std::string_view in, bool form, std::string *out) {
  out->clear();
  size_t i = 0;
  while (i < in.size()) {
    char c = in[i];
    if (c == '%') {
      if (in.size() - i < 3 || hex(in[i + 1]) < 0 || hex(in[i + 2]) < 0)
        return false;
      c = static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2]));
      i += 3;
    } else {
      if (c == '+' && form)
        c = ' ';
      i += 1;
    }
    if (c == '\0')
      return false;
    out->push_back(c);
  }
  return true;
}

// Encodes every byte outside [A-Za-z0-9-._~] as %XX ('+' included, so that
// it cannot turn into a space).
std::string encode(std::string_view s) {
  static const char *digits = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(digits[c >> 4]);
      out.push_back(digits[c & 15]);
    }
  }
  return out;
}

std::string_view ref_trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && blank(s[b]))
    ++b;
  while (e > b && blank(s[e - 1]))
    --e;
  return s.substr(b, e - b);
}

bool ref_bearer(std::string_view v, std::string *token) {
  v = ref_trim(v);
  if (v.size() < 7)
    return false;
  static const char *scheme = "bearer";
  for (size_t i = 0; i < 6; ++i) {
    char c = v[i];
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
    if (c != scheme[i])
      return false;
  }
  if (!blank(v[6]))
    return false;
  const std::string_view t = ref_trim(v.substr(7));
  if (t.empty())
    return false;
  *token = std::string(t);
  return true;
}

bool ref_origin_allowed(std::string_view list, std::string_view origin) {
  if (origin.empty())
    return false;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos)
      comma = list.size();
    const std::string_view item = ref_trim(list.substr(start, comma - start));
    if (item == "*" || item == origin)
      return true;
    start = comma + 1;
  }
  return false;
}

bool is_trimmed(std::string_view s) { return s.empty() || (!blank(s.front()) && !blank(s.back())); }

void check_decode(std::string_view in) {
  for (bool form : {false, true}) {
    std::string out, ref;
    const bool ok = percent_decode(in, form, &out);
    const bool ref_ok = ref_decode(in, form, &ref);
    check(ok == ref_ok, "percent_decode accepts differently from the reference");
    if (!ok)
      continue;
    check(out == ref, "percent_decode differs from the reference");
    check(out.size() <= in.size(), "percent_decode grew the text");
    check(out.find('\0') == std::string::npos, "percent_decode produced a NUL");
    std::string back;
    check(percent_decode(encode(out), form, &back) && back == out, "percent_decode round trip differs");
  }
}

void check_trim(std::string_view s) {
  const std::string_view t = pgbs::text::trim(s);
  check(t == ref_trim(s), "trim differs from the reference");
  check(t.empty() || (t.data() >= s.data() && t.data() + t.size() <= s.data() + s.size()),
        "trim result is not part of its input");
  check(is_trimmed(t) && pgbs::text::trim(t) == t, "trim is not idempotent");
}

void check_target(std::string_view raw, size_t max_streams, std::string_view authorization) {
  Target t;
  std::string err;
  if (!parse_target(raw, &t, &err)) {
    check(!err.empty(), "parse_target failed without a reason");
    return;
  }
  check(!t.path.empty() && t.path.front() == '/', "path does not start with '/'");
  check(t.path.data() == raw.data() && t.path.size() <= raw.size(), "path is not a prefix of the target");
  check(t.path.find('?') == std::string_view::npos && t.path.find('#') == std::string_view::npos,
        "path holds a query or a fragment");
  for (const auto &[k, v] : t.query)
    check(k.find('\0') == std::string::npos && v.find('\0') == std::string::npos, "query holds a NUL");

  // The parameters survive re-encoding.
  std::string again = "/?";
  for (const auto &[k, v] : t.query)
    again += encode(k) + "=" + encode(v) + "&";
  Target t2;
  check(parse_target(again, &t2, &err), "re-encoded query does not parse");
  check(t2.query == t.query, "query round trip differs");

  // Routing.
  const Route route = classify(t.path);
  const std::string_view path = t.path;
  const bool streams_prefix = path.size() > 9 && path.substr(0, 9) == "/streams/";
  const bool signed_prefix = path.size() > 15 && path.substr(0, 15) == "/pgbus/streams/";
  switch (route) {
  case Route::Stream:
    check(streams_prefix, "Stream route without /streams/<name>");
    break;
  case Route::Streams:
    check(path == "/streams", "Streams route for another path");
    break;
  case Route::Signed:
    check(signed_prefix, "Signed route without /pgbus/streams/<name>");
    break;
  case Route::NotFound:
    check(!streams_prefix && !signed_prefix && path != "/streams", "a route path classified NotFound");
    break;
  }

  Request req;
  const std::string preset = "preset-token";
  const bool has_bearer = bearer_token(authorization, &req.creds.token);
  if (!has_bearer)
    req.creds.token = (authorization.size() & 1) ? preset : std::string();
  const std::string token_before = req.creds.token;
  std::string reason;
  const int st = fill_sse_request(route, t, max_streams, &req, &reason);
  if (st != 0) {
    check(st == 400 || st == 404, "fill_sse_request returned a status other than 400/404");
    check(!reason.empty(), "fill_sse_request failed without a reason");
    if (route == Route::NotFound)
      check(st == 404, "NotFound route not answered 404");
    return;
  }
  check(route != Route::NotFound, "NotFound route accepted");
  check(req.streams.size() <= max_streams, "more streams than max_streams");
  for (size_t i = 0; i < req.streams.size(); ++i) {
    check(cursor::valid_stream_name(req.streams[i]), "accepted an invalid stream name");
    for (size_t j = 0; j < i; ++j)
      check(req.streams[i] != req.streams[j], "duplicate stream name");
  }
  if (route == Route::Stream) {
    // /streams/{x}: x decoded is one plain stream, or a signed name when it
    // has the shape of one (request.hpp).
    std::string name;
    check(percent_decode(path.substr(9), false, &name), "Stream route with an undecodable name");
    if (!req.creds.signed_name.empty()) {
      check(req.streams.empty(), "Stream route with a signed name and a plain stream");
      check(name == req.creds.signed_name, "signed name is not the decoded path segment");
      check(auth::looks_signed(name), "a signed name that does not look signed");
    } else {
      check(req.streams.size() == 1 && name == req.streams[0],
            "Stream route without exactly the decoded path segment as its stream");
      check(path.substr(9).find('/') == std::string_view::npos, "stream name from a nested path");
    }
  } else if (route == Route::Streams) {
    check(!req.streams.empty(), "Streams route without a stream");
    for (const std::string &s : req.streams) {
      bool found = false;
      for (const auto &[k, v] : t.query)
        found |= k == "stream" && pgbs::text::trim(v) == s;
      check(found, "a stream that no ?stream= parameter named");
    }
  } else {
    std::string name;
    check(req.streams.empty(), "Signed route set streams");
    check(percent_decode(path.substr(15), false, &name) && name == req.creds.signed_name,
          "signed name is not the decoded path rest");
    check(!pgbs::text::trim(req.creds.signed_name).empty(), "blank signed name accepted");
  }

  // Cursor, replay, subscriber and token parameters.
  const std::string *since = nullptr;
  for (const char *key : {"since", "last_event_id"}) {
    for (const auto &[k, v] : t.query)
      if (!since && k == key && !pgbs::text::trim(v).empty())
        since = &v;
    if (since)
      break;
  }
  check(req.has_since == (since != nullptr), "has_since disagrees with the query");
  if (since)
    check(req.since == pgbs::text::trim(*since) && !req.since.empty(),
          "since is not the first non-blank parameter, trimmed");
  check(is_trimmed(req.replay) && is_trimmed(req.subscriber) && is_trimmed(req.creds.token),
        "a parameter is not trimmed");
  if (!token_before.empty())
    check(req.creds.token == token_before, "the header token was overridden by ?token=");
  check(!req.has_last_event_id && req.last_event_id.empty(), "fill_sse_request touched Last-Event-ID");
}

void check_bearer(std::string_view authorization) {
  std::string tok = "unchanged", ref;
  const bool ok = bearer_token(authorization, &tok);
  const bool ref_ok = ref_bearer(authorization, &ref);
  check(ok == ref_ok, "bearer_token accepts differently from the reference");
  if (ok)
    check(tok == ref && !tok.empty() && is_trimmed(tok), "bearer_token differs from the reference");
  else
    check(tok == "unchanged", "bearer_token changed the token on failure");
}

void check_origin(std::string_view list, std::string_view origin) {
  const bool ok = origin_allowed(list, origin);
  check(ok == ref_origin_allowed(list, origin), "origin_allowed differs from the reference");
  check(!origin_allowed(list, ""), "an empty origin is allowed");
  if (!origin.empty()) {
    check(origin_allowed("*", origin) && origin_allowed(std::string(list) + ", *", origin),
          "'*' does not allow every origin");
    if (origin.find(',') == std::string_view::npos && is_trimmed(origin)) {
      check(origin_allowed(origin, origin), "an origin is not allowed by itself");
      check(origin_allowed(std::string(list) + "," + std::string(origin), origin),
            "an origin appended to the list is not allowed");
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  g_input = std::string_view(reinterpret_cast<const char *>(data), size);
  if (size == 0)
    return 0;
  const size_t max_streams = data[0] % 40;
  std::string_view rest = g_input.substr(1);
  std::string_view field[4];
  for (auto &f : field) {
    const size_t nul = rest.find('\0');
    f = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  const std::string_view target = field[0], authorization = field[1], cors = field[2], origin = field[3];

  check_decode(target);
  check_trim(target);
  check_trim(authorization);
  check_target(target, max_streams, authorization);
  check_bearer(authorization);
  check_origin(cors, origin);
  check_origin(cors, pgbs::text::trim(origin));
  return 0;
}
