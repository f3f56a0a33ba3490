// Request-target parsing for the HTTP listener (see request.hpp).
//
// The target is parsed from the raw URI that libmicrohttpd hands to its URI
// log callback, before its own unescaping: that keeps "%2F" in a signed name
// distinct from "/" and lets '+' mean a space only in the query string.
#include "http/request.hpp"

#include "core/auth.hpp"
#include "core/cursor.hpp"
#include "core/text.hpp"

#include <algorithm>

namespace pgbs::http {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z')
      x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z')
      y = static_cast<char>(y - 'A' + 'a');
    if (x != y)
      return false;
  }
  return true;
}

constexpr std::string_view kStreamPrefix = "/streams/";
constexpr std::string_view kSignedPrefix = "/pgbus/streams/";

// The first non-blank value of query parameter `key`, or nullptr.
const std::string *first_value(const Target &t, std::string_view key) {
  for (const auto &kv : t.query)
    if (kv.first == key && !text::trim(kv.second).empty())
      return &kv.second;
  return nullptr;
}

std::string first_value_or_empty(const Target &t, std::string_view key) {
  const std::string *v = first_value(t, key);
  return v ? std::string(text::trim(*v)) : std::string();
}

// Adds one stream name (deduplicated). Returns 0 or an HTTP status.
int add_stream(Request *req, std::string name, size_t max_streams, std::string *reason) {
  if (!cursor::valid_stream_name(name)) {
    *reason = "unknown stream";
    return 404;
  }
  if (std::find(req->streams.begin(), req->streams.end(), name) != req->streams.end())
    return 0;
  if (req->streams.size() >= max_streams) {
    *reason = "too many streams";
    return 400;
  }
  req->streams.push_back(std::move(name));
  return 0;
}

// A cursor on the gem's routes: the gem's strict integer (digits only, up
// to INT64_MAX; no sign, space, point or exponent) or a token this server
// sent. cursor::parse is that strict already; what it never sees here is
// the padding a trim would remove.
bool gem_cursor(const std::string &text) {
  for (char c : text)
    if (c == ' ' || c == '\t')
      return false;
  cursor::Cursor parsed;
  return cursor::parse(text, &parsed, nullptr);
}

} // namespace

bool percent_decode(std::string_view in, bool form, std::string *out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size())
        return false;
      const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0)
        return false;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && form) {
      c = ' ';
    }
    if (c == '\0')
      return false;
    out->push_back(c);
  }
  return true;
}

bool parse_target(std::string_view raw, Target *out, std::string *err) {
  out->query.clear();
  const size_t hash = raw.find('#'); // never sent by browsers; ignore it if present
  if (hash != std::string_view::npos)
    raw = raw.substr(0, hash);
  const size_t q = raw.find('?');
  out->path = raw.substr(0, q);
  if (out->path.empty() || out->path.front() != '/') {
    *err = "bad request target";
    return false;
  }
  if (q == std::string_view::npos)
    return true;
  std::string_view rest = raw.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (item.empty())
      continue;
    const size_t eq = item.find('=');
    std::string key, value;
    if (!percent_decode(item.substr(0, eq), true, &key) ||
        (eq != std::string_view::npos && !percent_decode(item.substr(eq + 1), true, &value))) {
      *err = "bad percent-encoding in query string";
      return false;
    }
    out->query.emplace_back(std::move(key), std::move(value));
  }
  return true;
}

Route classify(std::string_view path) {
  if (path == "/streams")
    return Route::Streams;
  if (path.size() > kStreamPrefix.size() && path.substr(0, kStreamPrefix.size()) == kStreamPrefix)
    return Route::Stream;
  if (path.size() > kSignedPrefix.size() && path.substr(0, kSignedPrefix.size()) == kSignedPrefix)
    return Route::Signed;
  return Route::NotFound;
}

int fill_sse_request(Route route, const Target &t, size_t max_streams, Request *req,
                     std::string *reason) {
  switch (route) {
  case Route::Stream: {
    const std::string_view raw = t.path.substr(kStreamPrefix.size());
    std::string name;
    if (percent_decode(raw, false, &name) && auth::looks_signed(name)) {
      req->creds.signed_name = std::move(name);
      req->gem_route = true;
      break;
    }
    if (raw.find('/') != std::string_view::npos || !percent_decode(raw, false, &name)) {
      *reason = "unknown stream";
      return 404;
    }
    if (int st = add_stream(req, std::move(name), max_streams, reason))
      return st;
    break;
  }
  case Route::Streams:
    for (const auto &kv : t.query) {
      if (kv.first != "stream" || text::trim(kv.second).empty())
        continue;
      if (int st = add_stream(req, std::string(text::trim(kv.second)), max_streams, reason))
        return st;
    }
    if (req->streams.empty()) {
      *reason = "no stream given (use ?stream=name)";
      return 400;
    }
    break;
  case Route::Signed: {
    std::string name;
    if (!percent_decode(t.path.substr(kSignedPrefix.size()), false, &name) ||
        text::trim(name).empty()) {
      *reason = "bad signed stream name";
      return 400;
    }
    req->creds.signed_name = std::move(name);
    req->gem_route = true;
    break;
  }
  case Route::NotFound:
    *reason = "not found";
    return 404;
  }

  const std::string *since = first_value(t, "since");
  if (!since)
    since = first_value(t, "last_event_id");
  if (since) {
    req->has_since = true;
    // The gem's routes take the value as it came: "?since=+10" is " 10" there, a 400.
    req->since = req->gem_route ? *since : std::string(text::trim(*since));
  }
  if (req->gem_route) {
    for (const std::string *c : {req->has_last_event_id ? &req->last_event_id : nullptr,
                                 req->has_since ? &req->since : nullptr})
      if (c && !gem_cursor(*c)) {
        *reason = "invalid cursor: not an integer from 0 to 9223372036854775807 (nor a cursor "
                  "this server sent)";
        return 400;
      }
  }
  const std::string connected = first_value_or_empty(t, "connected");
  if (connected != "" && connected != "0" && connected != "1") {
    *reason = "invalid connected: use 1 or 0";
    return 400;
  }
  req->connected = connected.empty() ? !req->gem_route : connected == "1";
  req->replay = first_value_or_empty(t, "replay");
  req->subscriber = first_value_or_empty(t, "subscriber");
  const std::string presence = first_value_or_empty(t, "presence");
  if (presence != "" && presence != "0" && presence != "1") {
    *reason = "invalid presence: use 1 or 0";
    return 400;
  }
  req->presence = presence == "1";
  if (req->creds.token.empty())
    req->creds.token = first_value_or_empty(t, "token");
  return 0;
}

bool cookie_value(std::string_view header, std::string_view name, std::string *value) {
  if (name.empty())
    return false;
  while (!header.empty()) {
    const size_t semi = header.find(';');
    const std::string_view item = text::trim(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || text::trim(item.substr(0, eq)) != name)
      continue;
    std::string_view v = text::trim(item.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"')
      v = v.substr(1, v.size() - 2);
    if (v.empty())
      return false;
    *value = std::string(v);
    return true;
  }
  return false;
}

bool bearer_token(std::string_view authorization, std::string *token) {
  std::string_view v = text::trim(authorization);
  constexpr std::string_view kScheme = "bearer";
  if (v.size() <= kScheme.size() || !iequals(v.substr(0, kScheme.size()), kScheme) ||
      (v[kScheme.size()] != ' ' && v[kScheme.size()] != '\t'))
    return false;
  v = text::trim(v.substr(kScheme.size()));
  if (v.empty())
    return false;
  *token = std::string(v);
  return true;
}

namespace {

bool origin_in(std::string_view cors_origins, std::string_view origin, bool star) {
  if (origin.empty())
    return false;
  std::string_view rest = cors_origins;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = text::trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if ((star && item == "*") || item == origin)
      return true;
  }
  return false;
}

} // namespace

bool origin_allowed(std::string_view cors_origins, std::string_view origin) {
  return origin_in(cors_origins, origin, true);
}

bool origin_listed(std::string_view cors_origins, std::string_view origin) {
  return origin_in(cors_origins, origin, false);
}

bool is_loopback(std::string_view addr) {
  return addr.compare(0, 4, "127.") == 0 || addr.compare(0, 5, "[::1]") == 0 ||
         addr.compare(0, 12, "[::ffff:127.") == 0;
}

} // namespace pgbs::http
