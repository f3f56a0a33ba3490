// Open files of a worker (worker/file_limit.hpp).
#include "worker/file_limit.hpp"

#include "http/server.hpp"
#include "settings/configs.hpp"

#include <climits>
#include <dirent.h>
#include <sys/resource.h>

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
#include "storage/fd.h"
}

namespace pgbs::worker {
namespace {

// Open files: the soft limit is raised to the hard one (a service started by
// systemd gets 1 024 soft), PostgreSQL keeps what fd.c counted on for its own
// files (max_safe_fds, plus the few it keeps for system() and friends), and
// the rest goes to sockets. When the limit is low, PostgreSQL's share is cut
// to half of it (fd.c then closes its cached files sooner) so that the
// listener still gets the other half. Computed once, at start.
constexpr int kFdsForSystem = 10;   // fd.c's NUM_RESERVED_FDS
constexpr int kFdsForListener = 16; // listening sockets, epoll and eventfd of each daemon

int open_fd_count() {
  DIR *d = opendir("/proc/self/fd");
  if (d == nullptr)
    return 64; // a guess on the high side
  int n = 0;
  while (readdir(d) != nullptr)
    n++;
  closedir(d);
  return n > 3 ? n - 3 : 0; // ".", ".." and the directory's own fd
}

} // namespace

int plan_file_limit(int worker_index) {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  const rlim_t soft_before = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
      rl = raised;
  }
  const long limit = (long)Min(rl.rlim_cur, (rlim_t)INT_MAX);
  const long open_now = open_fd_count();
  const long pg_share = Min((long)max_safe_fds, (limit - open_now) / 2);
  if (pg_share < max_safe_fds)
    max_safe_fds = (int)Max(pg_share, 1L);
  const int max_sockets =
      (int)Max(limit - open_now - pg_share - kFdsForSystem - kFdsForListener, 1L);
  // Any worker may hold all of the node's connections; the node reaches
  // max_connections when each can hold its share of it.
  const settings::Settings &cfg = settings::current();
  const long share = (cfg.max_connections + cfg.workers - 1) / cfg.workers;
  const size_t holds = http::sse_capacity([&] {
    http::Config c;
    c.max_connections = cfg.max_connections;
    c.max_sockets = max_sockets;
    return c;
  }());
  HOLD_INTERRUPTS(); // as in pg::log: nothing acted on from this C++ frame
  if ((long)holds < share)
    ereport(LOG, (errmsg("pgbus_stream: worker %d can hold %zu SSE connections of the %ld "
                         "max_connections gives it: its open files limit is %ld",
                         worker_index, holds, share, limit),
                  errhint("Raise the open files limit of the PostgreSQL service and restart it: "
                          "LimitNOFILE= in the [Service] section of its systemd unit "
                          "(systemctl edit postgresql@15-main), or ulimit -n where it is started "
                          "by hand. Clients beyond the limit get 503 with Retry-After.")));
  else
    ereport(LOG, (errmsg("pgbus_stream: worker %d open files limit %ld (soft limit was %ld): room "
                         "for %zu SSE connections",
                         worker_index, limit, (long)Min(soft_before, (rlim_t)LONG_MAX), holds)));
  RESUME_INTERRUPTS();
  return max_sockets;
}

} // namespace pgbs::worker
