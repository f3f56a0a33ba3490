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

bool database_ok = true; // the last round's reads worked (for /healthz)

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
  auth::Audiences audiences(evaluate_audience_rule);
  hub.engine().set_audiences(&audiences);
  // define_audience() and drop_audience() move the catalog version, whose
  // commit wakes every worker: rules are read again at the next wake-up.
  // A failed read is retried at the next change, not at every wake-up.
  std::map<std::string, std::string> rules;
  uint64 audiences_version = UINT64_MAX; // no version read yet
  auto refresh_audiences = [&] {
    const uint64 v = shmem::catalog_version();
    if (v == audiences_version)
      return;
    audiences_version = v;
    if (load_audience_rules(&rules))
      audiences.set_rules(rules);
  };
  hub.reload_catalog();
  if (listening)
    register_routes(server, hub, worker_index, &database_ok);

  // Worker 0 reads the capture's messages back from replayed WAL; WAL
  // written into pg_wal wakes it (worker/wal_reader.hpp).
  if (worker_index == 0)
    wal_reader_start();
  const int wal_fd = worker_index == 0 ? wal_reader_fd() : -1;
  WaitEventSet *wes = nullptr;
  int fd = listening ? server.poll_fd() : -1;
  pg::call([&] {
    wes = pg::create_session_wait_event_set(4);
    AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    if (listening)
      AddWaitEventToSet(wes, WL_SOCKET_READABLE, fd, nullptr, nullptr);
    if (wal_fd >= 0)
      AddWaitEventToSet(wes, WL_SOCKET_READABLE, wal_fd, nullptr, nullptr);
  });
  // On a hot standby nothing is written (cursors, history, retention) until
  // it is promoted; the worker goes on serving across the promotion.
  bool standby = in_recovery();
  pg::log("worker " + std::to_string(worker_index) + " listening on port " +
          std::to_string(cfg.port) + (standby ? " (hot standby: read-only)" : ""));
  bool floors_held = standby; // standby floors to sweep (worker 0)
  int64 last_sweep_ms = 0;
  long wal_poll_ms = worker_index == 0 ? wal_reader_pump() : -1;
  AcceptBudget accepts;

  bool replays_pending = false;
  int64 last_snapshot_ms = 0;
  ConnRows conn_rows(worker_index);
  int64 last_flush_ms = 0;
  int64 last_retention_ms = 0;
  // First probe after one interval: at startup the extension may still be on its way.
  int64 last_probe_ms = (int64)(GetCurrentTimestamp() / 1000);
  int64 next_run_us = 0; // write pacing (see below)
  long defer_ms = -1;
  // Memory given back after connections go: once the number of connections
  // has fallen by a tenth from its peak (or to zero), free heap pages are
  // returned to the kernel, at most every 2 s. Without it the worker's RSS
  // stays at its highest point for good after a burst of connections.
  size_t peak_conns = 0;
  int64 last_trim_ms = 0;
  bool trim_pending = false;
  while (!got_sigterm) {
    long timeout = listening ? server.timeout_ms() : -1;
    if (trim_pending && (timeout < 0 || timeout > 2000))
      timeout = 2000;
    if (listening && server.connection_count() > 0 && (timeout < 0 || timeout > 500))
      timeout = 500; // connections() stays within a second of reality
    if (conn_rows.passing())
      timeout = 0; // the rest of a refresh of connections(), a slice per turn
    if (worker_index == 0 && (timeout < 0 || timeout > settings::intervals(cfg).retention_ms))
      timeout = settings::intervals(cfg).retention_ms; // retention runs on a timer
    if (defer_ms >= 0)
      timeout = defer_ms; // paced: frames queued meanwhile wait for the next round
                          // (server.timeout_ms() says 0 while any are queued)
    if (replays_pending && (timeout < 0 || timeout > 5))
      timeout = 5; // paged replays wait for their connection's queue to drain
    if (const long release = hub.engine().release_check_ms();
        release >= 0 && (timeout < 0 || timeout > release))
      timeout = release; // streams left by their last connection here go dormant after their linger
    if (floors_held && worker_index == 0 && (timeout < 0 || timeout > 100))
      timeout = 100; // floors of aborted transactions are swept while any are held
    if (wal_poll_ms >= 0 && (timeout < 0 || timeout > wal_poll_ms))
      timeout = wal_poll_ms; // replay wakes nobody: its position is looked at on a timer
                             // while WAL arrives
    if (listening && server.has_pending())
      if (const long wait = accepts.wait_ms(); wait >= 0 && (timeout < 0 || timeout > wait))
        timeout = wait; // new connections beyond accept_rate: the next one's turn
    if (const long poll = hub.ring_poll_ms();
        poll >= 0 && defer_ms < 0 && (timeout < 0 || timeout > poll))
      timeout = poll; // commits come too fast to be woken for each: read on a timer
                      // (not while paced: the round after the pause reads them)
    WaitEvent events[4];
    pg::call([&] {
      (void)WaitEventSetWait(wes, timeout, events, 4, PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
    });
    if (got_sigterm)
      break;
    refresh_audiences();
    if (standby && !in_recovery()) {
      standby = false;
      pg::log("worker " + std::to_string(worker_index) + ": this node was promoted, now writing");
      hub.configure(); // history and retention as configured
    }
    if (worker_index == 0) {
      wal_poll_ms = wal_reader_pump();
      const int64 now_ms = (int64)(GetCurrentTimestamp() / 1000);
      if (now_ms - last_sweep_ms >= 100 &&
          shmem::standby_reader_phase() != shmem::kReaderCatchingUp) {
        last_sweep_ms = now_ms;
        guarded([&] { floors_held = sweep_standby_floors(); });
      }
    }
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      pg::call([] { ProcessConfigFile(PGC_SIGHUP); });
      settings::load();
      server.reconfigure(http_config());
      hub.configure();
      hub.engine().configure_auth(settings::secrets(cfg));
    }
    try {
      pg::call([] { CHECK_FOR_INTERRUPTS(); });
      server.tick();
      // Write pacing: a write round costs about one send per connection with
      // something queued. When a round took over a millisecond, the next one
      // waits as long as it took (at most half the time writing), so under
      // load several events leave in one send; small fan-outs never wait.
      // Commits wait in the ring meanwhile, and the next round takes them
      // all at once: the engine then queues each stream's run of them as one
      // frame per connection (engine/batch.cpp).
      const int64 now_us = (int64)GetCurrentTimestamp();
      if (listening && now_us < next_run_us) {
        defer_ms = (long)((next_run_us - now_us + 999) / 1000);
        publish_stats(hub, server);
        conn_rows.step(hub, server);
        continue;
      }
      defer_ms = -1;
      // A step that fails (one stream's table broken, say) must not keep the
      // listener from running: each is caught on its own.
      guarded([&] { hub.cycle(); });
      hub.end_connections(); // expired credentials, disconnect()
      if (!listening)
        continue;
      guarded([&] { replays_pending = hub.engine().continue_paging(); });
      // Requests are read by MHD while it runs; a request read by the last
      // run() of a round is decided in the next round of this loop, not after
      // the next wake-up.
      for (int round = 0; round < 8; round++) {
        server.run();
        for (auto &[cid, reason] : server.take_closed()) {
          std::string streams, cursor, subscriber, state;
          if (hub.engine().describe(cid, &streams, &cursor, &subscriber, &state))
            shmem::record_diagnostic(worker_index, cid, reason == "overflow" ? "evicted" : "closed",
                                     streams.c_str(),
                                     ("reason=" + reason + " cursor=" + cursor).c_str());
          hub.closed(cid);
        }
        std::vector<http::Request> pending = server.take_pending(accepts.allowance(now_us));
        accepts.took(pending.size());
        if (pending.empty())
          break;
        // Producers wake this worker for a newly watched stream from now on;
        // one more round drains what they committed before they could know.
        pg::call([] { SetLatch(MyLatch); });
        // Every stream is brought up to date (one full round) before the
        // first subscription of the batch that opens; refusals need none.
        hub.new_batch();
        for (const http::Request &r : pending) {
          try {
            hub.subscribe(r);
          } catch (const pg::Error &e) {
            server.retry_later(r.conn_id, std::string("stream unavailable: ") + e.what() + "\n");
            shmem::record_diagnostic(worker_index, r.conn_id, "failed",
                                     r.streams.empty() ? "" : r.streams[0].c_str(), e.what());
          }
        }
      }
      const int64 run_end_us = (int64)GetCurrentTimestamp();
      const int64 took_us = run_end_us - now_us;
      next_run_us = took_us > 1000 ? run_end_us + std::min<int64>(took_us, 20000) : 0;
      replays_pending = hub.engine().paging_pending();
      hub.engine().track_written();
      int64 now_flush_ms = (int64)(GetCurrentTimestamp() / 1000);
      if (!standby && now_flush_ms - last_flush_ms >= settings::intervals(cfg).cursor_flush_ms) {
        hub.engine().flush_cursors();
        hub.engine().flush_history();
        last_flush_ms = now_flush_ms;
      }
      if (now_flush_ms - last_probe_ms >= (database_ok ? 5000 : 1000)) { // recovers fast
        last_probe_ms = now_flush_ms;
        database_ok = hub.probe();
      }
      if (worker_index == 0 && !standby &&
          now_flush_ms - last_retention_ms >= settings::intervals(cfg).retention_ms) {
        last_retention_ms = now_flush_ms;
        hub.engine().apply_retention();
        if (cfg.stats_enabled) // no history kept, none to prune
          hub.prune_history();
      }
      publish_stats(hub, server);
      int64 now_ms = (int64)(GetCurrentTimestamp() / 1000);
      // The rows of the connections that came, went or changed, at once (then
      // presence watchers on every worker are told); every row refreshed every
      // 500 ms a slice per turn (worker/conn_rows.hpp).
      if (conn_rows.update(hub, server))
        shmem::presence_changed(worker_index);
      if (now_ms - last_snapshot_ms >= 500 && !conn_rows.passing()) {
        last_snapshot_ms = now_ms;
        conn_rows.start_pass();
      }
      conn_rows.step(hub, server);
      hub.presence_round();
      const size_t nconns = server.connection_count();
      peak_conns = std::max(peak_conns, nconns);
      trim_pending = peak_conns > 0 && (nconns == 0 || nconns < peak_conns - peak_conns / 10);
      if (trim_pending && now_ms - last_trim_ms >= 2000) {
#ifdef __GLIBC__
        malloc_trim(0);
#endif
        last_trim_ms = now_ms;
        peak_conns = nconns;
        trim_pending = false;
      }
    } catch (const pg::Error &e) {
      // A failed read (e.g. a queue table dropped under us) must not kill the
      // worker. One cancelled by SIGTERM is no news.
      if (!got_sigterm)
        warn_repeated("worker error: " + std::string(e.what()));
    }
  }
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
