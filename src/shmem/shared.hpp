// Shared memory: the commit-ordered event ring, the per-stream committed
// maximum, the producers' in-flight slots (for the horizon: docs/ARCHITECTURE.md,
// "The horizon"), the workers' latches and the stats area. Sized from the
// settings (Sizes, passed in by the module entry's shmem_request_hook).
//
// The layout is private to src/shmem (shmem/layout.hpp): the rest of the
// code calls the named operations below and in shmem/ring.hpp,
// shmem/slots.hpp, shmem/figures.hpp and shmem/conns.hpp, and gets plain
// values back. Each operation says which lock it takes; none takes a lock
// and then calls something that can raise an error while a spinlock is
// held.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace pgbs::shmem {

constexpr int kMaxWorkers = 32;
constexpr int kSlotStreams = 32; // streams one transaction can write before it freezes all horizons
constexpr int kLatencyBuckets = 26; // 1 us .. ~33 s (commit-to-queue latency, power-of-two buckets)

// One stream known to shared memory, keyed by (database, catalog id); its
// fields are private (shmem/layout.hpp). The catalog id doubles as the
// stream's epoch: a re-created stream gets a new id.
struct StreamEntry;

// One floor a producer published for a stream (its slot, or on a standby
// the floors the primary's producers logged).
struct SlotEntry {
  int64 stream_id;
  int64 floor;
};

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
// only calls the operations on entries below (atomics, spinlocked figures)
// and never errors. False if the stream has no entry.
bool read_stream(Oid dboid, int64 stream_id, void (*fn)(StreamEntry *, void *), void *arg);
// Entries held now, and whether so few are left (under an eighth of
// max_streams) that the workers should release idle ones at once.
uint32 streams_held();
bool streams_short();
// A worker that released what it could: lowers the flag once entries are no
// longer short, so the next shortage wakes the workers again.
void streams_relieved();
// Raises the committed maximum of an existing entry (no entry: nothing to do).
void raise_max_committed(Oid dboid, int64 stream_id, int64 id);
// A stream id that is new in the catalog starts from nothing, whatever an
// older incarnation of the extension left in shared memory under that id.
void forget_stream(Oid dboid, int64 stream_id);
// Worker start: drops worker w's holds, subscriber bits and polling flag
// left by a previous process in its slot.
void clear_subscriber_bits(int w);

// Operations on an entry the caller holds (or reaches through read_stream).
// Atomics only: no lock, no error, callable from the commit callback.
//
// The stream's catalog id.
int64 stream_id_of(const StreamEntry *e);
// The highest msg_id whose commit reached the ring (the committed maximum).
int64 committed_max(const StreamEntry *e);
// Raises the committed maximum to at least id.
void advance_max_committed(StreamEntry *e, int64 id);
// Adds n committed events to the stream's count (stats()).
void count_events(StreamEntry *e, uint64 n);
// Ephemeral broadcasts are numbered per stream in ring order (under the ring
// lock), also those that could not be put in the ring: readers see losses.
// next_ephemeral_seq numbers one, skip_ephemeral_seq counts n lost ones.
uint64 next_ephemeral_seq(StreamEntry *e);
void skip_ephemeral_seq(StreamEntry *e, uint64 n);
uint64 ephemeral_seq(const StreamEntry *e);
// Set once an entry that had counted ephemeral broadcasts was reused: a
// worker that starts later cannot tell from a stream's new entry whether it
// missed some.
bool ephemeral_forgotten();
// Worker w's bits on the entry (full barriers): subscribed while it has a
// connection on the stream (producers copy payloads into the ring for it),
// woken while one of those may take rows live (producers set its latch).
void set_subscriber_bit(StreamEntry *e, int w, bool on);
void set_wake_bit(StreamEntry *e, int w, bool on);
// Whether some worker subscribed to e (its producers copy payloads into the ring).
bool watched_by_workers(const StreamEntry *e);
// The workers a commit to e should wake (bit w: worker w).
uint32 wake_mask(const StreamEntry *e);
// Whether worker w holds the entry (workers().streams counts them).
bool held_by_worker(const StreamEntry *e, int w);

// The node's SSE connection limit: worker w takes a place for a connection
// (false when max places are taken, by whichever workers) and gives it back.
// Atomics only: callable from the listener's callbacks.
bool take_connection_place(int w, uint32 max);
void give_connection_place(int w);
// Worker start and exit: the places worker w's process held go back.
void reset_connection_places(int w);

} // namespace pgbs::shmem
