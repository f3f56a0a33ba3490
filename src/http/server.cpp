// The HTTP/SSE listener: libmicrohttpd in external-epoll mode, no threads.
//
// The caller waits on poll_fd(), an epoll set of our own that holds each MHD
// daemon's epoll fd (one daemon per listening socket) and, with EPOLLRDHUP,
// the socket of every SSE connection. MHD does not watch a suspended
// connection, so without that second part a client that closes an idle
// stream would only be noticed when a heartbeat write fails (two heartbeats
// later: the first write after the peer's close only earns an RST).
//
// Request/response flow: see callbacks.cpp. Timers (heartbeats, idle
// timeout, slowloris deadlines, graceful-close deadlines) run in run(), and
// timeout_ms() folds their next deadline into MHD_get_timeout().
#include "server_impl.hpp"

#include "core/sse.hpp"
#include "core/wire.hpp"
#include "http/listen.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pgbs::http {
namespace {

constexpr int64_t kGracefulCloseMs = 5000; // a stream being ended gets this long to flush
constexpr size_t kMaxLogLines = 100;

} // namespace

// Ends a TCP connection now, whatever MHD is doing with it: the fd stays
// valid (MHD still owns and closes it) but every further read sees EOF and
// write fails, and the close sends RST instead of waiting on a peer that does
// not read. MHD notices through its epoll set (EPOLLHUP).
void kill_socket(int fd) {
  if (fd < 0)
    return;
  const linger lg{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  ::shutdown(fd, SHUT_RDWR);
}

int64_t mono_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int64_t wall_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// ---- lifecycle ---------------------------------------------------------------

Server::Impl::~Impl() {
  shutdown(0);
  for (Conn *c : finished)
    delete c;
}

bool Server::Impl::start(const Config &c, std::string *err) {
  if (running) {
    *err = "already started";
    return false;
  }
  cfg = c;
  stopping = false;
  std::vector<int> fds;
  if (!open_listeners(cfg.listen_addresses, cfg.port, cfg.reuse_port, &fds, &bound_port, err))
    return false;
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) {
    *err = std::string("epoll_create1: ") + strerror(errno);
    for (int fd : fds)
      ::close(fd);
    return false;
  }
  // MHD's own limit (its default is ~FD_SETSIZE even with epoll) is set above
  // ours (sse_capacity) so that over-capacity SSE clients get a 503 rather
  // than a reset, and plain requests (/healthz) still get through. With
  // max_sockets it is what the open-files limit leaves (less than that, and a
  // full process would stop accepting and leave clients in the accept queue).
  const unsigned max_sse = static_cast<unsigned>(std::max(cfg.max_connections, 1));
  unsigned mhd_limit = max_sse + std::max(64u, max_sse / 4);
  if (cfg.max_sockets > 0) // each daemon (listening address) gets its share
    mhd_limit =
        std::max(1u, static_cast<unsigned>(cfg.max_sockets) / static_cast<unsigned>(fds.size()));
  for (size_t i = 0; i < fds.size(); ++i) {
    MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, nullptr, nullptr,
        &access_cb, this, MHD_OPTION_EXTERNAL_LOGGER, &log_cb, this, MHD_OPTION_LISTEN_SOCKET,
        fds[i], MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        cfg.connection_memory_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        static_cast<unsigned>(std::max(cfg.request_timeout_s, 1)), MHD_OPTION_NOTIFY_COMPLETED,
        &completed_cb, this, MHD_OPTION_NOTIFY_CONNECTION, &connection_cb, this,
        MHD_OPTION_URI_LOG_CALLBACK, &uri_cb, this, MHD_OPTION_END);
    const MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD) : nullptr;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (!d || !info || epoll_ctl(epfd, EPOLL_CTL_ADD, info->epoll_fd, &ev) != 0) {
      *err = "cannot start the HTTP daemon";
      if (!log.empty())
        *err += ": " + log.back();
      if (d)
        MHD_stop_daemon(d); // closes fds[i]
      for (size_t j = i + 1; j < fds.size(); ++j)
        ::close(fds[j]);
      stop_daemons();
      return false;
    }
    daemons.push_back(d);
  }
  running = true;
  const int64_t now = mono_ms();
  next_heartbeat_ms = now + cfg.heartbeat_interval_s * int64_t{1000};
  return true;
}

// Stops every daemon (which closes its listening socket and any connection
// left) and the outer epoll set. Callers make sure nothing is suspended.
void Server::Impl::stop_daemons() {
  for (MHD_Daemon *d : daemons)
    MHD_stop_daemon(d);
  daemons.clear();
  if (epfd >= 0)
    ::close(epfd);
  epfd = -1;
  running = false;
}

void Server::Impl::shutdown(int drain_ms) {
  if (!running)
    return;
  stopping = true;
  for (MHD_Daemon *d : daemons) {
    const MHD_socket s = MHD_quiesce_daemon(d); // stop accepting; the socket is ours again
    if (s != MHD_INVALID_SOCKET)
      ::close(s);
  }
  // No id: line: the pgbus gem's "id: 0" reset the browser's Last-Event-ID,
  // and the reconnect replayed everything. The reason is the gem's.
  const std::string frame = wire::shutdown_frame("worker_restart");
  for (auto &[id, c] : conns) {
    if (c->phase == Phase::Pending) {
      c->phase = Phase::Rejecting;
      c->reject_status = 503;
      c->reject_body = "server shutting down\n";
      c->retry_stream = true; // the worker comes back: so does an EventSource
      c->close_reason = "shutdown";
      wake(c);
    } else if (c->phase == Phase::Opening || c->phase == Phase::Open) {
      if (!c->kill && !c->ending)
        queue_control(c, frame);
      end_gracefully(c, "shutdown");
    }
  }
  const int64_t deadline = mono_ms() + std::max(drain_ms, 0);
  while (true) {
    run();
    const int64_t now = mono_ms();
    if (conns.empty() || now >= deadline)
      break;
    long wait = static_cast<long>(std::min<int64_t>(deadline - now, 50));
    const long t = timeout_ms();
    if (t >= 0 && t < wait)
      wait = t;
    pollfd p{epfd, POLLIN, 0};
    (void)poll(&p, 1, static_cast<int>(wait)); // bounded by drain_ms; leaves events to run()
  }
  // Cut what did not flush in time. MHD_stop_daemon must not find a suspended
  // connection, so everything is resumed (and killed) and MHD runs once more.
  for (auto &[id, c] : conns)
    abort_conn(c, "shutdown");
  reap_all();
  mhd_run_all();
  stop_daemons();
}

// ---- the loop ------------------------------------------------------------------

void Server::Impl::run() {
  if (!running)
    return;
  const bool resumed = need_run; // by open()/reject()/push() since the last run
  need_run = false;
  reap_all();
  drain_epoll();
  flush_dirty();
  if (resumed || need_run || daemon_ready || mhd_due()) // else MHD_run would find nothing
    mhd_run_all();
  adopt_all(); // streams MHD has just handed to direct writes
  clock_ms = mono_ms();
  timers(clock_ms);
  flush_dirty();  // heartbeats, gap notices
  if (need_run) { // resumed by a timer, by an adoption, or by open()/push() since the last run
    need_run = false;
    mhd_run_all();
  }
  reap_all();
}

// Runs every daemon; again (a couple of times at most, so the caller's latch
// is not starved) while MHD reports work it can do at once (timeout 0), e.g.
// a connection resumed in this pass whose headers went out and whose first
// body chunk is ready: it is written now, not at the next wake-up.
void Server::Impl::mhd_run_all() {
  daemon_ready = false;
  for (int pass = 0; pass < 3; ++pass) {
    bool again = false;
    for (MHD_Daemon *d : daemons) {
      MHD_run(d);
      MHD_UNSIGNED_LONG_LONG t = 1;
      again |= MHD_get_timeout(d, &t) == MHD_YES && t == 0;
    }
    if (!again)
      break;
  }
}

// MHD has work without a new event on its epoll set: a timeout that is due,
// or connections it knows to be ready (its timeout is then 0).
bool Server::Impl::mhd_due() const {
  for (MHD_Daemon *d : daemons) {
    MHD_UNSIGNED_LONG_LONG t = 1;
    if (MHD_get_timeout(d, &t) == MHD_YES && t == 0)
      return true;
  }
  return false;
}

long Server::Impl::timeout_ms() const {
  if (!running)
    return -1;
  if (need_run || !dirty.empty() || !adopt.empty() || !reap.empty())
    return 0;
  const int64_t now = mono_ms();
  int64_t best = INT64_MAX;
  for (MHD_Daemon *d : daemons) {
    MHD_UNSIGNED_LONG_LONG t = 0;
    if (MHD_get_timeout(d, &t) == MHD_YES)
      best = std::min<int64_t>(best,
                               static_cast<int64_t>(std::min<MHD_UNSIGNED_LONG_LONG>(t, INT_MAX)));
  }
  auto at = [&](int64_t deadline) { best = std::min(best, std::max<int64_t>(deadline - now, 0)); };
  if (open_count > 0 && cfg.heartbeat_interval_s > 0)
    at(next_heartbeat_ms);
  if (next_expiry_ms != INT64_MAX)
    at(next_expiry_ms);
  if (!waiting.empty())
    at(waiting.front()->wait_since_ms + cfg.request_timeout_s * int64_t{1000});
  for (uint64_t id : ending) {
    auto it = conns.find(id);
    if (it != conns.end())
      at(it->second->end_deadline_ms);
  }
  if (!decide_by.empty())
    at(decide_by.front().first);
  return best == INT64_MAX ? -1 : static_cast<long>(std::min<int64_t>(best, LONG_MAX));
}

// Picks up closed SSE sockets (EPOLLRDHUP) and sockets with room again
// (EPOLLOUT). A daemon entry only notes that MHD_run() has events to read in
// its own epoll set; a full batch may hide one, so MHD runs then too.
void Server::Impl::drain_epoll() {
  epoll_event evs[64];
  const int n = epoll_wait(epfd, evs, 64, 0);
  if (n == 64)
    daemon_ready = true;
  for (int i = 0; i < n; ++i) {
    if (!(evs[i].data.u64 & kConnTag)) {
      daemon_ready = true;
      continue;
    }
    auto it = conns.find(evs[i].data.u64 & ~kConnTag);
    if (it == conns.end())
      continue;
    if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      unwatch(it->second);
      abort_conn(it->second, "client");
    } else if (evs[i].events & EPOLLOUT) {
      flush(it->second); // a direct stream's socket has room again
    }
  }
}

void Server::Impl::timers(int64_t now) {
  const int64_t req_ms = std::max(cfg.request_timeout_s, 1) * int64_t{1000};
  while (!waiting.empty() && waiting.front()->wait_since_ms + req_ms <= now) {
    Sock *s = waiting.front();
    request_arrived(s); // takes it off the list
    kill_socket(s->fd); // slowloris: MHD's own timeout restarts on every byte
  }
  if (!ending.empty()) {
    std::vector<uint64_t> still;
    for (uint64_t id : ending) {
      auto it = conns.find(id);
      if (it == conns.end() || it->second->kill)
        continue;
      if (now >= it->second->end_deadline_ms)
        abort_conn(it->second, it->second->close_reason);
      else
        still.push_back(id);
    }
    ending.swap(still);
  }
  while (!decide_by.empty()) { // decided entries go; undecided ones get a 503 when due
    auto it = conns.find(decide_by.front().second);
    const bool undecided = it != conns.end() && it->second->phase == Phase::Pending;
    if (undecided && decide_by.front().first > now)
      break;
    decide_by.pop_front();
    if (undecided) {
      Conn *c = it->second;
      c->phase = Phase::Rejecting;
      c->reject_status = 503;
      c->reject_body = "no decision on this request\n";
      c->retry_stream = true; // a backlog of new connections: come back
      c->close_reason = "server";
      wake(c);
    }
  }
  if (cfg.heartbeat_interval_s > 0 && now >= next_heartbeat_ms)
    heartbeats(now);
  if (now >= next_expiry_ms)
    expiry_check(now);
}

// One comment frame, encoded once and shared, to every open stream that has
// nothing queued (a stream with data queued does not need one); such a
// stream gives its frame buffer back first.
void Server::Impl::heartbeats(int64_t now) {
  next_heartbeat_ms = now + cfg.heartbeat_interval_s * int64_t{1000};
  std::string text;
  sse::append_comment(text, "heartbeat " + std::to_string(static_cast<long long>(time(nullptr))));
  auto body = std::make_shared<const std::string>(std::move(text));
  for (auto &[id, c] : conns) {
    if (c->phase != Phase::Open || c->ending || c->kill || !c->queue.empty())
      continue;
    c->queue.trim(); // idle since the last heartbeat at most: its frame buffer goes
    OutFrame f;
    f.body = body;
    f.control = true;
    c->queue.push(std::move(f));
    notify(c);
  }
}

// Ends streams that got nothing but heartbeats for longer than idle_timeout_s
// (exactly the threshold is not idle) and streams past their max_lifetime
// deadline, then schedules the next check at the earliest moment another one
// can expire.
void Server::Impl::expiry_check(int64_t now) {
  const int64_t idle_ms = cfg.idle_timeout_s * int64_t{1000};
  next_expiry_ms = INT64_MAX;
  for (auto &[id, c] : conns) {
    if ((c->phase != Phase::Open && c->phase != Phase::Opening) || c->ending || c->kill)
      continue;
    if (idle_ms > 0 && now - c->last_activity_ms > idle_ms)
      end_gracefully(c, "idle");
    else if (now >= c->end_of_life_ms)
      end_gracefully(c, "lifetime");
    else {
      const int64_t idle_at = idle_ms > 0 ? c->last_activity_ms + idle_ms + 1 : INT64_MAX;
      next_expiry_ms = std::min({next_expiry_ms, c->end_of_life_ms, idle_at});
    }
  }
}

// A stream's max_lifetime deadline: the lifetime less a jitter of up to 10 %
// derived from the connection id, so streams opened together do not all
// reconnect together.
int64_t Server::Impl::end_of_life(const Conn *c, int64_t opened_ms) const {
  if (cfg.max_lifetime_s <= 0)
    return INT64_MAX;
  const int64_t life_ms = cfg.max_lifetime_s * int64_t{1000};
  const uint64_t spread = static_cast<uint64_t>(life_ms / 10) + 1;
  return opened_ms + life_ms - static_cast<int64_t>((c->id * 0x9E3779B97F4A7C15ULL >> 17) % spread);
}

// ---- per-connection helpers ----------------------------------------------------

void Server::Impl::wake(Conn *c) {
  if (!c->suspended)
    return;
  c->suspended = false;
  MHD_resume_connection(c->mhd);
  need_run = true;
}

void Server::Impl::suspend(Conn *c) {
  MHD_suspend_connection(c->mhd);
  c->suspended = true;
}

// Something was queued (or the stream is to end): a direct stream is flushed
// in this round, any other one is resumed in MHD.
void Server::Impl::notify(Conn *c) {
  if (!c->direct) {
    wake(c);
    return;
  }
  if (!c->dirty && !c->want_out) { // a socket that refused a write is flushed on EPOLLOUT
    c->dirty = true;
    dirty.push_back(c->id);
  }
}

void Server::Impl::watch(Conn *c) {
  if (c->watched || c->fd < 0)
    return;
  epoll_event ev{};
  ev.events = EPOLLRDHUP; // not EPOLLIN: bytes a client sends after its request are no signal
  ev.data.u64 = c->id | kConnTag;
  c->watched = epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) == 0;
}

void Server::Impl::unwatch(Conn *c) {
  if (!c->watched)
    return;
  epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, nullptr);
  c->watched = false;
}

// The stream ends after what is queued has been written (final chunk, then
// the TCP connection closes); a client that does not read gets kGracefulCloseMs.
void Server::Impl::end_gracefully(Conn *c, const std::string &reason) {
  if (c->ending || c->kill)
    return;
  if (c->close_reason.empty())
    c->close_reason = reason;
  c->ending = true;
  c->end_deadline_ms = mono_ms() + kGracefulCloseMs;
  ending.push_back(c->id);
  notify(c); // a direct stream is handed back to MHD once its frames are out
}

void Server::Impl::abort_conn(Conn *c, const std::string &reason) {
  if (c->close_reason.empty())
    c->close_reason = reason;
  if (!c->kill) {
    c->kill = true;
    kill_socket(c->fd);
  }
  leave_direct(c);
  if (c->owned) {
    reap.push_back(c->id); // closed by reap_all(), outside any walk of conns
    return;
  }
  wake(c);
}

void Server::Impl::queue_control(Conn *c, std::string text) {
  OutFrame f;
  f.body = std::make_shared<const std::string>(std::move(text));
  f.control = true;
  c->queue.push(std::move(f));
}

// At most one gap notice waits in a queue; drops seen meanwhile are reported
// by the next one, queued when the first has been written.
// The notice carries "resume": the id to reconnect with to get the dropped
// frames back (the last frame before the first drop it reports): the last
// one written for drop_oldest, the newest still queued for drop_newest.
void Server::Impl::note_gap(Conn *c, uint64_t dropped) {
  if (!c->gap_resume_set) {
    c->gap_resume = cfg.overflow_policy == OverflowPolicy::DropNewest ? c->queue.newest_queued_id()
                                                                      : std::string();
    if (c->gap_resume.empty())
      c->gap_resume = c->queue.last_written_id();
    c->gap_resume_set = true;
  }
  if (c->gap_queued) {
    c->gap_unreported += dropped;
    return;
  }
  std::string frame = wire::gap_frame(wire::Gap::overflow(
      dropped,
      c->gap_resume.empty() ? std::nullopt : std::optional<std::string_view>(c->gap_resume)));
  c->gap_resume_set = false;
  queue_control(c, std::move(frame));
  c->gap_queued = true;
}

void Server::Impl::wait_for_request(Sock *s, int64_t now) {
  request_arrived(s);
  s->waiting = true;
  s->wait_since_ms = now;
  s->wait_it = waiting.insert(waiting.end(), s);
}

void Server::Impl::request_arrived(Sock *s) {
  if (!s->waiting)
    return;
  waiting.erase(s->wait_it);
  s->waiting = false;
}

void Server::Impl::add_log(std::string line) {
  if (log.size() >= kMaxLogLines)
    log.pop_front();
  log.push_back(std::move(line));
}

// ---- public interface ---------------------------------------------------------

Server::Server() : impl_(std::make_unique<Impl>()) {}
Server::~Server() = default;

bool Server::start(const Config &cfg, std::string *err) {
  impl_->next_id = cfg.conn_id_base;
  return impl_->start(cfg, err);
}

size_t sse_capacity(const Config &cfg) {
  const size_t wanted = static_cast<size_t>(std::max(cfg.max_connections, 0));
  if (cfg.max_sockets <= 0)
    return wanted;
  // Kept for answering: an eighth of the sockets, at least 4, at most 256.
  const size_t sockets = static_cast<size_t>(cfg.max_sockets);
  const size_t spare = std::clamp<size_t>(sockets / 8, 4, 256);
  return std::min(wanted, sockets > spare ? sockets - spare : 0);
}

void Server::reconfigure(const Config &c) {
  Impl &m = *impl_;
  const Config old = m.cfg;
  m.cfg = c;
  // Fixed while running: sockets and MHD's per-connection settings.
  m.cfg.listen_addresses = old.listen_addresses;
  m.cfg.port = old.port;
  m.cfg.reuse_port = old.reuse_port;
  m.cfg.connection_memory_limit = old.connection_memory_limit;
  m.cfg.max_sockets = old.max_sockets;
  for (auto &[id, conn] : m.conns)
    conn->queue.set_limits(c.queue_max_events, c.queue_max_bytes, c.overflow_policy);
  const int64_t now = mono_ms();
  m.next_heartbeat_ms = now + m.cfg.heartbeat_interval_s * int64_t{1000};
  for (auto &[id, conn] : m.conns)
    if (conn->phase == Phase::Open || conn->phase == Phase::Opening)
      conn->end_of_life_ms = m.end_of_life(conn, conn->opened_ms);
  m.next_expiry_ms = now; // recomputed for the new idle_timeout / max_lifetime
}

int Server::poll_fd() const { return impl_->running ? impl_->epfd : -1; }
long Server::timeout_ms() const { return impl_->timeout_ms(); }
void Server::run() { impl_->run(); }
void Server::tick() { impl_->clock_ms = mono_ms(); }

bool Server::has_pending() const { return !impl_->pending.empty(); }

std::vector<Request> Server::take_pending(size_t max) {
  std::vector<Request> out;
  size_t taken = 0;
  for (; taken < impl_->pending.size() && out.size() < max; taken++) {
    const uint64_t id = impl_->pending[taken];
    auto it = impl_->conns.find(id);
    if (it == impl_->conns.end() || it->second->phase != Phase::Pending || it->second->kill)
      continue; // gone (or going) before anyone saw it: nothing to report later
    it->second->handed_out = true;
    out.push_back(std::move(*it->second->req));
    it->second->req.reset();
  }
  impl_->pending.erase(impl_->pending.begin(), impl_->pending.begin() + (std::ptrdiff_t)taken);
  return out;
}

std::vector<std::pair<uint64_t, std::string>> Server::take_closed() {
  std::vector<std::pair<uint64_t, std::string>> out;
  out.swap(impl_->closed);
  return out;
}

void Server::reject(uint64_t conn_id, int status, const std::string &reason) {
  auto it = impl_->conns.find(conn_id);
  if (it == impl_->conns.end() || it->second->phase != Phase::Pending)
    return;
  Conn *c = it->second;
  c->phase = Phase::Rejecting;
  c->reject_status = status >= 400 && status <= 599 ? status : 500;
  c->reject_body = reason;
  if (c->reject_body.empty() || c->reject_body.back() != '\n')
    c->reject_body.push_back('\n');
  if (c->close_reason.empty())
    c->close_reason = "server";
  impl_->wake(c);
}

void Server::retry_later(uint64_t conn_id, const std::string &reason) {
  auto it = impl_->conns.find(conn_id);
  if (it == impl_->conns.end() || it->second->phase != Phase::Pending)
    return;
  reject(conn_id, 503, reason);
  it->second->retry_stream = true;
}

Conn *Server::open(uint64_t conn_id, std::string preamble, const std::string &start_id) {
  auto it = impl_->conns.find(conn_id);
  if (it == impl_->conns.end() || it->second->phase != Phase::Pending)
    return nullptr;
  Conn *c = it->second;
  c->queue.set_start_id(start_id);
  c->held = true;
  c->phase = Phase::Opening;
  if (!preamble.empty()) {
    OutFrame f;
    f.head = std::move(preamble);
    f.control = true;
    c->queue.push(std::move(f));
  }
  c->last_activity_ms = c->opened_ms = mono_ms();
  c->end_of_life_ms = impl_->end_of_life(c, c->opened_ms);
  int64_t expiry = c->end_of_life_ms;
  if (impl_->cfg.idle_timeout_s > 0)
    expiry = std::min(expiry, c->last_activity_ms + impl_->cfg.idle_timeout_s * int64_t{1000} + 1);
  impl_->next_expiry_ms = std::min(impl_->next_expiry_ms, expiry);
  impl_->wake(c);
  return c;
}

OverflowPolicy Server::policy() const { return impl_->cfg.overflow_policy; }

OutQueue::PushResult Server::push(Conn *c, OutFrame frame) {
  using R = OutQueue::PushResult;
  if (c->finished)
    return R::DroppedNewest; // gone: nobody to send it to
  if ((c->phase != Phase::Opening && c->phase != Phase::Open) || c->ending || c->kill)
    return R::DroppedNewest; // not streaming (any more)
  const bool control = frame.control;
  const uint32_t events = frame.events; // data events in it (a batch: several)
  const uint64_t dropped_before = c->queue.dropped();
  const R r = c->queue.push(std::move(frame));
  const uint64_t dropped = c->queue.dropped() - dropped_before;
  c->last_activity_ms = impl_->clock_ms; // refreshed by tick(): no clock read per frame
  switch (r) {
  case R::Queued:
    c->data_queued += control ? 0 : events;
    break;
  case R::DroppedOldest:
    c->data_queued += events;
    c->evicted += dropped;
    impl_->note_gap(c, dropped);
    break;
  case R::DroppedNewest:
    impl_->note_gap(c, dropped);
    break;
  case R::MustDisconnect:
    impl_->abort_conn(c, "overflow");
    return r;
  }
  impl_->notify(c);
  return r;
}

size_t Server::queued_events(const Conn *c) const { return c->finished ? 0 : c->queue.events(); }
size_t Server::queued_bytes(const Conn *c) const { return c->finished ? 0 : c->queue.bytes(); }
uint64_t Server::written(const Conn *c) const { return c->delivered; }
bool Server::backed_up(const Conn *c) const {
  const size_t refill = impl_->cfg.socket_send_buffer > 0
                            ? static_cast<size_t>(impl_->cfg.socket_send_buffer)
                            : size_t{64 * 1024};
  return c->want_out && !c->finished && c->queue.bytes() >= refill;
}

void Server::close(Conn *c, const std::string &reason) {
  if (!c->finished && (c->phase == Phase::Opening || c->phase == Phase::Open))
    impl_->end_gracefully(c, reason);
}

void Server::release(Conn *c) {
  if (c == nullptr)
    return;
  c->held = false;
  if (c->finished)
    impl_->dispose(c);
}

void Server::protect(const std::string &path) { impl_->protected_paths.insert(path); }

void Server::set_handler(const std::string &path, Handler h) {
  if (h)
    impl_->handlers[path] = std::move(h);
  else
    impl_->handlers.erase(path);
}

void Server::shutdown(int drain_ms) { impl_->shutdown(drain_ms); }

size_t Server::connection_count() const { return impl_->conns.size(); }

namespace {
ConnectionInfo info_of(const Conn &c) {
  return ConnectionInfo{
      c.id,        c.remote_addr,    c.connected_at_us, c.queue.events(), c.queue.bytes(),
      c.delivered, c.queue.dropped()};
}
} // namespace

std::vector<ConnectionInfo> Server::connections() const {
  std::vector<ConnectionInfo> out;
  out.reserve(impl_->conns.size());
  for (const auto &[id, c] : impl_->conns)
    out.push_back(info_of(*c));
  return out;
}

bool Server::connection(uint64_t conn_id, ConnectionInfo *out) const {
  auto it = impl_->conns.find(conn_id);
  if (it == impl_->conns.end())
    return false;
  *out = info_of(*it->second);
  return true;
}

int Server::port() const { return impl_->bound_port; }

std::vector<std::string> Server::take_log() {
  std::vector<std::string> out(impl_->log.begin(), impl_->log.end());
  impl_->log.clear();
  return out;
}

} // namespace pgbs::http
