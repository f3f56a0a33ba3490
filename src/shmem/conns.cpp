// The workers' processes and connection rows (shmem/conns.hpp).
#include "shmem/conns.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

extern "C" {
#include "storage/lwlock.h"
#include "utils/palloc.h"
}

namespace pgbs::shmem {

void worker_attach(int w, Latch *latch, int pid) {
  Shared *s = shared();
  s->worker_latch[w] = latch;
  pg_atomic_write_u32(&s->worker_pid[w], (uint32)pid);
  reset_connection_places(w); // left by a previous process
}

void worker_detach(int w) {
  Shared *s = shared();
  s->worker_latch[w] = nullptr;
  pg_atomic_write_u32(&s->worker_pid[w], 0);
  reset_connection_places(w); // its sockets close with the process
  WorkerConns *wc = &s->worker_conns[w];
  LWLockAcquire(wc->lock, LW_EXCLUSIVE);
  wc->count = 0;
  LWLockRelease(wc->lock);
  // Its connections are gone: the other workers' presence watchers see them leave.
  pg_atomic_fetch_and_u32(&s->presence_workers, ~(1u << w));
  presence_changed(w);
}

bool worker_running(int w) { return pg_atomic_read_u32(&shared()->worker_pid[w]) != 0; }

int conn_rows_capacity(int w) { return shared()->worker_conns[w].capacity; }

void set_conn_rows(int w, const ConnSnapshot *rows, int n) {
  WorkerConns *wc = &shared()->worker_conns[w];
  LWLockAcquire(wc->lock, LW_EXCLUSIVE);
  if (n > 0)
    memcpy(wc->items, rows, (size_t)n * sizeof(ConnSnapshot));
  wc->count = n;
  LWLockRelease(wc->lock);
}

void put_conn_rows(int w, int at, const ConnSnapshot *rows, int n) {
  WorkerConns *wc = &shared()->worker_conns[w];
  LWLockAcquire(wc->lock, LW_EXCLUSIVE);
  memcpy(&wc->items[at], rows, (size_t)n * sizeof(ConnSnapshot));
  LWLockRelease(wc->lock);
}

void move_conn_rows(int w, const ConnRowMove *moves, size_t nmoves, const ConnSnapshot *staged,
                    int count) {
  WorkerConns *wc = &shared()->worker_conns[w];
  LWLockAcquire(wc->lock, LW_EXCLUSIVE);
  for (size_t i = 0; i < nmoves; i++) {
    const ConnRowMove &m = moves[i];
    memcpy(&wc->items[m.to], m.from >= 0 ? &wc->items[m.from] : &staged[m.staged_at],
           sizeof(ConnSnapshot));
  }
  wc->count = count;
  LWLockRelease(wc->lock);
}

ConnSnapshot own_conn_row(int w, int i) { return shared()->worker_conns[w].items[i]; }

void visit_conn_rows(int w, bool (*fn)(const ConnSnapshot &, void *), void *arg) {
  WorkerConns *wc = &shared()->worker_conns[w];
  if (wc->capacity == 0)
    return;
  LWLockAcquire(wc->lock, LW_SHARED);
  for (int i = 0; i < wc->count; i++)
    if (!fn(wc->items[i], arg))
      break;
  LWLockRelease(wc->lock);
}

ConnSnapshot *copy_conn_rows(int w, int *n) {
  WorkerConns *wc = &shared()->worker_conns[w];
  *n = 0;
  if (wc->capacity == 0)
    return nullptr;
  LWLockAcquire(wc->lock, LW_SHARED);
  *n = wc->count;
  ConnSnapshot *copy = (ConnSnapshot *)palloc(sizeof(ConnSnapshot) * (*n + 1));
  memcpy(copy, wc->items, sizeof(ConnSnapshot) * *n);
  LWLockRelease(wc->lock);
  return copy;
}

void presence_changed(int w) {
  Shared *s = shared();
  pg_atomic_fetch_add_u64(&s->presence_gen, 1); // full barrier: after the rows, before the latches
  const uint32 watchers = pg_atomic_read_u32(&s->presence_workers);
  for (int i = 0; i < kMaxWorkers; i++) {
    Latch *l = s->worker_latch[i];
    if (i != w && (watchers & (1u << i)) != 0 && l != nullptr)
      SetLatch(l);
  }
}

void watch_presence(int w, bool on) {
  if (on)
    pg_atomic_fetch_or_u32(&shared()->presence_workers, 1u << w);
  else
    pg_atomic_fetch_and_u32(&shared()->presence_workers, ~(1u << w));
}

uint64 presence_generation() { return pg_atomic_read_u64(&shared()->presence_gen); }

} // namespace pgbs::shmem
