// Everything libmicrohttpd calls: routing, responses, the SSE content reader
// and the connection/request lifecycle notifications.
//
// Rules kept here: no exception leaves a callback (each trampoline catches
// everything; the connection is then closed), no callback blocks, and a
// connection is only suspended from its own access handler or content reader
// (the only places MHD documents as safe).
//
// Response timing matters for keep-alive: a response queued in the handler's
// first call (headers just parsed) makes MHD discard the rest of the request
// and close the connection after it ("Connection: close"). Errors found at
// that point are answered at once on purpose; SSE streams, handler routes and
// preflights are answered in the final call so the connection stays reusable
// and the SSE headers are exactly the ones set below.
#include "server_impl.hpp"

#include "core/auth.hpp"
#include "core/sse.hpp"
#include "core/text.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

namespace pgbs::http {
namespace {

// The content reader's buffer size. MHD (0.9.75) allocates it with every
// callback response, i.e. per SSE connection, but only uses it for HTTP/1.0
// clients (close-delimited body: it is then the size of one socket write).
// HTTP/1.1 streams are chunked and MHD hands the reader its per-connection
// pool buffer instead, whose size is set by connection_memory_limit.
constexpr size_t kBlockSizeHttp10 = 16 * 1024;
constexpr size_t kBlockSizeChunked = 64; // allocated per connection, unused for chunked bodies
constexpr const char *kTextPlain = "text/plain; charset=utf-8";

std::string format_addr(const sockaddr *sa) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (!sa)
    return "?";
  if (sa->sa_family == AF_INET) {
    auto *v4 = reinterpret_cast<const sockaddr_in *>(sa);
    inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto *v6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof(ip));
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return "?";
}

std::string header(MHD_Connection *mc, const char *name) {
  const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, name);
  return v ? std::string(text::trim(v)) : std::string();
}

std::string retry_after(const Config &cfg) {
  return std::to_string(cfg.retry_ms > 1000 ? (cfg.retry_ms + 999) / 1000 : 1);
}

const char *close_reason_for(MHD_RequestTerminationCode toe) {
  switch (toe) {
  case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
    return "shutdown";
  case MHD_REQUEST_TERMINATED_COMPLETED_OK:
  case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
    return "server";
  default: // write or read failure, client abort
    return "client";
  }
}

} // namespace

// ---- trampolines -----------------------------------------------------------

void *Server::Impl::uri_cb(void *cls, const char *uri, MHD_Connection *mc) {
  try {
    return static_cast<Impl *>(cls)->on_uri(uri, mc);
  } catch (...) {
    return nullptr; // the access handler then refuses the request
  }
}

MHD_Result Server::Impl::access_cb(void *cls, MHD_Connection *mc, const char *, const char *method,
                                   const char *version, const char *, size_t *upload_size,
                                   void **con_cls) {
  try {
    Conn *c = static_cast<Conn *>(*con_cls);
    if (c && c->calls == 0)
      c->http10 = version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    return static_cast<Impl *>(cls)->on_access(mc, method, upload_size, con_cls);
  } catch (...) {
    return MHD_NO; // MHD closes the connection
  }
}

ssize_t Server::Impl::reader_cb(void *cls, uint64_t, char *buf, size_t max) {
  Conn *c = static_cast<Conn *>(cls);
  try {
    return static_cast<Impl *>(c->owner)->on_read(c, buf, max);
  } catch (...) {
    if (c->close_reason.empty())
      c->close_reason = "server";
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
}

void Server::Impl::completed_cb(void *cls, MHD_Connection *mc, void **con_cls,
                                MHD_RequestTerminationCode toe) {
  try {
    static_cast<Impl *>(cls)->on_completed(mc, con_cls, toe);
  } catch (...) {
  }
}

void Server::Impl::connection_cb(void *cls, MHD_Connection *mc, void **socket_cls,
                                 MHD_ConnectionNotificationCode code) {
  try {
    static_cast<Impl *>(cls)->on_connection(mc, socket_cls, code);
  } catch (...) {
  }
}

void Server::Impl::log_cb(void *cls, const char *fmt, va_list ap) {
  try {
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    Impl *m = static_cast<Impl *>(cls);
    if (m->detach_logs > 0 && strstr(line, "application error") != nullptr) {
      --m->detach_logs; // an adoption's hand-over, not an error (direct.cpp)
      return;
    }
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
      s.pop_back();
    static_cast<Impl *>(cls)->add_log(std::move(s));
  } catch (...) {
  }
}

// ---- request lifecycle -----------------------------------------------------

void *Server::Impl::on_uri(const char *uri, MHD_Connection *mc) {
  auto *c = new Conn(++next_id, cfg);
  c->owner = this;
  c->mhd = mc;
  const size_t n = strnlen(uri, cfg.max_url_bytes + 1);
  if (n > cfg.max_url_bytes)
    c->uri_too_long = true;
  else
    c->raw_uri.assign(uri, n);
  const MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (ci && ci->socket_context) {
    c->sock = static_cast<Sock *>(ci->socket_context);
    c->sock->current = c;
  }
  return c;
}

MHD_Result Server::Impl::on_access(MHD_Connection *mc, const char *method, size_t *upload_size,
                                   void **cls) {
  Conn *c = static_cast<Conn *>(*cls);
  if (!c)
    return MHD_NO;
  if (*upload_size != 0) {
    *upload_size = 0; // a body is refused in the first call; never buffered
    return MHD_YES;
  }
  c->mhd = mc;
  if (++c->calls == 1)
    return first_call(c, mc, method);
  if (c->kill)
    return MHD_NO; // aborted while suspended (client gone, shutdown): just close
  switch (c->phase) {
  case Phase::Request:
    return final_call(c, mc);
  case Phase::Rejecting: {
    if (c->retry_stream)
      return answer_retry(c, mc);
    std::vector<std::pair<const char *, std::string>> extra;
    if (c->reject_status == 503)
      extra.emplace_back("Retry-After", retry_after(cfg));
    if (c->reject_status == 401)
      extra.emplace_back("WWW-Authenticate", "Bearer");
    return answer(c, mc, static_cast<unsigned>(c->reject_status), c->reject_body, kTextPlain,
                  extra);
  }
  case Phase::Opening:
    return open_stream(c, mc);
  case Phase::Pending: // resumed without a decision: the client went away
  case Phase::Open:
    break;
  }
  return MHD_NO;
}

MHD_Result Server::Impl::first_call(Conn *c, MHD_Connection *mc, const char *method) {
  if (c->sock)
    request_arrived(c->sock);
  if (const MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD))
    c->fd = ci->connect_fd;
  if (const MHD_ConnectionInfo *ci =
          MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS))
    c->remote_addr = format_addr(ci->client_addr);
  c->origin = header(mc, "Origin");

  if (c->uri_too_long)
    return answer(c, mc, 414, "request target too long\n", kTextPlain, {});
  if (const MHD_ConnectionInfo *ci =
          MHD_get_connection_info(mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE)) {
    if (ci->header_size > c->raw_uri.size() + cfg.max_header_bytes)
      return answer(c, mc, 431, "request headers too large\n", kTextPlain, {});
  }
  // RFC 9112 3.2: an HTTP/1.1 request without a Host header is answered 400.
  if (!c->http10 && !MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))
    return answer(c, mc, 400, "missing Host header\n", kTextPlain, {});

  Target t;
  std::string reason;
  if (!parse_target(c->raw_uri, &t, &reason))
    return answer(c, mc, 400, reason + "\n", kTextPlain, {});
  const Route route = classify(t.path);
  const bool is_handler = handlers.count(std::string(t.path)) > 0;
  if (route == Route::NotFound && !is_handler)
    return answer(c, mc, 404, "not found\n", kTextPlain, {});
  if (strcmp(method, "OPTIONS") == 0) {
    c->kind = Kind::Preflight;
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0)
    return answer(c, mc, 405, "method not allowed\n", kTextPlain, {{"Allow", "GET, OPTIONS"}});
  // A GET with a body is malformed (checked after the method, so POST gets 405).
  const char *clen = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
  if ((clen && std::string(text::trim(clen)) != "0") ||
      MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Transfer-Encoding"))
    return answer(c, mc, 400, "request body not allowed\n", kTextPlain, {});
  if (is_handler) {
    if (protected_paths.count(std::string(t.path))) {
      if (cfg.admin_loopback_only && !is_loopback(c->remote_addr))
        return answer(c, mc, 403, "only from loopback\n", kTextPlain, {});
      if (!cfg.admin_token.empty()) {
        std::string token;
        bearer_token(header(mc, "Authorization"), &token);
        for (const auto &[k, v] : t.query)
          if (k == "token" && token.empty())
            token = v;
        if (!auth::constant_time_equal(token, cfg.admin_token))
          return answer(c, mc, 401, "token required\n", kTextPlain,
                        {{"WWW-Authenticate", "Bearer"}});
      }
    }
    c->kind = Kind::Handler;
    c->handler_path = std::string(t.path);
    return MHD_YES;
  }

  // A browser page from an origin that is not allowed could not read the
  // stream anyway; refuse it before it holds a connection.
  if (!cfg.cors_origins.empty() && !c->origin.empty() &&
      !origin_allowed(cfg.cors_origins, c->origin))
    return answer(c, mc, 403, "origin not allowed\n", kTextPlain, {});

  Request &r = *c->req;
  r.origin = c->origin;
  r.remote_addr = c->remote_addr;
  r.last_event_id = header(mc, "Last-Event-ID");
  r.has_last_event_id = !r.last_event_id.empty();
  bearer_token(header(mc, "Authorization"), &r.creds.token);
  if (!cfg.token_cookie.empty())
    cookie_value(header(mc, "Cookie"), cfg.token_cookie, &r.creds.cookie_token);
  if (int status = fill_sse_request(route, t, cfg.max_streams_per_request, &r, &reason))
    return answer(c, mc, static_cast<unsigned>(status), reason + "\n", kTextPlain, {});
  if (stopping)
    return answer(c, mc, 503, "server shutting down\n", kTextPlain,
                  {{"Retry-After", retry_after(cfg)}});
  // The answer closes the connection: a held keep-alive would keep the socket
  // that the next client needs.
  if (conns.size() >= sse_capacity(cfg))
    return answer(c, mc, 503, "too many connections\n", kTextPlain,
                  {{"Retry-After", retry_after(cfg)}, {"Connection", "close"}});
  c->kind = Kind::Sse;
  return MHD_YES;
}

MHD_Result Server::Impl::final_call(Conn *c, MHD_Connection *mc) {
  switch (c->kind) {
  case Kind::Preflight:
    if (!origin_allowed(cfg.cors_origins, c->origin))
      return answer(c, mc, 403, "origin not allowed\n", kTextPlain, {});
    return answer(c, mc, 204, "", nullptr,
                  {{"Access-Control-Allow-Methods", "GET, OPTIONS"},
                   {"Access-Control-Allow-Headers", "Authorization, Last-Event-ID, Cache-Control"},
                   {"Access-Control-Max-Age", "600"}});
  case Kind::Handler: {
    std::string body, content_type = kTextPlain;
    int status = 500;
    auto it = handlers.find(c->handler_path);
    try {
      if (it != handlers.end())
        status = it->second(&body, &content_type);
    } catch (...) {
      status = 500;
    }
    if (status < 200 || status > 599) {
      status = 500;
      body = "internal error\n";
    }
    return answer(c, mc, static_cast<unsigned>(status), body, content_type.c_str(), {});
  }
  case Kind::Sse:
    if (cfg.take_place) { // the node's limit: checked by every worker alike
      if (!cfg.take_place())
        return answer(c, mc, 503, "too many connections\n", kTextPlain,
                      {{"Retry-After", retry_after(cfg)}, {"Connection", "close"}});
      c->placed = true;
    }
    c->phase = Phase::Pending;
    c->registered = true;
    c->req->conn_id = c->id;
    c->connected_at_us = wall_us();
    if (cfg.socket_send_buffer > 0 &&
        c->fd >= 0) // bounds what the kernel holds for a stalled client
      (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &cfg.socket_send_buffer,
                       sizeof cfg.socket_send_buffer);
    conns.emplace(c->id, c);
    pending.push_back(c->id);
    // A request the caller never decides is answered 503 (see Config::request_timeout_s),
    // so that a bug upstream cannot pin connections and their memory forever.
    decide_by.emplace_back(mono_ms() + 3 * int64_t{1000} * std::max(cfg.request_timeout_s, 1),
                           c->id);
    suspend(c);
    watch(c);
    return MHD_YES;
  case Kind::None:
    break;
  }
  return MHD_NO;
}

MHD_Result Server::Impl::answer(Conn *c, MHD_Connection *mc, unsigned status,
                                const std::string &body, const char *content_type,
                                const std::vector<std::pair<const char *, std::string>> &extra) {
  MHD_Response *r = MHD_create_response_from_buffer(body.size(), const_cast<char *>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  bool ok = true;
  if (content_type && !body.empty())
    ok &= MHD_add_response_header(r, "Content-Type", content_type) == MHD_YES;
  for (const auto &[name, value] : extra)
    ok &= MHD_add_response_header(r, name, value.c_str()) == MHD_YES;
  if (origin_allowed(cfg.cors_origins, c->origin)) {
    ok &= MHD_add_response_header(r, "Access-Control-Allow-Origin", c->origin.c_str()) == MHD_YES;
    ok &= MHD_add_response_header(r, "Vary", "Origin") == MHD_YES;
    if (origin_listed(cfg.cors_origins, c->origin))
      ok &= MHD_add_response_header(r, "Access-Control-Allow-Credentials", "true") == MHD_YES;
  }
  const MHD_Result ret = ok ? MHD_queue_response(mc, status, r) : MHD_NO;
  MHD_destroy_response(r);
  return ret;
}

// A stream that cannot be served just now (Server::retry_later): 200, then
// only "retry:" and the reason, and the end. The wait is 250-750 ms, spread
// by the connection's id so that clients turned away together do not come
// back together, and short: the first read that succeeds serves them.
MHD_Result Server::Impl::answer_retry(Conn *c, MHD_Connection *mc) {
  uint64_t x = (c->id + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  std::string body;
  sse::append_retry(body, 250 + static_cast<long>(x % 501));
  std::string reason = c->reject_body;
  while (!reason.empty() && reason.back() == '\n')
    reason.pop_back();
  sse::append_comment(body, reason);
  return answer(c, mc, 200, body, "text/event-stream",
                {{"Cache-Control", "no-cache, no-transform"}});
}

MHD_Result Server::Impl::open_stream(Conn *c, MHD_Connection *mc) {
  MHD_Response *r = MHD_create_response_from_callback(
      MHD_SIZE_UNKNOWN, c->http10 ? kBlockSizeHttp10 : kBlockSizeChunked, &reader_cb, c, nullptr);
  if (!r)
    return MHD_NO;
  bool ok = MHD_add_response_header(r, "content-type", "text/event-stream") == MHD_YES &&
            MHD_add_response_header(r, "cache-control", "no-cache, no-transform") == MHD_YES &&
            MHD_add_response_header(r, "x-accel-buffering", "no") == MHD_YES;
  if (ok && origin_allowed(cfg.cors_origins, c->origin))
    ok = MHD_add_response_header(r, "Access-Control-Allow-Origin", c->origin.c_str()) == MHD_YES &&
         MHD_add_response_header(r, "Vary", "Origin") == MHD_YES &&
         (!origin_listed(cfg.cors_origins, c->origin) ||
          MHD_add_response_header(r, "Access-Control-Allow-Credentials", "true") == MHD_YES);
  const MHD_Result ret = ok ? MHD_queue_response(mc, 200, r) : MHD_NO;
  MHD_destroy_response(r);
  if (ret != MHD_YES)
    return MHD_NO;
  // request_timeout_s guards requests, not streams: a quiet stream is legitimate.
  MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  c->phase = Phase::Open;
  ++open_count;
  return MHD_YES;
}

// Copies as many queued frames as fit into MHD's buffer: one socket write per
// wake-up carries every frame queued since the last one (docs/ARCHITECTURE.md, "HTTP: direct
// writes"). An empty queue suspends the connection (push() resumes it); returning 0 without
// suspending would make MHD poll the reader in a busy loop.
ssize_t Server::Impl::on_read(Conn *c, char *buf, size_t max) {
  if (c->owned) // taken over (direct.cpp): MHD only has to let go of its side
    return MHD_CONTENT_READER_END_WITH_ERROR;
  c->delivered = c->copied; // MHD asks for more only once the last chunk went out
  if (c->kill)
    return MHD_CONTENT_READER_END_WITH_ERROR;
  const size_t n = fill(c, buf, max);
  if (n > 0)
    return static_cast<ssize_t>(n);
  if (c->ending)
    return MHD_CONTENT_READER_END_OF_STREAM;
  // Everything MHD had for this socket is sent: from here on the server
  // writes the stream itself until it ends.
  suspend(c);
  enter_direct(c);
  return 0;
}

// Copies queued frames into buf (up to max bytes), queueing a gap notice when
// the queue runs empty with drops unreported; updates the copied count.
size_t Server::Impl::fill(Conn *c, char *buf, size_t max) {
  size_t n = c->queue.read_into(buf, max);
  if (c->queue.empty()) {
    c->gap_queued = false; // the notice went out with this chunk
    if (c->gap_unreported > 0) {
      const uint64_t dropped = c->gap_unreported;
      c->gap_unreported = 0;
      note_gap(c, dropped);
      n += c->queue.read_into(buf + n, max - n);
      if (c->queue.empty())
        c->gap_queued = false;
    }
  }
  c->copied = c->data_queued - c->evicted - c->queue.events();
  return n;
}

void Server::Impl::on_completed(MHD_Connection *, void **cls, MHD_RequestTerminationCode toe) {
  Conn *c = static_cast<Conn *>(*cls);
  *cls = nullptr;
  if (c)
    finish(c, toe);
}

// Gives back the connection's place of the node's limit (Config::take_place),
// once, wherever it leaves conns.
void Server::Impl::give_place(Conn *c) {
  if (c->placed && cfg.give_place) {
    c->placed = false;
    cfg.give_place();
  }
}

// Forgets a request; an SSE connection's end is reported once, with the reason
// set when the server ended it or the one derived from MHD's code.
void Server::Impl::finish(Conn *c, MHD_RequestTerminationCode toe) {
  if (c->owned) { // the server ends it (direct.cpp); MHD is done with it
    c->mhd_attached = false;
    c->mhd = nullptr;
    if (c->finished && !c->held)
      delete c;
    return;
  }
  const bool stream_done = c->registered && c->phase == Phase::Open;
  if (c->sock) {
    c->sock->current = nullptr;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && !stream_done)
      wait_for_request(c->sock, mono_ms()); // keep-alive: the next request is due
  }
  give_place(c);
  if (c->registered) {
    unwatch(c);
    conns.erase(c->id);
    if (c->phase == Phase::Open)
      --open_count;
    if (c->handed_out)
      closed.emplace_back(c->id, c->close_reason.empty() ? close_reason_for(toe) : c->close_reason);
    // A stream ended by the server (final chunk sent) also ends its TCP
    // connection: MHD would otherwise keep it for another request, with the
    // timeout that open_stream() switched off.
    if (stream_done && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && c->fd >= 0)
      ::shutdown(c->fd, SHUT_RDWR);
  }
  if (c->held) { // the engine still holds the handle: freed by release()
    c->finished = true;
    c->sock = nullptr;
    c->mhd = nullptr;
    c->fd = -1;
    finished.insert(c);
    return;
  }
  delete c;
}

void Server::Impl::on_connection(MHD_Connection *mc, void **socket_cls,
                                 MHD_ConnectionNotificationCode code) {
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    auto *s = new Sock;
    if (const MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD))
      s->fd = ci->connect_fd;
    *socket_cls = s;
    wait_for_request(s, mono_ms());
    return;
  }
  Sock *s = static_cast<Sock *>(*socket_cls);
  *socket_cls = nullptr;
  if (!s)
    return;
  if (s->current) // not reported as completed: never leak it
    finish(s->current, MHD_REQUEST_TERMINATED_CLIENT_ABORT);
  request_arrived(s);
  delete s;
}

} // namespace pgbs::http
