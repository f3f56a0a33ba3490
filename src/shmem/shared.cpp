// Shared memory: its start, the stream-entry table and the operations on
// entries (shmem/shared.hpp).
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

// clang-format off: miscadmin.h must come first here
extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "access/twophase.h"
#include "datatype/timestamp.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
}
// clang-format on

namespace pgbs::shmem {

static Shared *g_shared = nullptr;

// The stream index: (database, stream id) -> position in Shared::streams.
// Readers hold streams_lock shared, writers exclusive. The key is compared
// as bytes, so its padding is zeroed.
struct StreamKey {
  Oid dboid;
  uint32 pad;
  int64 stream_id;
};
struct IndexEntry {
  StreamKey key;
  int32 pos;
};
static HTAB *g_index = nullptr;

// Named LWLocks: ring, streams, diagnostics, then one per worker (connections()).
constexpr int kLockRing = 0, kLockStreams = 1, kLockDiagnostics = 2, kLockWorkerConns = 3;

static int slot_count() { return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts; }

// The sizes, taken once in the postmaster's shmem_request (its children
// inherit them). max_connections can be reloaded, and the size of shared
// memory must not move with it: a crash restart re-creates shared memory in
// the space requested at start. connections() rows per worker:
// max_connections when the server started (one worker may hold all of the
// node's connections).
static Sizes g_sizes;
static int conns_per_worker() { return g_sizes.max_connections + 16; }

static void init_stream_stats(StreamStats *st) {
  pg_atomic_init_u64(&st->subscribers, 0);
  pg_atomic_init_u64(&st->queued, 0);
  pg_atomic_init_u64(&st->overflow_dropped, 0);
  pg_atomic_init_u64(&st->failed, 0);
  pg_atomic_init_u64(&st->bytes_queued, 0);
  pg_atomic_init_u64(&st->retention_removed, 0);
  pg_atomic_init_u64(&st->horizon, 0);
  SpinLockInit(&st->latency.mutex);
  memset(st->latency.window_start, 0, sizeof(st->latency.window_start));
  memset(st->latency.counts, 0, sizeof(st->latency.counts));
  memset(st->latency.total, 0, sizeof(st->latency.total));
}

static Size ring_bytes() { return (Size)g_sizes.ring_bytes; }

Size shmem_size() {
  Size sz = MAXALIGN(sizeof(Shared));
  sz = add_size(sz, MAXALIGN(mul_size(g_sizes.max_streams, sizeof(StreamEntry))));
  sz = add_size(sz, hash_estimate_size(g_sizes.max_streams, sizeof(IndexEntry)));
  sz = add_size(sz, MAXALIGN(mul_size(slot_count(), sizeof(BackendSlot))));
  sz = add_size(sz, MAXALIGN(mul_size((slot_count() + 63) / 64, sizeof(pg_atomic_uint64))));
  sz = add_size(
      sz, MAXALIGN(mul_size(mul_size(g_sizes.workers, conns_per_worker()), sizeof(ConnSnapshot))));
  sz = add_size(sz, MAXALIGN(mul_size(g_sizes.diagnostics_size, sizeof(DiagEntry))));
  sz = add_size(sz, ring_bytes());
  return sz;
}

void shmem_request(const Sizes &sizes) {
  g_sizes = sizes;
  RequestAddinShmemSpace(shmem_size());
  RequestNamedLWLockTranche("pgbus_stream", kLockWorkerConns + kMaxWorkers);
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
    s->ring_lock = &locks[kLockRing].lock;
    s->streams_lock = &locks[kLockStreams].lock;
    s->ring_capacity = ring_bytes();
    s->max_streams = g_sizes.max_streams;
    s->nslots = slot_count();
    pg_atomic_init_u64(&s->ring_head, 0);
    pg_atomic_init_u64(&s->overrun_seq, 0);
    pg_atomic_init_u64(&s->catalog_version, 1);
    pg_atomic_init_u64(&s->ring_overflows, 0);
    pg_atomic_init_u32(&s->sse_total, 0);
    pg_atomic_init_u32(&s->streams_held, 0);
    pg_atomic_init_u32(&s->streams_short, 0);
    pg_atomic_init_u32(&s->ephemeral_forgotten, 0);
    pg_atomic_init_u64(&s->presence_gen, 0);
    pg_atomic_init_u32(&s->presence_workers, 0);
    for (int i = 0; i < kMaxWorkers; i++) {
      pg_atomic_init_u32(&s->worker_pid[i], 0);
      pg_atomic_init_u32(&s->sse_held[i], 0);
      pg_atomic_init_u64(&s->worker_ring_pos[i], 0);
      pg_atomic_init_u32(&s->worker_polling[i], 0);
      WorkerStats *ws = &s->worker_stats[i];
      pg_atomic_init_u64(&ws->connections, 0);
      pg_atomic_init_u64(&ws->queued, 0);
      pg_atomic_init_u64(&ws->overflow_dropped, 0);
      pg_atomic_init_u64(&ws->catch_ups, 0);
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
      wc->lock = &GetNamedLWLockTranche("pgbus_stream")[kLockWorkerConns + w].lock;
      wc->count = 0;
      wc->capacity = w < g_sizes.workers ? conns_per_worker() : 0;
    }
    wc->items = (ConnSnapshot *)p;
    p += wc->capacity * sizeof(ConnSnapshot);
  }
  p = (char *)MAXALIGN(p);
  if (!found) {
    s->diagnostics.lock = &GetNamedLWLockTranche("pgbus_stream")[kLockDiagnostics].lock;
    s->diagnostics.next = 0;
    s->diagnostics.capacity = g_sizes.diagnostics_size;
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
      pg_atomic_init_u32(&s->streams[i].wake_workers, 0);
      pg_atomic_init_u64(&s->streams[i].holds, 0);
      pg_atomic_init_u64(&s->streams[i].ephemeral_seq, 0);
      pg_atomic_init_u32(&s->streams[i].hold_active, 0);
      SpinLockInit(&s->streams[i].hold_lock);
      init_stream_stats(&s->streams[i].stats);
    }
    for (int i = 0; i < s->nslots; i++) {
      s->slots[i].dboid = InvalidOid;
      pg_atomic_init_u32(&s->slots[i].gen, 0);
      pg_atomic_init_u32(&s->slots[i].count, 0);
      pg_atomic_init_u32(&s->slots[i].wildcard, 0);
    }
  }
  HASHCTL info;
  memset(&info, 0, sizeof(info));
  info.keysize = sizeof(StreamKey);
  info.entrysize = sizeof(IndexEntry);
  g_index = ShmemInitHash("pgbus_stream streams", s->max_streams, s->max_streams, &info,
                          HASH_ELEM | HASH_BLOBS);
  LWLockRelease(AddinShmemInitLock);
}

Shared *shared() { return g_shared; }

static StreamKey key_of(Oid dboid, int64 stream_id) {
  StreamKey k;
  memset(&k, 0, sizeof(k));
  k.dboid = dboid;
  k.stream_id = stream_id;
  return k;
}

constexpr uint64 kBackendHold = UINT64CONST(1) << 32;
static uint64 worker_bit(int w) { return UINT64CONST(1) << w; }

static bool held(StreamEntry *e) { return pg_atomic_read_u64(&e->holds) != 0; }

// `before` and `after` are the hold word around one atomic change: the
// count of held entries moves exactly when the word leaves or reaches 0.
static void count_holds(uint64 before, uint64 after) {
  if (before == 0 && after != 0)
    pg_atomic_fetch_add_u32(&g_shared->streams_held, 1);
  else if (before != 0 && after == 0)
    pg_atomic_fetch_sub_u32(&g_shared->streams_held, 1);
}

static void hold(StreamEntry *e, int holder) {
  if (holder == kBackend) {
    const uint64 before = pg_atomic_fetch_add_u64(&e->holds, kBackendHold);
    count_holds(before, before + kBackendHold);
  } else {
    const uint64 before = pg_atomic_fetch_or_u64(&e->holds, worker_bit(holder));
    count_holds(before, before | worker_bit(holder));
  }
}

static void unhold_worker(StreamEntry *e, int w) {
  const uint64 before = pg_atomic_fetch_and_u64(&e->holds, ~worker_bit(w));
  count_holds(before, before & ~worker_bit(w));
}

// The entry of key under streams_lock (either mode), or nullptr.
static StreamEntry *find_locked(const StreamKey &k) {
  IndexEntry *ie = (IndexEntry *)hash_search(g_index, &k, HASH_FIND, nullptr);
  return ie ? &g_shared->streams[ie->pos] : nullptr;
}

// A place for a new entry, under streams_lock exclusive: a never-used one,
// else the next unheld one after the sweep hand (its old key leaves the
// index), else nullptr. Entries that counted ephemeral broadcasts go last:
// their count is what tells a worker started later that it missed some.
// Holds only change under the shared lock or by release, so an entry seen
// unheld here stays unheld.
static StreamEntry *free_place() {
  Shared *s = g_shared;
  if (s->streams_used < s->max_streams)
    return &s->streams[s->streams_used++];
  StreamEntry *e = nullptr, *fallback = nullptr;
  for (int k = 0; k < s->max_streams && e == nullptr; k++) {
    StreamEntry *c = &s->streams[s->sweep_hand];
    s->sweep_hand = (s->sweep_hand + 1) % s->max_streams;
    if (held(c))
      continue;
    if (pg_atomic_read_u64(&c->ephemeral_seq) == 0)
      e = c;
    else if (fallback == nullptr)
      fallback = c;
  }
  if (e == nullptr && (e = fallback) != nullptr)
    pg_atomic_write_u32(&s->ephemeral_forgotten, 1);
  if (e != nullptr) {
    StreamKey old = key_of(e->dboid, e->stream_id);
    (void)hash_search(g_index, &old, HASH_REMOVE, nullptr);
  }
  return e;
}

StreamEntry *acquire_stream(Oid dboid, int64 stream_id, int holder) {
  Shared *s = g_shared;
  const StreamKey k = key_of(dboid, stream_id);
  LWLockAcquire(s->streams_lock, LW_SHARED);
  StreamEntry *e = find_locked(k);
  if (e)
    hold(e, holder); // under the shared lock: no reuse can run meanwhile
  LWLockRelease(s->streams_lock);
  if (e)
    return e;
  LWLockAcquire(s->streams_lock, LW_EXCLUSIVE);
  e = find_locked(k);
  if (!e && (e = free_place()) != nullptr) {
    bool found;
    // Cannot run out: the index never holds more than max_streams keys.
    IndexEntry *ie = (IndexEntry *)hash_search(g_index, &k, HASH_ENTER_NULL, &found);
    if (ie == nullptr) {
      e->stream_id = 0; // left unused and out of the index
      e = nullptr;
    } else {
      ie->pos = (int32)(e - s->streams);
      e->dboid = dboid;
      pg_atomic_write_u64(&e->max_committed, 0);
      pg_atomic_write_u64(&e->events, 0);
      pg_atomic_write_u32(&e->subscriber_workers, 0);
      pg_atomic_write_u32(&e->wake_workers, 0);
      pg_atomic_write_u64(&e->ephemeral_seq, 0);
      pg_atomic_write_u32(&e->hold_active, 0); // unheld: nobody reads it meanwhile
      init_stream_stats(&e->stats);
      pg_write_barrier();
      e->stream_id = stream_id;
    }
  }
  if (e)
    hold(e, holder);
  LWLockRelease(s->streams_lock);
  // A new entry was needed and few are left: the workers let go of the
  // streams they no longer serve (once per shortage, see streams_relieved).
  if (streams_short() && pg_atomic_exchange_u32(&s->streams_short, 1) == 0)
    for (int i = 0; i < kMaxWorkers; i++)
      if (Latch *l = s->worker_latch[i])
        SetLatch(l);
  return e;
}

uint32 streams_held() { return pg_atomic_read_u32(&g_shared->streams_held); }

bool streams_short() {
  const uint32 left =
      (uint32)g_shared->max_streams - Min(streams_held(), (uint32)g_shared->max_streams);
  return left < (uint32)Max(g_shared->max_streams / 8, 2);
}

void streams_relieved() {
  if (pg_atomic_read_u32(&g_shared->streams_short) != 0 && !streams_short())
    pg_atomic_write_u32(&g_shared->streams_short, 0);
}

bool held_by_worker(const StreamEntry *e, int w) {
  return (pg_atomic_read_u64(const_cast<pg_atomic_uint64 *>(&e->holds)) & worker_bit(w)) != 0;
}

bool read_stream(Oid dboid, int64 stream_id, void (*fn)(StreamEntry *, void *), void *arg) {
  LWLockAcquire(g_shared->streams_lock, LW_SHARED); // no reuse can run meanwhile
  StreamEntry *e = find_locked(key_of(dboid, stream_id));
  if (e)
    fn(e, arg);
  LWLockRelease(g_shared->streams_lock);
  return e != nullptr;
}

void release_stream(StreamEntry *e, int holder) {
  if (e == nullptr)
    return;
  if (holder == kBackend) {
    const uint64 before = pg_atomic_fetch_sub_u64(&e->holds, kBackendHold);
    count_holds(before, before - kBackendHold);
  } else {
    unhold_worker(e, holder);
  }
}

void raise_max_committed(Oid dboid, int64 stream_id, int64 id) {
  const StreamKey k = key_of(dboid, stream_id);
  LWLockAcquire(g_shared->streams_lock, LW_SHARED);
  if (StreamEntry *e = find_locked(k))
    advance_max_committed(e, id);
  LWLockRelease(g_shared->streams_lock);
}

void forget_stream(Oid dboid, int64 stream_id) {
  const StreamKey k = key_of(dboid, stream_id);
  LWLockAcquire(g_shared->streams_lock, LW_SHARED);
  if (StreamEntry *e = find_locked(k))
    pg_atomic_write_u64(&e->max_committed, 0);
  LWLockRelease(g_shared->streams_lock);
}

void clear_subscriber_bits(int w) {
  Shared *s = g_shared;
  pg_atomic_write_u32(&s->worker_polling[w], 0); // a previous process may have left it set
  for (int i = 0; i < s->max_streams; i++) {
    pg_atomic_fetch_and_u32(&s->streams[i].subscriber_workers, ~(1u << w));
    pg_atomic_fetch_and_u32(&s->streams[i].wake_workers, ~(1u << w));
    unhold_worker(&s->streams[i], w);
  }
}

int64 stream_id_of(const StreamEntry *e) { return e->stream_id; }

int64 committed_max(const StreamEntry *e) {
  return (int64)pg_atomic_read_u64(const_cast<pg_atomic_uint64 *>(&e->max_committed));
}

void count_events(StreamEntry *e, uint64 n) { pg_atomic_fetch_add_u64(&e->events, n); }

uint64 next_ephemeral_seq(StreamEntry *e) { return pg_atomic_add_fetch_u64(&e->ephemeral_seq, 1); }

void skip_ephemeral_seq(StreamEntry *e, uint64 n) { pg_atomic_fetch_add_u64(&e->ephemeral_seq, n); }

uint64 ephemeral_seq(const StreamEntry *e) {
  return pg_atomic_read_u64(const_cast<pg_atomic_uint64 *>(&e->ephemeral_seq));
}

bool ephemeral_forgotten() { return pg_atomic_read_u32(&g_shared->ephemeral_forgotten) != 0; }

static void set_bit(pg_atomic_uint32 *mask, int w, bool on) {
  if (on)
    pg_atomic_fetch_or_u32(mask, 1u << w);
  else
    pg_atomic_fetch_and_u32(mask, ~(1u << w));
}

void set_subscriber_bit(StreamEntry *e, int w, bool on) { set_bit(&e->subscriber_workers, w, on); }

void set_wake_bit(StreamEntry *e, int w, bool on) { set_bit(&e->wake_workers, w, on); }

bool watched_by_workers(const StreamEntry *e) {
  return pg_atomic_read_u32(const_cast<pg_atomic_uint32 *>(&e->subscriber_workers)) != 0;
}

uint32 wake_mask(const StreamEntry *e) {
  return pg_atomic_read_u32(const_cast<pg_atomic_uint32 *>(&e->wake_workers));
}

void advance_max_committed(StreamEntry *e, int64 id) {
  uint64 cur = pg_atomic_read_u64(&e->max_committed);
  while ((int64)cur < id) {
    if (pg_atomic_compare_exchange_u64(&e->max_committed, &cur, (uint64)id))
      break;
  }
}

bool take_connection_place(int w, uint32 max) {
  Shared *s = shared();
  uint32 n = pg_atomic_read_u32(&s->sse_total);
  while (n < max) // a failed exchange reloads n with the current count
    if (pg_atomic_compare_exchange_u32(&s->sse_total, &n, n + 1)) {
      pg_atomic_fetch_add_u32(&s->sse_held[w], 1);
      return true;
    }
  return false;
}

void give_connection_place(int w) {
  Shared *s = shared();
  if (pg_atomic_read_u32(&s->sse_held[w]) == 0)
    return; // already given back by reset_connection_places()
  pg_atomic_fetch_sub_u32(&s->sse_held[w], 1);
  pg_atomic_fetch_sub_u32(&s->sse_total, 1);
}

void reset_connection_places(int w) {
  Shared *s = shared();
  const uint32 held = pg_atomic_exchange_u32(&s->sse_held[w], 0);
  if (held > 0)
    pg_atomic_fetch_sub_u32(&s->sse_total, held);
}

} // namespace pgbs::shmem
