// The background worker: one event loop per process. libmicrohttpd runs
// without threads in external-epoll mode; its epoll fd sits in the worker's
// WaitEventSet next to the latch (set by committing producers) and postmaster
// death, so every PostgreSQL call happens on this main thread.
#include "core/auth.hpp"
#include "http/server.hpp"
#include "pg/guard.hpp"
#include "pg/compat.hpp"
#include "pg/spi.hpp"
#include "settings/configs.hpp"
#include "shmem/conns.hpp"
#include "shmem/figures.hpp"
#include "shmem/ring.hpp"
#include "shmem/shared.hpp"
#include "shmem/standby.hpp"
#include "worker/audience_rules.hpp"
#include "worker/conn_rows.hpp"
#include "worker/file_limit.hpp"
#include "worker/hub.hpp"
#include "worker/routes.hpp"
#include "worker/standby.hpp"
#include "worker/tasks.hpp"
#include "worker/wal_reader.hpp"

#include <csignal>
#ifdef __GLIBC__
#include <malloc.h> // malloc_trim
#endif

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pgbus_stream_worker_main(Datum arg);
}

namespace pgbs::worker {
namespace {

volatile sig_atomic_t got_sigterm = 0;
int worker_index = 0;

// SIGTERM: the loop stops at its next turn. A query in progress (SPI) is
// cancelled, so a stop is never held up by a statement waiting on a lock (a
// prepared transaction's can last forever).
void on_sigterm(SIGNAL_ARGS) {
  int save_errno = errno;
  got_sigterm = 1;
  pg::cancel_query_from_signal();
  SetLatch(MyLatch);
  errno = save_errno;
}

void detach_latch(int, Datum) { shmem::worker_detach(worker_index); }

// The same warning every round (a table that stays broken, a database
// without the extension) is logged once a minute with the count of repeats.
int max_sockets = 0; // plan_file_limit(), at start

void warn_repeated(const std::string &msg) {
  static std::string last;
  static int64 last_us = 0;
  static long repeats = 0;
  const int64 now = (int64)GetCurrentTimestamp();
  if (msg == last && now - last_us < 60 * USECS_PER_SEC) {
    repeats++;
    return;
  }
  if (msg == last && repeats > 0)
    pg::warn(msg + " (" + std::to_string(repeats) + " more in the last minute)");
  else
    pg::warn(msg);
  last = msg;
  last_us = now;
  repeats = 0;
}

// New SSE connections decided per second (pgbus_stream.accept_rate): a
// token bucket holding a tenth of a second's worth, so that a reconnect
// storm is answered in order of arrival at a steady pace, not all at once.
class AcceptBudget {
public:
  size_t allowance(int64 now_us) {
    if (settings::current().accept_rate <= 0)
      return SIZE_MAX;
    const double cap = std::max(1.0, settings::current().accept_rate / 10.0);
    if (last_us_ == 0)
      tokens_ = cap;
    else
      tokens_ =
          std::min(cap, tokens_ + (now_us - last_us_) * (settings::current().accept_rate / 1e6));
    last_us_ = now_us;
    return tokens_ >= 1 ? (size_t)tokens_ : 0;
  }
  void took(size_t n) { tokens_ -= (double)n; }
  // Milliseconds until the next connection may be decided (-1: no bound).
  long wait_ms() const {
    if (settings::current().accept_rate <= 0)
      return -1;
    return tokens_ >= 1 ? 0 : (long)((1 - tokens_) * 1000 / settings::current().accept_rate) + 1;
  }

private:
  double tokens_ = 0;
  int64 last_us_ = 0;
};

template <typename F> void guarded(F &&step) {
  try {
    step();
  } catch (const pg::Error &e) {
    if (!got_sigterm) // one cancelled by SIGTERM is no news
      warn_repeated("worker error: " + std::string(e.what()));
  }
}

http::Config http_config() {
  http::Config c = settings::http_config(settings::current());
  c.reuse_port = true;
  // One limit for the node (docs/ARCHITECTURE.md, "One limit for the node"):
  // each worker may hold up to all of it, and every connection takes a place
  // in shared memory, so no worker refuses while the node has room.
  c.take_place = [] {
    return shmem::take_connection_place(worker_index,
                                        (uint32)Max(settings::current().max_connections, 0));
  };
  c.give_place = [] { shmem::give_connection_place(worker_index); };
  c.admin_token = settings::admin_token(settings::current());
  // worker index in the top byte, the start time below it: unique among the
  // workers and across restarts of one.
  c.conn_id_base =
      ((uint64_t)worker_index << 56) | (((uint64_t)GetCurrentTimestamp() & 0xFFFFFFu) << 32);
  c.max_sockets = max_sockets;
  return c;
}

void publish_stats(const Hub &hub, const http::Server &server) {
  const engine::Counters &c = hub.engine().counters();
  shmem::WorkerFigures f;
  f.connections = server.connection_count();
  f.queued = c.queued;
  f.overflow_dropped = c.overflow_dropped;
  f.catch_ups = c.catch_ups;
  f.events_read = c.events;
  f.held_back = c.held_back;
  shmem::publish_worker_figures(worker_index, f);
}

bool database_ok = true; // the last probe's answer (for /healthz)

int64_t now_ms() { return (int64_t)(GetCurrentTimestamp() / 1000); }

// Audience rules: define_audience() and drop_audience() move the catalog
// version, whose commit wakes every worker: rules are read again at the next
// wake-up. A failed read is retried at the next change, not at every wake-up.
class AudienceRules {
public:
  auth::Audiences audiences{evaluate_audience_rule};
  void refresh() {
    const uint64 v = shmem::catalog_version();
    if (v == version_)
      return;
    version_ = v;
    if (load_audience_rules(&rules_))
      audiences.set_rules(rules_);
  }

private:
  std::map<std::string, std::string> rules_;
  uint64 version_ = UINT64_MAX; // no version read yet
};

// Memory given back after connections go: once the number of connections
// has fallen by a tenth from its peak (or to zero), free heap pages are
// returned to the kernel, at most every 2 s (the task "heap trim"). Without
// it the worker's RSS stays at its highest point for good after a burst of
// connections.
class HeapTrim {
public:
  void observe(size_t conns) { // after every I/O round
    peak_ = std::max(peak_, conns);
    owed_ = peak_ > 0 && (conns == 0 || conns < peak_ - peak_ / 10);
  }
  bool owed() const { return owed_; }
  void trim(size_t conns) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    peak_ = conns;
    owed_ = false;
  }

private:
  size_t peak_ = 0;
  bool owed_ = false;
};

// The worker's loop (docs/ARCHITECTURE.md, "The worker's loop"): it waits
// for the earliest deadline, takes in what changed meanwhile, runs an I/O
// round, then the periodic tasks that are due.
class Loop {
public:
  Loop(const settings::Settings &cfg, http::Server &server, Hub &hub, AudienceRules &audiences,
       bool listening);
  // Runs until SIGTERM.
  void serve();

private:
  void add_tasks();
  void sweep_floors();
  void store();
  void retain();
  void update_rows();
  long next_wait_ms() const;
  void wait_for_work();
  void sleep_paused(long timeout);
  void take_news();
  void reload();
  bool paced(int64 now_us);
  void pace_after(int64 start_us);
  void between_rounds();
  void io_round(int64 start_us);
  void record_closed();
  bool decide_requests(int64 start_us);

  const settings::Settings &cfg_;
  http::Server &server_;
  Hub &hub_;
  AudienceRules &audiences_;
  const bool listening_;
  WaitEventSet *wes_ = nullptr;
  WaitEventSet *pause_wes_ = nullptr; // the latch and postmaster death only (sleep_paused())
  // On a hot standby nothing is written (cursors, history, retention) until
  // it is promoted; the worker goes on serving across the promotion.
  bool standby_;
  bool floors_held_;      // standby floors to sweep (worker 0)
  long wal_poll_ms_ = -1; // when worker 0's WAL reader looks again
  AcceptBudget accepts_;
  bool replays_pending_ = false;
  ConnRows conn_rows_;
  int64 next_run_us_ = 0; // write pacing (paced())
  long defer_ms_ = -1;    // the pause before the next round, -1: none
  HeapTrim heap_;
  Tasks wake_tasks_{now_ms}; // at every wake-up, before the I/O round (paced or not)
  Tasks tasks_{now_ms};      // after each I/O round
};

Loop::Loop(const settings::Settings &cfg, http::Server &server, Hub &hub, AudienceRules &audiences,
           bool listening)
    : cfg_(cfg), server_(server), hub_(hub), audiences_(audiences), listening_(listening),
      conn_rows_(worker_index) {
  // Worker 0 reads the capture's messages back from replayed WAL; WAL
  // written into pg_wal wakes it (worker/wal_reader.hpp).
  const int wal_fd = worker_index == 0 ? wal_reader_fd() : -1;
  const int fd = listening ? server.poll_fd() : -1;
  pg::call([&] {
    wes_ = pg::create_session_wait_event_set(4);
    AddWaitEventToSet(wes_, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(wes_, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    if (listening)
      AddWaitEventToSet(wes_, WL_SOCKET_READABLE, fd, nullptr, nullptr);
    if (wal_fd >= 0)
      AddWaitEventToSet(wes_, WL_SOCKET_READABLE, wal_fd, nullptr, nullptr);
    pause_wes_ = pg::create_session_wait_event_set(2);
    AddWaitEventToSet(pause_wes_, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(pause_wes_, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
  });
  standby_ = in_recovery();
  pg::log("worker " + std::to_string(worker_index) + " listening on port " +
          std::to_string(cfg.port) + (standby_ ? " (hot standby: read-only)" : ""));
  floors_held_ = standby_;
  if (worker_index == 0)
    wal_poll_ms_ = wal_reader_pump();
  add_tasks();
}

// The periodic tasks, in the order they run. Intervals from
// settings::intervals() are read at every look: a reload applies at once.
void Loop::add_tasks() {
  const auto every = [](int64_t ms) { return [ms] { return ms; }; };
  const auto setting = [this](int64_t settings::Intervals::*ms) {
    return [this, ms] { return settings::intervals(cfg_).*ms; };
  };
  const auto writing = [this] { return !standby_; };
  // Worker 0, at every wake-up: floors of aborted transactions are swept
  // while any are held, unless the WAL reader is still catching up.
  if (worker_index == 0)
    wake_tasks_.add("standby floor sweep", every(100), [this] { sweep_floors(); })
        .when([] { return shmem::standby_reader_phase() != shmem::kReaderCatchingUp; })
        .wakes([this] { return floors_held_; });
  if (!listening_)
    return; // no connections: nothing to store, probe, prune or publish
  tasks_.add("cursor flush", setting(&settings::Intervals::cursor_flush_ms), [this] { store(); })
      .when(writing);
  // The first probe after one interval: at startup the extension may still
  // be on its way. After a failure, every second: /healthz recovers fast.
  const auto probe_ms = [] { return int64_t{database_ok ? 5000 : 1000}; };
  tasks_.add("database probe", probe_ms, [this] { database_ok = hub_.probe(); })
      .first_after_interval();
  if (worker_index == 0)
    tasks_.add("retention", setting(&settings::Intervals::retention_ms), [this] { retain(); })
        .when(writing)
        .wakes();
  tasks_.add("worker figures", every(0), [this] { publish_stats(hub_, server_); });
  // The rows of the connections that came, went or changed, at once (then
  // presence watchers on every worker are told); every row refreshed every
  // 500 ms a slice per turn (worker/conn_rows.hpp), so that connections()
  // stays within a second of reality.
  tasks_.add("connection rows", every(0), [this] { update_rows(); });
  tasks_.add("connection rows pass", every(500), [this] { conn_rows_.start_pass(); })
      .when([this] { return !conn_rows_.passing(); })
      .wakes([this] { return server_.connection_count() > 0; });
  tasks_.add("connection rows slice", every(0), [this] { conn_rows_.step(hub_, server_); })
      .wakes([this] { return conn_rows_.passing(); });
  tasks_.add("presence", every(0), [this] { hub_.presence_round(); });
  tasks_.add("heap trim", every(2000), [this] { heap_.trim(server_.connection_count()); })
      .when([this] { return heap_.owed(); })
      .wakes();
}

void Loop::sweep_floors() {
  guarded([&] { floors_held_ = sweep_standby_floors(); });
}

// Subscriber cursors and history rows (a failed store is kept for the next).
void Loop::store() {
  hub_.engine().flush_cursors();
  hub_.engine().flush_history();
}

void Loop::retain() {
  hub_.engine().apply_retention();
  if (cfg_.stats_enabled) // no history kept, none to prune
    hub_.prune_history();
}

void Loop::update_rows() {
  if (conn_rows_.update(hub_, server_))
    shmem::presence_changed(worker_index);
}

void Loop::serve() {
  while (!got_sigterm) {
    wait_for_work();
    if (got_sigterm)
      break;
    take_news();
    // A failed read (e.g. a queue table dropped under us) must not kill the
    // worker.
    guarded([&] {
      pg::call([] { CHECK_FOR_INTERRUPTS(); });
      server_.tick();
      const int64 now_us = (int64)GetCurrentTimestamp();
      if (paced(now_us))
        return between_rounds();
      io_round(now_us);
      tasks_.run_due();
    });
  }
}

// How long the next wait may last (ms, -1: until woken).
long Loop::next_wait_ms() const {
  long timeout = defer_ms_; // paced: frames queued meanwhile wait for the next round
  if (timeout < 0) {
    timeout = earliest(listening_ ? server_.timeout_ms() : -1, tasks_.wait_ms());
    // Commits come too fast to be woken for each: read on a timer (not
    // while paced: the round after the pause reads them).
    timeout = earliest(timeout, hub_.ring_poll_ms());
  }
  if (replays_pending_)
    timeout = earliest(timeout, 5); // paged replays wait for their connection's queue to drain
  // Streams left by their last connection here go dormant after their linger.
  timeout = earliest(timeout, hub_.engine().release_check_ms());
  timeout = earliest(timeout, wake_tasks_.wait_ms());
  // Replay wakes nobody: its position is looked at on a timer while WAL arrives.
  timeout = earliest(timeout, wal_poll_ms_);
  if (listening_ && server_.has_pending()) // beyond accept_rate: the next one's turn
    timeout = earliest(timeout, accepts_.wait_ms());
  return timeout;
}

void Loop::wait_for_work() {
  const long timeout = next_wait_ms();
  if (defer_ms_ >= 0)
    return sleep_paused(timeout);
  WaitEvent events[4];
  pg::call([&] {
    (void)WaitEventSetWait(wes_, timeout, events, 4, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
  });
}

// The pause of paced writes is slept through. Libmicrohttpd does not run
// during a paced turn, so a ready listener (connections to accept, sockets
// closing, requests) would stay ready and turn the pause into a spin of
// paced turns: the pause waits on the latch and postmaster death only, and
// the round after it serves the sockets. WAL written meanwhile (the WAL
// watch, worker 0 on a standby) waits for the end of the pause like the
// ring's commits. A latch set by a commit, or by anything else the next turn
// takes in anyway, does not end the pause either (at a commit per wake-up
// it would be a spin too); SIGTERM, SIGHUP and a pending interrupt do.
void Loop::sleep_paused(long timeout) {
  pg::call([&] {
    const TimestampTz until = GetCurrentTimestamp() + (TimestampTz)timeout * 1000;
    long left = timeout;
    WaitEvent event;
    while (WaitEventSetWait(pause_wes_, left, &event, 1, PG_WAIT_EXTENSION) > 0) {
      ResetLatch(MyLatch);
      if (got_sigterm || ConfigReloadPending || InterruptPending)
        return;
      left = (long)((until - GetCurrentTimestamp() + 999) / 1000);
      if (left <= 0)
        return;
    }
  });
}

// What changed while the worker waited: audience rules, a promotion, WAL
// replayed (worker 0), a SIGHUP.
void Loop::take_news() {
  audiences_.refresh();
  if (standby_ && !in_recovery()) {
    standby_ = false;
    pg::log("worker " + std::to_string(worker_index) + ": this node was promoted, now writing");
    hub_.configure(); // history and retention as configured
  }
  if (worker_index == 0)
    wal_poll_ms_ = wal_reader_pump();
  wake_tasks_.run_due();
  if (ConfigReloadPending)
    reload();
}

void Loop::reload() {
  ConfigReloadPending = false;
  pg::call([] { ProcessConfigFile(PGC_SIGHUP); });
  settings::load();
  server_.reconfigure(http_config());
  hub_.configure();
  hub_.engine().configure_auth(settings::secrets(cfg_));
}

// Write pacing: a write round costs about one send per connection with
// something queued. When a round took over a millisecond, the next one
// waits as long as it took (at most half the time writing), so under
// load several events leave in one send; small fan-outs never wait.
// Commits wait in the ring meanwhile, and the next round takes them
// all at once: the engine then queues each stream's run of them as one
// frame per connection (engine/batch.cpp).
bool Loop::paced(int64 now_us) {
  if (listening_ && now_us < next_run_us_) {
    defer_ms_ = (long)((next_run_us_ - now_us + 999) / 1000);
    return true;
  }
  defer_ms_ = -1;
  return false;
}

void Loop::pace_after(int64 start_us) {
  const int64 run_end_us = (int64)GetCurrentTimestamp();
  const int64 took_us = run_end_us - start_us;
  next_run_us_ = took_us > 1000 ? run_end_us + std::min<int64>(took_us, 20000) : 0;
}

// A paced turn: only the figures and a slice of connections()'s rows.
void Loop::between_rounds() {
  publish_stats(hub_, server_);
  conn_rows_.step(hub_, server_);
}

// The I/O round: the ring read and dispatched, connections ended, paged
// replays continued, then up to eight runs of libmicrohttpd, each followed by
// the connections it closed and the requests it read.
void Loop::io_round(int64 start_us) {
  // A step that fails (one stream's table broken, say) must not keep the
  // listener from running: each is caught on its own.
  guarded([&] { hub_.cycle(); });
  hub_.end_connections(); // expired credentials, disconnect()
  if (!listening_)
    return;
  guarded([&] { replays_pending_ = hub_.engine().continue_paging(); });
  // Requests are read by MHD while it runs; a request read by the last
  // run() of a round is decided in the next round of this loop, not after
  // the next wake-up.
  for (int round = 0; round < 8; round++) {
    server_.run();
    record_closed();
    if (!decide_requests(start_us))
      break;
  }
  pace_after(start_us);
  replays_pending_ = hub_.engine().paging_pending();
  hub_.engine().track_written();
  heap_.observe(server_.connection_count());
}

void Loop::record_closed() {
  for (auto &[cid, reason] : server_.take_closed()) {
    std::string streams, cursor, subscriber, state;
    if (hub_.engine().describe(cid, &streams, &cursor, &subscriber, &state))
      shmem::record_diagnostic(worker_index, cid, reason == "overflow" ? "evicted" : "closed",
                               streams.c_str(), ("reason=" + reason + " cursor=" + cursor).c_str());
    hub_.closed(cid);
  }
}

// The requests the last run read, as many as accept_rate allows now; false
// when there were none.
bool Loop::decide_requests(int64 start_us) {
  std::vector<http::Request> pending = server_.take_pending(accepts_.allowance(start_us));
  accepts_.took(pending.size());
  if (pending.empty())
    return false;
  // Producers wake this worker for a newly watched stream from now on;
  // one more round drains what they committed before they could know.
  pg::call([] { SetLatch(MyLatch); });
  // Every stream is brought up to date (one full round) before the
  // first subscription of the batch that opens; refusals need none.
  hub_.new_batch();
  for (const http::Request &r : pending) {
    try {
      hub_.subscribe(r);
    } catch (const pg::Error &e) {
      server_.retry_later(r.conn_id, std::string("stream unavailable: ") + e.what() + "\n");
      shmem::record_diagnostic(worker_index, r.conn_id, "failed",
                               r.streams.empty() ? "" : r.streams[0].c_str(), e.what());
    }
  }
  return true;
}

// Runs the loop until SIGTERM or a fatal setup error; returns the exit code.
int run() {
  http::Server server;
  std::string err;
  const settings::Settings &cfg = settings::load();
  const bool listening = cfg.port != 0; // port 0: no listener (SQL-only test instances)
  if (listening)
    max_sockets = plan_file_limit(worker_index);
  if (listening && !server.start(http_config(), &err)) {
    pg::warn("cannot listen on port " + std::to_string(cfg.port) + ": " + err);
    return 1;
  }
  Hub hub(server, MyDatabaseId, worker_index);
  hub.engine().configure_auth(settings::secrets(cfg));
  AudienceRules audiences;
  hub.engine().set_audiences(&audiences.audiences);
  hub.reload_catalog();
  if (listening)
    register_routes(server, hub, worker_index, &database_ok);
  if (worker_index == 0)
    wal_reader_start();
  Loop(cfg, server, hub, audiences, listening).serve();

  pg::log("worker " + std::to_string(worker_index) + " shutting down");
  // The last cursor flush is bounded: a lock wait gives up after a second
  // rather than holding up the stop.
  try {
    pg::call([] { SetConfigOption("lock_timeout", "1000", PGC_SUSET, PGC_S_OVERRIDE); });
  } catch (const pg::Error &) {
  }
  hub.engine().track_written();
  if (listening)
    server.shutdown(settings::intervals(cfg).shutdown_drain_ms);
  try {
    if (!in_recovery())
      hub.engine().flush_cursors(); // what reached the sockets before the stop
  } catch (const pg::Error &e) {
    pg::warn(std::string("could not store subscriber cursors: ") + e.what());
  }
  return 1; // exit code 1: restarted unless the postmaster itself is stopping
}

} // namespace
} // namespace pgbs::worker

void pgbus_stream_worker_main(Datum arg) {
  using namespace pgbs;
  worker::worker_index = DatumGetInt32(arg);
  pqsignal(SIGTERM, worker::on_sigterm);
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnection(settings::current().database.c_str(), nullptr, 0);
  // No name in the worker's SQL may resolve to an object of a user's schema
  // (docs/ARCHITECTURE.md, "Whose rights"); a reload of postgresql.conf
  // does not override it.
  SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
  shmem::worker_attach(worker::worker_index, MyLatch, MyProcPid);
  before_shmem_exit(worker::detach_latch, 0);

  char message[512];
  message[0] = '\0';
  int code = 1;
  try {
    code = worker::run();
  } catch (const std::exception &e) {
    strlcpy(message, e.what(), sizeof(message));
  } catch (...) {
    strlcpy(message, "unknown C++ exception", sizeof(message));
  }
  if (message[0] != '\0')
    ereport(LOG, (errmsg("pgbus_stream: worker stopped: %s", message)));
  proc_exit(code);
}
