// Internals of http::Server shared by server.cpp (lifecycle, public API,
// timers) and callbacks.cpp (everything libmicrohttpd calls). Not part of the
// public interface.
//
// Object lifetimes:
//  - Sock: one TCP connection, created/freed by MHD_OPTION_NOTIFY_CONNECTION.
//    Tracks the slowloris deadline (a request must be complete within
//    request_timeout_s of the connection start or of the previous response).
//  - Conn: one HTTP request, created by the URI log callback (called once per
//    request, before headers are parsed) and freed when MHD reports the
//    request completed (or, as a fallback, when its socket closes). An SSE
//    request becomes an entry of Impl::conns from the moment it is pending
//    until it completes; that entry is what take_closed() reports. A stream
//    whose socket the server took over (Conn::owned) is ended by the server
//    itself and freed once MHD has also let go of it.
#pragma once
#include "core/no_postgres.hpp"
#include "http/request.hpp"
#include "http/server.hpp"

#include <microhttpd.h>

#include <cstdarg>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace pgbs::http {

int64_t mono_ms(); // CLOCK_MONOTONIC in milliseconds
int64_t wall_us(); // CLOCK_REALTIME in microseconds
// Ends a TCP connection now (RST, every further read EOF); the fd stays open.
void kill_socket(int fd);

constexpr uint64_t kConnTag = 1ull << 63; // outer epoll data: SSE socket vs daemon index

struct Conn;

struct Sock {
  int fd = -1;
  Conn *current = nullptr; // the request being served on this socket, if any
  bool waiting = false;    // on Impl::waiting (a request is due)
  int64_t wait_since_ms = 0;
  std::list<Sock *>::iterator wait_it;
};

enum class Kind { None, Sse, Handler, Preflight };

enum class Phase {
  Request,   // being routed
  Pending,   // SSE, suspended, waiting for open() / reject()
  Rejecting, // reject() called; answered when MHD calls the handler again
  Opening,   // open() called; 200 queued when MHD calls the handler again
  Open,      // streaming
};

struct Conn {
  Conn(uint64_t id_, const Config &cfg)
      : id(id_), queue(cfg.queue_max_events, cfg.queue_max_bytes, cfg.overflow_policy) {}

  uint64_t id;
  void *owner = nullptr; // the Server::Impl (the content reader's only way back)
  MHD_Connection *mhd = nullptr;
  Sock *sock = nullptr;
  int fd = -1;
  std::string raw_uri;
  bool uri_too_long = false;
  int calls = 0; // access handler calls so far
  bool http10 = false;
  Kind kind = Kind::None;
  std::string handler_path;
  Phase phase = Phase::Request;
  bool registered = false; // in Impl::conns (an SSE connection)
  bool placed = false;     // holds a place of Config::take_place
  bool handed_out = false; // returned by take_pending(): its end is reported
  bool suspended = false;  // as far as we asked MHD (resume clears it at once)
  bool watched = false;    // fd in the outer epoll set (EPOLLRDHUP)
  std::unique_ptr<Request> req = std::make_unique<Request>(); // freed once handed out
  std::string origin, remote_addr;

  int reject_status = 0;
  std::string reject_body;
  bool retry_stream = false; // answered 200 with a stream that ends with retry: (retry_later)

  OutQueue queue;
  int64_t connected_at_us = 0;
  int64_t last_activity_ms = 0;       // open() or the last push(); heartbeats do not count
  int64_t opened_ms = 0;              // open(), monotonic
  int64_t end_of_life_ms = INT64_MAX; // max_lifetime deadline, from open()
  uint64_t data_queued = 0;           // data events that entered the queue
  uint64_t evicted = 0;               // data frames evicted by drop_oldest
  uint64_t copied = 0;                // data frames fully handed to MHD
  uint64_t delivered = 0;             // data frames MHD has written to the socket
  bool gap_queued = false;            // a gap notice is in the queue, not yet written
  uint64_t gap_unreported = 0;        // drops since that notice was queued
  std::string gap_resume;             // id before the first drop the next notice reports
  bool gap_resume_set = false;

  // Direct writes (docs/ARCHITECTURE.md, "HTTP: direct writes"): once its head and first frames
  // went out through MHD and its queue ran empty, a stream stays suspended in MHD and the server
  // writes its chunks to the socket itself, one send per connection per round; MHD gets it back
  // only to end it.
  bool direct = false;
  bool dirty = false;    // on Impl::dirty: frames queued since the last flush
  bool want_out = false; // EPOLLOUT armed: the socket took only part of a write
  std::string unsent;    // the part it did not take
  // Taken over: MHD has handed the socket back (adopt()) and freed its
  // per-connection memory; the server writes and ends the stream alone.
  bool owned = false;
  bool adopting = false;    // on Impl::adopt
  bool mhd_attached = true; // MHD still refers to it (until finish())
  bool end_sent = false;    // owned and ending: the last chunk is written

  bool held = false;     // its handle is out (open() with a start id): freed by release()
  bool finished = false; // MHD is done with it; only the handle keeps it
  bool ending = false;   // graceful end: END_OF_STREAM once the queue is flushed
  bool kill = false;     // abort: END_WITH_ERROR at the next reader call
  std::string close_reason;
  int64_t end_deadline_ms = 0;
};

struct Server::Impl {
  Config cfg;
  bool running = false;
  bool stopping = false; // shutdown() in progress: no new SSE connections
  int bound_port = -1;
  int epfd = -1; // outer epoll: MHD's epoll fds + watched SSE sockets
  std::vector<MHD_Daemon *> daemons;
  std::vector<int> listen_fds; // -1 once handed back to MHD_stop_daemon
  uint64_t next_id = 0;

  std::unordered_map<uint64_t, Conn *> conns;         // SSE connections, pending to open
  size_t open_count = 0;                              // those in Phase::Open
  std::vector<uint64_t> pending;                      // not yet taken
  std::deque<std::pair<int64_t, uint64_t>> decide_by; // (deadline, id), in arrival order
  std::vector<std::pair<uint64_t, std::string>> closed;
  std::map<std::string, Handler> handlers;
  std::set<std::string> protected_paths;
  std::list<Sock *> waiting; // sockets owing a request, oldest first
  std::vector<uint64_t> ending;
  std::vector<uint64_t> dirty; // direct streams with frames to write
  std::vector<char> scratch;   // one chunk being written (direct streams)
  std::deque<std::string> log;
  std::set<Conn *> finished;   // held connections MHD is done with, until release()
  std::vector<uint64_t> adopt; // streams whose sockets are to be taken over
  std::vector<uint64_t> reap;  // owned streams to close (outside any iteration)
  int detach_logs = 0;         // MHD log lines expected from adoptions, not kept

  bool need_run = false;    // a resume happened outside MHD_run
  bool daemon_ready = true; // an MHD epoll set reported events since the last MHD_run
  int64_t next_heartbeat_ms = 0;
  int64_t clock_ms = 0;               // see Server::tick()
  int64_t next_expiry_ms = INT64_MAX; // next idle_timeout / max_lifetime check

  ~Impl();

  // server.cpp
  bool start(const Config &c, std::string *err);
  void run();
  long timeout_ms() const;
  void timers(int64_t now);
  void heartbeats(int64_t now);
  void drain_epoll();
  void mhd_run_all();
  bool mhd_due() const;
  void shutdown(int drain_ms);
  void stop_daemons();
  void wake(Conn *c);
  void notify(Conn *c);
  void suspend(Conn *c);
  size_t fill(Conn *c, char *buf, size_t max);
  void enter_direct(Conn *c);
  void leave_direct(Conn *c);
  void flush(Conn *c);
  void adopt_all();
  void reap_all();
  void close_owned(Conn *c);
  void dispose(Conn *c);
  void flush_dirty();
  void set_out(Conn *c, bool on);
  void watch(Conn *c);
  void unwatch(Conn *c);
  void end_gracefully(Conn *c, const std::string &reason);
  void expiry_check(int64_t now);
  int64_t end_of_life(const Conn *c, int64_t opened_ms) const;
  void abort_conn(Conn *c, const std::string &reason);
  void queue_control(Conn *c, std::string text);
  void note_gap(Conn *c, uint64_t dropped);
  void wait_for_request(Sock *s, int64_t now);
  void request_arrived(Sock *s);
  void add_log(std::string line);

  // callbacks.cpp
  void *on_uri(const char *uri, MHD_Connection *mc);
  MHD_Result on_access(MHD_Connection *mc, const char *method, size_t *upload_size, void **cls);
  MHD_Result first_call(Conn *c, MHD_Connection *mc, const char *method);
  MHD_Result final_call(Conn *c, MHD_Connection *mc);
  MHD_Result answer(Conn *c, MHD_Connection *mc, unsigned status, const std::string &body,
                    const char *content_type,
                    const std::vector<std::pair<const char *, std::string>> &extra);
  MHD_Result open_stream(Conn *c, MHD_Connection *mc);
  MHD_Result answer_retry(Conn *c, MHD_Connection *mc);
  ssize_t on_read(Conn *c, char *buf, size_t max);
  void on_completed(MHD_Connection *mc, void **cls, MHD_RequestTerminationCode toe);
  void on_connection(MHD_Connection *mc, void **socket_cls, MHD_ConnectionNotificationCode code);
  void finish(Conn *c, MHD_RequestTerminationCode toe);
  void give_place(Conn *c);

  // Trampolines handed to libmicrohttpd; each catches every exception.
  static void *uri_cb(void *cls, const char *uri, MHD_Connection *mc);
  static MHD_Result access_cb(void *cls, MHD_Connection *mc, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_size,
                              void **con_cls);
  static ssize_t reader_cb(void *cls, uint64_t pos, char *buf, size_t max);
  static void completed_cb(void *cls, MHD_Connection *mc, void **con_cls,
                           MHD_RequestTerminationCode toe);
  static void connection_cb(void *cls, MHD_Connection *mc, void **socket_cls,
                            MHD_ConnectionNotificationCode code);
  static void log_cb(void *cls, const char *fmt, va_list ap);
};

} // namespace pgbs::http
