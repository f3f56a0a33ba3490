// Shared memory: the commit-ordered event ring, the per-stream committed
// maximum, the producers' in-flight slots (for the horizon: docs/ARCHITECTURE.md,
// "The horizon"), the
// workers' latches and the stats area. Sized from the settings (Sizes,
// passed in by the module entry's shmem_request_hook).
#pragma once

extern "C" {
#include "postgres.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
}

namespace pgbs::shmem {

constexpr int kMaxWorkers = 32;
constexpr int kSlotStreams = 32; // streams one transaction can write before it freezes all horizons

// Commit-to-queue latency over the last minute: six 10-second windows of
// power-of-two microsecond buckets. Updated under a spinlock that only
// guards a few integer stores.
constexpr int kLatencyWindows = 6;
constexpr int kLatencyBuckets = 26; // 1 us .. ~33 s
struct LatencyWindows {
  slock_t mutex;
  int64 window_start[kLatencyWindows]; // epoch seconds / 10 of each window
  uint32 counts[kLatencyWindows][kLatencyBuckets];
  uint64 total[kLatencyBuckets]; // since start, only grows (Prometheus histogram)
};

// Per-stream figures written by the workers (summed over workers); the names
// are the README's "Glossary of figures".
struct StreamStats {
  pg_atomic_uint64 subscribers; // gauge
  pg_atomic_uint64 queued;      // frames put on connections' queues
  pg_atomic_uint64 overflow_dropped;
  pg_atomic_uint64 failed;
  pg_atomic_uint64 bytes_queued;
  pg_atomic_uint64 retention_removed;
  pg_atomic_uint64 horizon; // highest horizon any worker reached
  LatencyWindows latency;
};

// One stream known to shared memory, keyed by (database, catalog id). The
// catalog id doubles as the stream's epoch: a re-created stream gets a new id.
// Entries exist only while someone holds them (a producer's open transaction,
// a worker that tracks the stream) and are reused afterwards: an unheld entry
// keeps its figures until a new stream needs its place (see acquire_stream).
struct StreamEntry {
  Oid dboid;
  int64 stream_id;                // 0 = never used
  pg_atomic_uint64 max_committed; // highest msg_id whose commit reached the ring
  pg_atomic_uint64 events;        // committed events seen at commit (stats)
  // Bit w set while worker w has a connection on this stream: a committing
  // producer copies the rows' payloads into the ring for them.
  pg_atomic_uint32 subscriber_workers;
  // Bit w set while worker w has a connection on this stream that may take
  // its rows live (not all of them page): a committing producer wakes only
  // those workers (and any worker lagging in the ring).
  pg_atomic_uint32 wake_workers;
  // Who holds the entry: bit w (w < 32) for worker w, and the number of
  // producer transactions above bit 32. One word, so that the moment the
  // entry becomes held or unheld is exact (Shared::streams_held).
  pg_atomic_uint64 holds;
  // Ephemeral broadcasts committed (numbered in ring order, under the ring
  // lock, also when they could not be put in the ring): readers see losses.
  pg_atomic_uint64 ephemeral_seq;
  // Rows applied by logical replication: the hold that keeps every horizon
  // of the stream below them for a while (shmem/applied_hold.hpp). The
  // atomic says whether one is in force; the rest is under hold_lock.
  pg_atomic_uint32 hold_active;
  slock_t hold_lock;
  int64 hold, hold_next, hold_moved_us, hold_window_us;
  StreamStats stats;
};

void record_latency(LatencyWindows *w, int64 now_us, int64 latency_us);
// Fills p50/p99 (ms) over the last minute; false when there is no sample.
bool latency_percentiles(LatencyWindows *w, int64 now_us, double *p50_ms, double *p99_ms);
// Sums the last minute's buckets into out[kLatencyBuckets].
void latency_buckets(LatencyWindows *w, int64 now_us, uint64 *out);
// Copies the cumulative buckets (since start) into out[kLatencyBuckets].
void latency_totals(LatencyWindows *w, uint64 *out);

// A producer backend's in-flight registration: per stream, a floor below
// every msg_id the open transaction may insert.
struct SlotEntry {
  int64 stream_id;
  int64 floor;
};
struct BackendSlot {
  Oid dboid;
  pg_atomic_uint32 gen;      // bumped when the entries are cleared (seqlock for readers)
  pg_atomic_uint32 count;    // entries published; 0 = no transaction in flight
  pg_atomic_uint32 wildcard; // more streams than entries: holds every horizon of dboid at 0
  SlotEntry entries[kSlotStreams];
};

// Per-worker figures written by the worker only (read by stats()).
struct WorkerStats {
  pg_atomic_uint64 connections;
  pg_atomic_uint64 queued;
  pg_atomic_uint64 overflow_dropped;
  pg_atomic_uint64 catch_ups;   // times the worker had to catch up from tables
  pg_atomic_uint64 events_read; // ring records consumed
  pg_atomic_uint64 held_back;   // ids held back because the token would be too long
};

// A live connection as shown by connections() and counted by presence();
// written by its worker about twice a second, and at once when its set of
// connections changed.
constexpr int kConnStreams = 32;        // http::Config::max_streams_per_request
constexpr int kIdentityBytes = 128 + 1; // auth::kMaxSubscriberIdBytes + NUL
struct ConnSnapshot {
  uint64 conn_id;
  int64 connected_at_us; // Unix epoch microseconds
  int64 queued_events, queued_bytes, written, overflow_dropped;
  char remote[48];
  char streams[128];
  char cursor[256];
  char subscriber[64];
  char state[16];
  // presence(): the streams by catalog id and the credential's identity
  // (the JWT's sub); has_identity false for anonymous connections.
  int32 nstreams;
  bool has_identity;
  int64 stream_ids[kConnStreams];
  char identity[kIdentityBytes];
};
inline bool conn_on_stream(const ConnSnapshot &c, int64 stream_id) {
  for (int i = 0; i < c.nstreams; i++)
    if (c.stream_ids[i] == stream_id)
      return true;
  return false;
}
struct WorkerConns {
  LWLock *lock;
  int count;
  int capacity;
  ConnSnapshot *items;
};

// A bounded ring of recent connection lifecycle events (diagnostics()).
struct DiagEntry {
  int64 at_us; // Unix epoch microseconds
  int32 worker;
  uint64 conn_id;
  char event[16];
  char stream[64];
  char detail[128];
};
struct Diagnostics {
  LWLock *lock; // exclusive for writing one entry, shared for reading the ring
  uint64 next;  // entries ever written
  int capacity;
  DiagEntry *items;
};
void record_diagnostic(int worker, uint64 conn_id, const char *event, const char *stream,
                       const char *detail);

struct Shared {
  LWLock *ring_lock;    // appending to / copying from the ring
  LWLock *streams_lock; // the stream index: shared to hold an entry, exclusive to create one
  uint64 ring_capacity;
  pg_atomic_uint64 ring_head;   // total bytes ever appended (monotonic)
  pg_atomic_uint64 overrun_seq; // bumped when a transaction's events were not put in the ring
  pg_atomic_uint64 catalog_version;
  pg_atomic_uint64 ring_overflows; // producers that fell back to overrun (stats)
  int max_streams;
  int streams_used; // entries handed out at least once (the rest were never used)
  // Entries held by someone (a worker or a producer transaction), and a flag
  // a producer raises (waking the workers) when few are left, so that the
  // workers give back the entries of streams they no longer serve at once
  // instead of after their linger (see streams_short()).
  pg_atomic_uint32 streams_held;
  pg_atomic_uint32 streams_short;
  // Set once an entry that had counted ephemeral broadcasts was reused: a
  // worker that starts later cannot tell from a stream's new entry whether
  // it missed some (engine: a first wake then announces them as expired).
  pg_atomic_uint32 ephemeral_forgotten;
  int sweep_hand; // next entry the reuse sweep looks at
  int nslots;
  Latch *worker_latch[kMaxWorkers];
  pg_atomic_uint64 worker_ring_pos[kMaxWorkers]; // how far each worker has read the ring
  // Set while worker w reads the ring on a 1 ms timer (commits arrive faster
  // than it could be woken for each): committing producers leave its latch
  // alone then, unless it falls a quarter of the ring behind.
  pg_atomic_uint32 worker_polling[kMaxWorkers];
  pg_atomic_uint32 worker_pid[kMaxWorkers];
  WorkerStats worker_stats[kMaxWorkers];
  WorkerConns worker_conns[kMaxWorkers];
  // SSE connections the node holds against max_connections, all workers
  // together (docs/ARCHITECTURE.md, "One limit for the node"), and each
  // worker's part of it, given back when the worker exits or starts again.
  pg_atomic_uint32 sse_total;
  pg_atomic_uint32 sse_held[kMaxWorkers];
  Diagnostics diagnostics;
  // Presence: bumped after a worker's set of connections changed in shared
  // memory (rows rewritten, or the worker gone); the workers whose bit is
  // set in presence_workers have ?presence=1 connections and are woken.
  pg_atomic_uint64 presence_gen;
  pg_atomic_uint32 presence_workers;
  StreamEntry *streams; // max_streams entries; found through the index (shared.cpp)
  BackendSlot *slots;   // one per PGPROC
  // Bit i set while slot i may hold entries: set before a transaction's first
  // entry is published, cleared after its entries are withdrawn. Readers visit
  // only the slots of transactions in flight instead of every PGPROC.
  pg_atomic_uint64 *active_slots; // (nslots + 63) / 64 words
  char *ring;
};

// The ring's records: shmem/ring_record.hpp.

// What shared memory is sized by (the settings, read once at server start).
struct Sizes {
  size_t ring_bytes = 0;
  int max_streams = 0;
  int workers = 0;
  int max_connections = 0;
  int diagnostics_size = 0;
  int max_pending_streams = 0; // awaited.hpp
};

Size shmem_size();
void shmem_request(const Sizes &sizes);
void shmem_startup();
Shared *shared();

// Holding stream entries. A holder is a worker (its index; holding is one
// bit, so holding twice needs one release) or kBackend (a producer
// transaction; counted). A held entry is never reused, so the pointer stays
// valid until released; an unheld one may belong to another stream at any
// time. Never call these under a spinlock (they take the index LWLock).
constexpr int kBackend = -1;
// Holds the entry of (dboid, stream_id), creating it if needed (a new entry
// starts with max_committed 0). nullptr when every entry is held.
StreamEntry *acquire_stream(Oid dboid, int64 stream_id, int holder);
void release_stream(StreamEntry *e, int holder);
// Calls fn(entry, arg) on the entry of (dboid, stream_id) without holding it,
// under the index lock held shared, so the entry is not reused meanwhile: fn
// only reads (atomics, spinlocked figures) and never errors. False if the
// stream has no entry.
bool read_stream(Oid dboid, int64 stream_id, void (*fn)(StreamEntry *, void *), void *arg);
// Entries held now, and whether so few are left (under an eighth of
// max_streams) that the workers should release idle ones at once.
uint32 streams_held();
bool streams_short();
// A worker that released what it could: lowers the flag once entries are no
// longer short, so the next shortage wakes the workers again.
void streams_relieved();
// Whether worker w holds the entry (workers().streams counts them).
bool held_by_worker(const StreamEntry *e, int w);
// Raises the committed maximum of an existing entry (no entry: nothing to do).
void raise_max_committed(Oid dboid, int64 stream_id, int64 id);
// A stream id that is new in the catalog starts from nothing, whatever an
// older incarnation of the extension left in shared memory under that id.
void forget_stream(Oid dboid, int64 stream_id);
// Worker start: drops worker w's holds, subscriber bits and polling flag
// left by a previous process in its slot.
void clear_subscriber_bits(int w);

// The node's SSE connection limit: worker w takes a place for a connection
// (false when max places are taken, by whichever workers) and gives it back.
// Atomics only: callable from the listener's callbacks.
bool take_connection_place(int w, uint32 max);
void give_connection_place(int w);
// Worker start and exit: the places worker w's process held go back.
void reset_connection_places(int w);
// Announces a change of worker w's connection rows to the presence
// watchers of the other workers (bumps presence_gen, sets their latches).
void presence_changed(int w);

// Raises entry->max_committed to at least id.
void advance_max_committed(StreamEntry *e, int64 id);

} // namespace pgbs::shmem
