// The figures in shared memory (shmem/figures.hpp).
#include "shmem/figures.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

// clang-format off: miscadmin.h must come first here
extern "C" {
#include "miscadmin.h"
#include "datatype/timestamp.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
}
// clang-format on

namespace pgbs::shmem {

// ---- latency windows ----

static void record_latency(LatencyWindows *w, int64 now_us, int64 latency_us) {
  int64 win = now_us / 10000000;
  int idx = (int)(win % kLatencyWindows);
  int bucket = 0;
  for (int64 v = Max(latency_us, (int64)1); v > 1 && bucket < kLatencyBuckets - 1; v >>= 1)
    bucket++;
  SpinLockAcquire(&w->mutex);
  if (w->window_start[idx] != win) {
    w->window_start[idx] = win;
    memset(w->counts[idx], 0, sizeof(w->counts[idx]));
  }
  w->counts[idx][bucket]++;
  w->total[bucket]++;
  SpinLockRelease(&w->mutex);
}

static void latency_buckets(LatencyWindows *w, int64 now_us, uint64 *out) {
  int64 win = now_us / 10000000;
  memset(out, 0, sizeof(uint64) * kLatencyBuckets);
  SpinLockAcquire(&w->mutex);
  for (int i = 0; i < kLatencyWindows; i++)
    if (w->window_start[i] > win - kLatencyWindows)
      for (int b = 0; b < kLatencyBuckets; b++)
        out[b] += w->counts[i][b];
  SpinLockRelease(&w->mutex);
}

static void latency_totals(LatencyWindows *w, uint64 *out) {
  SpinLockAcquire(&w->mutex);
  memcpy(out, w->total, sizeof(uint64) * kLatencyBuckets);
  SpinLockRelease(&w->mutex);
}

static bool latency_percentiles(LatencyWindows *w, int64 now_us, double *p50_ms, double *p99_ms) {
  uint64 sum[kLatencyBuckets];
  uint64 total = 0;
  latency_buckets(w, now_us, sum);
  for (int b = 0; b < kLatencyBuckets; b++)
    total += sum[b];
  if (total == 0)
    return false;
  // A bucket b holds [2^b, 2^(b+1)) us; report its upper bound.
  auto at = [&](double q) {
    uint64 want = (uint64)(q * (double)total + 0.5), seen = 0;
    if (want == 0)
      want = 1;
    for (int b = 0; b < kLatencyBuckets; b++) {
      seen += sum[b];
      if (seen >= want)
        return (double)(1ULL << (b + 1)) / 1000.0;
    }
    return (double)(1ULL << kLatencyBuckets) / 1000.0;
  };
  *p50_ms = at(0.50);
  *p99_ms = at(0.99);
  return true;
}

// ---- per stream ----

void add_stream_figures(StreamEntry *e, const StreamAdds &d, int64 now_us) {
  StreamStats *ss = &e->stats;
  if (d.queued)
    pg_atomic_fetch_add_u64(&ss->queued, d.queued);
  if (d.overflow_dropped)
    pg_atomic_fetch_add_u64(&ss->overflow_dropped, d.overflow_dropped);
  if (d.bytes_queued)
    pg_atomic_fetch_add_u64(&ss->bytes_queued, d.bytes_queued);
  if (d.failed)
    pg_atomic_fetch_add_u64(&ss->failed, d.failed);
  if (d.latency_us >= 0)
    record_latency(&ss->latency, now_us, d.latency_us);
}

void add_subscribers(StreamEntry *e, int delta) {
  if (delta > 0)
    pg_atomic_fetch_add_u64(&e->stats.subscribers, (uint64)delta);
  else
    pg_atomic_fetch_sub_u64(&e->stats.subscribers, (uint64)-delta);
}

void add_retention_removed(StreamEntry *e, uint64 rows) {
  pg_atomic_fetch_add_u64(&e->stats.retention_removed, rows);
}

void raise_stream_horizon(StreamEntry *e, int64 horizon) {
  uint64 cur = pg_atomic_read_u64(&e->stats.horizon);
  while ((int64)cur < horizon &&
         !pg_atomic_compare_exchange_u64(&e->stats.horizon, &cur, (uint64)horizon)) {
  }
}

void read_stream_figures(StreamEntry *e, int64 now_us, StreamFigures *out) {
  StreamStats *st = &e->stats;
  out->stream_id = e->stream_id;
  out->subscribers = (int64)pg_atomic_read_u64(&st->subscribers);
  out->events = (int64)pg_atomic_read_u64(&e->events);
  out->queued = (int64)pg_atomic_read_u64(&st->queued);
  out->overflow_dropped = (int64)pg_atomic_read_u64(&st->overflow_dropped);
  out->failed = (int64)pg_atomic_read_u64(&st->failed);
  out->bytes_queued = (int64)pg_atomic_read_u64(&st->bytes_queued);
  out->max_committed = (int64)pg_atomic_read_u64(&e->max_committed);
  out->retention_removed = (int64)pg_atomic_read_u64(&st->retention_removed);
  out->horizon = (int64)pg_atomic_read_u64(&st->horizon);
  out->has_latency =
      latency_percentiles(&st->latency, now_us, &out->latency_p50_ms, &out->latency_p99_ms);
  latency_totals(&st->latency, out->latency_totals);
}

int stream_places() { return shared()->max_streams; }

bool stream_figures_at(int place, Oid dboid, int64 now_us, StreamFigures *out) {
  StreamEntry *e = &shared()->streams[place];
  if (e->stream_id == 0 || e->dboid != dboid)
    return false;
  read_stream_figures(e, now_us, out);
  return true;
}

// ---- per worker ----

void publish_worker_figures(int w, const WorkerFigures &f) {
  WorkerStats *ws = &shared()->worker_stats[w];
  pg_atomic_write_u64(&ws->connections, f.connections);
  pg_atomic_write_u64(&ws->queued, f.queued);
  pg_atomic_write_u64(&ws->overflow_dropped, f.overflow_dropped);
  pg_atomic_write_u64(&ws->catch_ups, f.catch_ups);
  pg_atomic_write_u64(&ws->events_read, f.events_read);
  pg_atomic_write_u64(&ws->held_back, f.held_back);
}

bool read_worker_figures(int w, Oid dboid, WorkerRow *out) {
  Shared *s = shared();
  const uint32 pid = pg_atomic_read_u32(&s->worker_pid[w]);
  if (pid == 0)
    return false;
  WorkerStats *ws = &s->worker_stats[w];
  out->pid = (int)pid;
  out->figures.connections = pg_atomic_read_u64(&ws->connections);
  out->figures.queued = pg_atomic_read_u64(&ws->queued);
  out->figures.overflow_dropped = pg_atomic_read_u64(&ws->overflow_dropped);
  out->figures.catch_ups = pg_atomic_read_u64(&ws->catch_ups);
  out->figures.events_read = pg_atomic_read_u64(&ws->events_read);
  out->figures.held_back = pg_atomic_read_u64(&ws->held_back);
  out->streams_held = 0;
  for (int k = 0; k < s->max_streams; k++)
    if (s->streams[k].dboid == dboid && held_by_worker(&s->streams[k], w))
      out->streams_held++;
  return true;
}

int64 node_connections() {
  Shared *s = shared();
  int64 n = 0;
  for (int i = 0; i < kMaxWorkers; i++)
    if (pg_atomic_read_u32(&s->worker_pid[i]) != 0)
      n += (int64)pg_atomic_read_u64(&s->worker_stats[i].connections);
  return n;
}

// ---- diagnostics ----

static void copy_field(char *dst, size_t cap, const char *src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n)
    memcpy(dst, src, n);
  dst[n] = '\0';
}

void record_diagnostic(int worker, uint64 conn_id, const char *event, const char *stream,
                       const char *detail) {
  Diagnostics *d = &shared()->diagnostics;
  if (d->capacity <= 0)
    return;
  DiagEntry e;
  e.at_us = (int64)GetCurrentTimestamp() +
            (int64)(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
  e.worker = worker;
  e.conn_id = conn_id;
  copy_field(e.event, sizeof(e.event), event);
  copy_field(e.stream, sizeof(e.stream), stream);
  copy_field(e.detail, sizeof(e.detail), detail);
  LWLockAcquire(d->lock, LW_EXCLUSIVE);
  d->items[d->next % (uint64)d->capacity] = e;
  d->next++;
  LWLockRelease(d->lock);
}

DiagEntry *copy_diagnostics(uint64 *n, uint64 *first_kept) {
  Diagnostics *d = &shared()->diagnostics;
  if (d->capacity <= 0)
    return nullptr;
  // An entry overwritten while the slices are copied is left out.
  const uint64 cap = (uint64)d->capacity;
  LWLockAcquire(d->lock, LW_SHARED);
  uint64 next = d->next;
  LWLockRelease(d->lock);
  uint64 first = next > cap ? next - cap : 0;
  DiagEntry *copy = (DiagEntry *)palloc(sizeof(DiagEntry) * (next - first + 1));
  constexpr uint64 kSlice = 256;
  for (uint64 i = first; i < next; i += kSlice) {
    const uint64 k_n = Min(kSlice, next - i);
    LWLockAcquire(d->lock, LW_SHARED);
    for (uint64 k = 0; k < k_n; k++)
      copy[i - first + k] = d->items[(i + k) % cap];
    LWLockRelease(d->lock);
  }
  LWLockAcquire(d->lock, LW_SHARED);
  const uint64 end = d->next; // entries below end - cap may have been overwritten
  LWLockRelease(d->lock);
  const uint64 start = Min(next, Max(first, end > cap ? end - cap : 0));
  if (start > first)
    memmove(copy, copy + (start - first), sizeof(DiagEntry) * (next - start));
  *n = next - start;
  *first_kept = start;
  return copy;
}

} // namespace pgbs::shmem
