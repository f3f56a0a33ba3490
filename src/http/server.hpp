// The embedded HTTP/SSE listener (libmicrohttpd in external-epoll mode).
// Never calls PostgreSQL: the worker's main thread drives it (run()) from its
// WaitEventSet and takes decisions (open/reject) on pending requests between
// two run() calls. No threads are created here.
#pragma once
#include "core/auth_gate.hpp"
#include "core/no_postgres.hpp"
#include "core/outqueue.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pgbs::http {

// The fields that settings drive have no defaults here:
// settings::http_config() (src/settings/configs.hpp) fills them, from the
// defaults in Settings too.
struct Config {
  std::string listen_addresses; // comma-separated; "*" = all IPv4+IPv6
  int port = 0;
  bool reuse_port = true;        // SO_REUSEPORT so several workers share the port
  int max_connections = 0;       // SSE connections of this worker; beyond: 503 + Retry-After
  // A limit shared with other listeners (the workers of one node): each SSE
  // connection this listener would hold first takes a place (false: 503 +
  // Retry-After) and gives it back when it is gone. Unset: none.
  std::function<bool()> take_place;
  std::function<void()> give_place;
  int heartbeat_interval_s = 0;  // ": heartbeat <epoch>" comment to live SSE connections
  int idle_timeout_s = 0;        // 0 = off; heartbeats do not count as activity
  int max_lifetime_s = 0;        // 0 = off; a stream older than this (less up to 10 % jitter
                                 // so reconnects spread out) ends after its queue is flushed
  int request_timeout_s = 10;    // slowloris: a request must be complete within this
                                 // (a pending SSE request not decided within 3x this gets 503)
  int retry_ms = 2000;           // "retry:" sent in the preamble
  std::string cors_origins;      // comma-separated list, "*" for any; empty = no CORS headers
  // SO_SNDBUF of SSE sockets in bytes (0 = the kernel's autotuning, which lets
  // one socket hold up to net.ipv4.tcp_wmem's maximum, 4 MB by default, for a
  // client that stops reading). Applies to streams opened after a change.
  int socket_send_buffer = 0;
  size_t queue_max_events = 0;
  size_t queue_max_bytes = 0;
  OverflowPolicy overflow_policy{};
  // Routes marked with protect(): when admin_token is set they need it
  // ("Authorization: Bearer" or ?token=, else 401); when admin_loopback_only,
  // they answer only clients on 127.0.0.0/8 or ::1 (else 403).
  std::string admin_token;
  bool admin_loopback_only = false;
  // Connection ids count up from here (+1): distinct bases keep the ids of
  // several workers, and of a restarted one, apart (broadcast's exclude names one).
  uint64_t conn_id_base = 0;
  // Name of the cookie that may carry a stream JWT (empty: cookies are not read).
  std::string token_cookie;
  // Request bounds (beyond: 414 / 431); libmicrohttpd refuses anything that
  // does not fit its per-connection memory either.
  size_t max_url_bytes = 8192;     // request target, query string included
  size_t max_header_bytes = 16384; // all request header lines together
  size_t max_streams_per_request = 32;
  // libmicrohttpd's per-connection memory pool (MHD_OPTION_CONNECTION_MEMORY_LIMIT).
  // A request's head must fit in about 45 % of it (measured with 0.9.75: 4 kB
  // serves a 1.5 kB cookie, 16 kB a 7 kB one, 32 kB a 14 kB one; beyond: 431),
  // and it bounds one coalesced write while MHD still writes a stream. It is
  // freed once the server takes a stream's socket over (docs/ARCHITECTURE.md,
  // "HTTP: direct writes"), so idle streams do not keep it. Fixed at start().
  size_t connection_memory_limit = 0;
  // Sockets the listener may hold in all, from the open-files limit left to
  // it (0 = unknown: derived from max_connections). A part of it is kept for
  // answering what cannot be held (503 + Retry-After) and for plain requests,
  // so a client is never left waiting in the kernel's accept queue. Fixed at
  // start(); max_connections above what it allows is capped by it.
  int max_sockets = 0;
};

// SSE connections a listener with this configuration holds at most.
size_t sse_capacity(const Config &cfg);

// An SSE request waiting for the worker's decision. Its connection is
// suspended until open() or reject() is called for conn_id.
struct Request {
  uint64_t conn_id = 0;
  std::vector<std::string> streams; // from /streams/{name} or ?stream=a&stream=b (URL-decoded)
  bool has_last_event_id = false;   // Last-Event-ID header present and not blank
  std::string last_event_id;
  bool has_since = false; // ?since= or ?last_event_id= present and not blank
  std::string since;
  std::string replay;       // ?replay= ("" if absent)
  bool presence = false;    // ?presence=1: pgbus:presence events
  std::string subscriber;   // ?subscriber=
  // Authorization: Bearer, else ?token=; the Config::token_cookie cookie;
  // the name of /pgbus/streams/{signed-name} or /streams/{signed-name}.
  auth::Credentials creds;
  // The pgbus gem's routes (a signed name): its bytes (one data line, no
  // pgbus:connected unless ?connected=1) and its strict integer cursors.
  bool gem_route = false;
  bool connected = true; // send pgbus:connected (?connected=1/0; off by default on the gem's routes)
  std::string remote_addr;  // "ip:port"
  std::string origin;       // Origin header
};

struct ConnectionInfo {
  uint64_t conn_id;
  std::string remote_addr;
  int64_t connected_at_us;
  size_t queued_events, queued_bytes;
  uint64_t written, overflow_dropped; // frames written to the socket; dropped on overflow
};

struct Conn; // one connection (server_impl.hpp), as a handle

class Server {
public:
  Server();
  ~Server();
  Server(const Server &) = delete;
  Server &operator=(const Server &) = delete;

  // Binds and starts listening. Returns false with *err set on failure.
  bool start(const Config &cfg, std::string *err);
  // Applies tunables (heartbeat, idle timeout, queue bounds, cors, max_connections) without
  // dropping connections.
  void reconfigure(const Config &cfg);

  // The epoll fd to wait on (readable when run() has work), or -1.
  int poll_fd() const;
  // Milliseconds until run() must be called again even without I/O (-1 = no deadline).
  long timeout_ms() const;
  // Accepts, reads, writes, sends heartbeats and enforces timeouts.
  void run();
  // Reads the clock that push() stamps activity with; call once per wake-up,
  // before the frames of that wake-up are pushed.
  void tick();

  // SSE requests that arrived since the last call, at most `max` of them in
  // their order of arrival (the rest wait for a later call); each is
  // suspended until decided.
  std::vector<Request> take_pending(size_t max = SIZE_MAX);
  bool has_pending() const;
  // SSE connections closed since the last call: (conn_id, reason).
  std::vector<std::pair<uint64_t, std::string>> take_closed();

  // Answers a pending request with an error status and a text/plain reason.
  void reject(uint64_t conn_id, int status, const std::string &reason);
  // Answers a pending request whose stream cannot be served just now (a
  // transient database error) with 200 and a stream that carries only
  // "retry: <ms>" and the reason as a comment, then ends: an EventSource
  // comes back after ms, where a 503 would make it give up for good.
  void retry_later(uint64_t conn_id, const std::string &reason);
  OverflowPolicy policy() const;

  // Answers a pending request with 200 text/event-stream; `preamble` is the
  // first bytes of the stream (retry, open comment, pgbus:connected), and
  // the start id what an overflow notice names as the resume cursor before
  // any frame was written. Returns the connection's handle (nullptr when
  // the request is gone); it stays valid, also after the connection
  // closed, until release(). Everything after this goes through the handle.
  Conn *open(uint64_t conn_id, std::string preamble, const std::string &start_id);
  // Queues a frame on an open connection (applies the overflow policy; on
  // overflow the client gets a pgbus:gap-detected control event, on
  // Disconnect the connection is closed); a closed one ignores it.
  OutQueue::PushResult push(Conn *c, OutFrame frame);
  size_t queued_events(const Conn *c) const;
  size_t queued_bytes(const Conn *c) const;
  // Its socket refused part of a write and at least a send buffer's worth
  // (socket_send_buffer, else 64 kB) waits behind it.
  bool backed_up(const Conn *c) const;
  uint64_t written(const Conn *c) const; // data frames written to the socket
  // Closes one connection (reason is reported through take_closed()).
  void close(Conn *c, const std::string &reason);
  void release(Conn *c);

  // Optional handlers for plain GET routes answered synchronously
  // (e.g. "/healthz", "/metrics", "/"); they must not throw or call PostgreSQL.
  using Handler = std::function<int(std::string *body, std::string *content_type)>;
  void set_handler(const std::string &path, Handler h);
  // Puts a handler route behind Config::admin_token / admin_loopback_only.
  void protect(const std::string &path);

  // Clean stop: queues an "event: pgbus:shutdown" frame to every SSE
  // connection, flushes for up to `drain_ms`, then closes everything.
  void shutdown(int drain_ms);

  size_t connection_count() const;
  std::vector<ConnectionInfo> connections() const;
  bool connection(uint64_t conn_id, ConnectionInfo *out) const; // false for unknown ids

  // The port actually bound (useful when Config::port was 0), or -1.
  int port() const;
  // libmicrohttpd diagnostics collected since the last call (bounded; the
  // oldest lines are dropped). Never logged from inside a callback: the caller
  // logs them from its own context.
  std::vector<std::string> take_log();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace pgbs::http
