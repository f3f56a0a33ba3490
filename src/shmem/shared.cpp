// Shared memory layout and the stream-entry table.
#include "shmem/shared.hpp"

// clang-format off: miscadmin.h must come first here
extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "access/twophase.h"
#include "datatype/timestamp.h"
#include "utils/timestamp.h"
}
// clang-format on

#include "pgbus_stream.hpp"

namespace pgbs::shmem {

static Shared *g_shared = nullptr;

static int slot_count() { return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts; }

// connections() rows per worker: its share of max_connections at start.
static int conns_per_worker() {
  return (guc::max_connections + guc::workers - 1) / guc::workers + 16;
}

static void init_stream_stats(StreamStats *st) {
  pg_atomic_init_u64(&st->subscribers, 0);
  pg_atomic_init_u64(&st->delivered, 0);
  pg_atomic_init_u64(&st->overflow_dropped, 0);
  pg_atomic_init_u64(&st->failed, 0);
  pg_atomic_init_u64(&st->bytes_queued, 0);
  pg_atomic_init_u64(&st->retention_dropped, 0);
  pg_atomic_init_u64(&st->horizon, 0);
  SpinLockInit(&st->latency.mutex);
  memset(st->latency.window_start, 0, sizeof(st->latency.window_start));
  memset(st->latency.counts, 0, sizeof(st->latency.counts));
  memset(st->latency.total, 0, sizeof(st->latency.total));
}

static Size ring_bytes() { return (Size)guc::ring_size_kb * 1024; }

Size shmem_size() {
  Size sz = MAXALIGN(sizeof(Shared));
  sz = add_size(sz, MAXALIGN(mul_size(guc::max_streams, sizeof(StreamEntry))));
  sz = add_size(sz, MAXALIGN(mul_size(slot_count(), sizeof(BackendSlot))));
  sz = add_size(sz, MAXALIGN(mul_size((slot_count() + 63) / 64, sizeof(pg_atomic_uint64))));
  sz = add_size(
      sz, MAXALIGN(mul_size(mul_size(guc::workers, conns_per_worker()), sizeof(ConnSnapshot))));
  sz = add_size(sz, MAXALIGN(mul_size(guc::diagnostics_size, sizeof(DiagEntry))));
  sz = add_size(sz, ring_bytes());
  return sz;
}

void shmem_request() {
  RequestAddinShmemSpace(shmem_size());
  RequestNamedLWLockTranche("pgbus_stream", 2 + kMaxWorkers);
}

void shmem_startup() {
  bool found;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  g_shared = (Shared *)ShmemInitStruct("pgbus_stream", shmem_size(), &found);
  char *p = (char *)g_shared + MAXALIGN(sizeof(Shared));
  Shared *s = g_shared;
  if (!found) {
    memset(s, 0, sizeof(Shared));
    LWLockPadded *locks = GetNamedLWLockTranche("pgbus_stream");
    s->ring_lock = &locks[0].lock;
    s->streams_lock = &locks[1].lock;
    s->ring_capacity = ring_bytes();
    s->max_streams = guc::max_streams;
    s->nslots = slot_count();
    pg_atomic_init_u64(&s->ring_head, 0);
    pg_atomic_init_u64(&s->overrun_seq, 0);
    pg_atomic_init_u64(&s->catalog_version, 1);
    pg_atomic_init_u64(&s->ring_overflows, 0);
    for (int i = 0; i < kMaxWorkers; i++) {
      pg_atomic_init_u32(&s->worker_pid[i], 0);
      pg_atomic_init_u64(&s->worker_ring_pos[i], 0);
      WorkerStats *ws = &s->worker_stats[i];
      pg_atomic_init_u64(&ws->connections, 0);
      pg_atomic_init_u64(&ws->delivered, 0);
      pg_atomic_init_u64(&ws->dropped, 0);
      pg_atomic_init_u64(&ws->overruns, 0);
      pg_atomic_init_u64(&ws->events_read, 0);
      pg_atomic_init_u64(&ws->held_back, 0);
    }
  }
  s->streams = (StreamEntry *)p;
  p += MAXALIGN(mul_size(s->max_streams, sizeof(StreamEntry)));
  s->slots = (BackendSlot *)p;
  p += MAXALIGN(mul_size(s->nslots, sizeof(BackendSlot)));
  s->active_slots = (pg_atomic_uint64 *)p;
  p += MAXALIGN(mul_size((s->nslots + 63) / 64, sizeof(pg_atomic_uint64)));
  if (!found)
    for (int i = 0; i < (s->nslots + 63) / 64; i++)
      pg_atomic_init_u64(&s->active_slots[i], 0);
  for (int w = 0; w < kMaxWorkers; w++) {
    WorkerConns *wc = &s->worker_conns[w];
    if (!found) {
      wc->lock = &GetNamedLWLockTranche("pgbus_stream")[2 + w].lock;
      wc->count = 0;
      wc->capacity = w < guc::workers ? conns_per_worker() : 0;
    }
    wc->items = (ConnSnapshot *)p;
    p += wc->capacity * sizeof(ConnSnapshot);
  }
  p = (char *)MAXALIGN(p);
  if (!found) {
    SpinLockInit(&s->diagnostics.mutex);
    s->diagnostics.next = 0;
    s->diagnostics.capacity = guc::diagnostics_size;
  }
  s->diagnostics.items = (DiagEntry *)p;
  p += MAXALIGN(mul_size(s->diagnostics.capacity, sizeof(DiagEntry)));
  s->ring = p;
  if (!found) {
    for (int i = 0; i < s->max_streams; i++) {
      s->streams[i].dboid = InvalidOid;
      s->streams[i].stream_id = 0;
      pg_atomic_init_u64(&s->streams[i].max_committed, 0);
      pg_atomic_init_u64(&s->streams[i].events, 0);
      pg_atomic_init_u32(&s->streams[i].subscriber_workers, 0);
      pg_atomic_init_u64(&s->streams[i].ephemeral_seq, 0);
      init_stream_stats(&s->streams[i].stats);
    }
    for (int i = 0; i < s->nslots; i++) {
      s->slots[i].dboid = InvalidOid;
      pg_atomic_init_u32(&s->slots[i].gen, 0);
      pg_atomic_init_u32(&s->slots[i].count, 0);
      pg_atomic_init_u32(&s->slots[i].wildcard, 0);
    }
  }
  LWLockRelease(AddinShmemInitLock);
}

Shared *shared() { return g_shared; }

static uint32 stream_hash(Oid dboid, int64 id) {
  uint64 h = ((uint64)dboid * 0x9E3779B97F4A7C15ULL) ^ ((uint64)id * 0xC2B2AE3D27D4EB4FULL);
  return (uint32)(h ^ (h >> 29));
}

static StreamEntry *probe(Oid dboid, int64 stream_id, StreamEntry **free_out) {
  Shared *s = g_shared;
  uint32 n = (uint32)s->max_streams;
  uint32 start = stream_hash(dboid, stream_id) % n;
  for (uint32 k = 0; k < n; k++) {
    StreamEntry *e = &s->streams[(start + k) % n];
    if (e->stream_id == 0) {
      if (free_out)
        *free_out = e;
      return nullptr; // entries are never freed, so an empty one ends the chain
    }
    if (e->stream_id == stream_id && e->dboid == dboid)
      return e;
  }
  if (free_out)
    *free_out = nullptr;
  return nullptr;
}

StreamEntry *stream_entry(Oid dboid, int64 stream_id, bool create) {
  Shared *s = g_shared;
  LWLockAcquire(s->streams_lock, LW_SHARED);
  StreamEntry *e = probe(dboid, stream_id, nullptr);
  LWLockRelease(s->streams_lock);
  if (e || !create)
    return e;
  StreamEntry *slot = nullptr;
  LWLockAcquire(s->streams_lock, LW_EXCLUSIVE);
  e = probe(dboid, stream_id, &slot);
  if (!e && slot) {
    slot->dboid = dboid;
    pg_atomic_write_u64(&slot->max_committed, 0);
    pg_atomic_write_u64(&slot->events, 0);
    pg_atomic_write_u32(&slot->subscriber_workers, 0);
    pg_atomic_write_u64(&slot->ephemeral_seq, 0);
    init_stream_stats(&slot->stats);
    pg_write_barrier();
    slot->stream_id = stream_id;
    e = slot;
  }
  LWLockRelease(s->streams_lock);
  return e;
}

void clear_subscriber_bits(int w) {
  Shared *s = g_shared;
  for (int i = 0; i < s->max_streams; i++)
    pg_atomic_fetch_and_u32(&s->streams[i].subscriber_workers, ~(1u << w));
}

void advance_max_committed(StreamEntry *e, int64 id) {
  uint64 cur = pg_atomic_read_u64(&e->max_committed);
  while ((int64)cur < id) {
    if (pg_atomic_compare_exchange_u64(&e->max_committed, &cur, (uint64)id))
      break;
  }
}

static void copy_field(char *dst, size_t cap, const char *src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n)
    memcpy(dst, src, n);
  dst[n] = '\0';
}

void record_diagnostic(int worker, uint64 conn_id, const char *event, const char *stream,
                       const char *detail) {
  Diagnostics *d = &g_shared->diagnostics;
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
  SpinLockAcquire(&d->mutex);
  d->items[d->next % (uint64)d->capacity] = e;
  d->next++;
  SpinLockRelease(&d->mutex);
}

void record_latency(LatencyWindows *w, int64 now_us, int64 latency_us) {
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

void latency_buckets(LatencyWindows *w, int64 now_us, uint64 *out) {
  int64 win = now_us / 10000000;
  memset(out, 0, sizeof(uint64) * kLatencyBuckets);
  SpinLockAcquire(&w->mutex);
  for (int i = 0; i < kLatencyWindows; i++)
    if (w->window_start[i] > win - kLatencyWindows)
      for (int b = 0; b < kLatencyBuckets; b++)
        out[b] += w->counts[i][b];
  SpinLockRelease(&w->mutex);
}

void latency_totals(LatencyWindows *w, uint64 *out) {
  SpinLockAcquire(&w->mutex);
  memcpy(out, w->total, sizeof(uint64) * kLatencyBuckets);
  SpinLockRelease(&w->mutex);
}

bool latency_percentiles(LatencyWindows *w, int64 now_us, double *p50_ms, double *p99_ms) {
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

} // namespace pgbs::shmem
