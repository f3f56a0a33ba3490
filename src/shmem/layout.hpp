// The layout of shared memory, private to src/shmem: the rest of the code
// goes through the operations of shmem/*.hpp and the plain values they
// return, so that which lock guards which field, and what may run under it,
// is written in one folder (docs/ARCHITECTURE.md, "Shared memory, files and
// stopping"). Include it from src/shmem/*.cpp only, which say so first.
#pragma once

#ifndef PGBS_SHMEM_LAYOUT
#error "shmem/layout.hpp is private to src/shmem: call the operations of shmem/*.hpp"
#endif

#include "shmem/conns.hpp"
#include "shmem/figures.hpp"
#include "shmem/shared.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
}

namespace pgbs::shmem {

// Commit-to-queue latency over the last minute: six 10-second windows of
// power-of-two microsecond buckets. Updated under a spinlock that only
// guards a few integer stores.
constexpr int kLatencyWindows = 6;
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

// A producer backend's in-flight registration: per stream, a floor below
// every msg_id the open transaction may insert.
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

struct WorkerConns {
  LWLock *lock;
  int count;
  int capacity;
  ConnSnapshot *items;
};

struct Diagnostics {
  LWLock *lock; // exclusive for writing one entry, shared for reading the ring
  uint64 next;  // entries ever written
  int capacity;
  DiagEntry *items;
};

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

// The standby floor table (shmem/standby.hpp).
struct StandbyFloor {
  TransactionId xid; // InvalidTransactionId: free
  Oid dboid;
  uint32 count;
  bool wildcard;           // more streams than entries: holds every horizon of dboid
  int64 committed_seen_us; // when a sweep first found it committed without its ring records
  SlotEntry entries[kSlotStreams];
};

// Bounded by twice the in-flight slots: a hot standby runs with at least the
// primary's max_connections, so only floors of transactions that ended
// without a commit record and were not yet swept can fill the rest. A floor
// that does not fit holds every horizon until every transaction up to its
// xid has ended (never a silent skip).
struct StandbyFloors {
  LWLock *lock;
  int capacity;
  pg_atomic_uint32 used;      // items[0, used) are in use (readers skip the lock at 0)
  TransactionId overflow_xid; // highest xid whose floor did not fit (Invalid: none)
  pg_atomic_uint64 overflows; // floors that did not fit (replication())
  pg_atomic_uint64 swept;     // floors removed by the sweep (replication())
  // The WAL reader (worker 0, worker/wal_reader.hpp): where it stands, and
  // its phase. Every horizon is held while it catches up at start (floors
  // not read yet) and, once the node is promoted, until it has read the
  // last replayed message (commits not applied yet).
  pg_atomic_uint64 read_lsn; // end of the last record read (0: none yet)
  pg_atomic_uint32 reader;   // ReaderPhase
  StandbyFloor items[FLEXIBLE_ARRAY_MEMBER];
};

Shared *shared();
StandbyFloors *standby_floors();

} // namespace pgbs::shmem
