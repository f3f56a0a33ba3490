// Standby floors: on a node replaying WAL, the floors the primary's
// producers published (read back from the capture's WAL messages), keyed by
// the producing transaction's xid. They play the part of the producers'
// in-flight slots for the horizon (docs/ARCHITECTURE.md, "Standbys").
#pragma once

#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
}

#include <vector>

namespace pgbs::shmem {

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

enum ReaderPhase : uint32 {
  kReaderCatchingUp = 0, // from shared memory's start until it reaches the replay position
  kReaderLive = 1,       // reading as replay goes
  kReaderDone = 2,       // not in recovery and nothing left to read
};

Size standby_size();
void standby_request();
void standby_startup();
StandbyFloors *standby_floors();

// Redo (startup process): nothing here can fail.
void standby_add_floor(TransactionId xid, Oid dboid, int64 stream_id, int64 floor);
void standby_clear(TransactionId xid);

// Reader: appends the floors of dboid to *out; true when every horizon of
// dboid must be held (a wildcard entry or an overflow).
bool standby_copy_floors(Oid dboid, std::vector<SlotEntry> *out);

// One transaction whose floors are still held, as the sweep sees it.
struct FloorXid {
  TransactionId xid;
  int64 committed_seen_us;
};
// Copies the xids held (and the overflow xid) for the sweep.
void standby_held_xids(std::vector<FloorXid> *out, TransactionId *overflow_xid);
// Drops the floors of xid (an aborted transaction: the sweep).
void standby_drop(TransactionId xid);
// Notes that xid was found committed at now_us (first time only).
void standby_mark_committed(TransactionId xid, int64 now_us);
// Holds every horizon until every transaction up to xid has ended, as a
// floor that did not fit (floors that may have been missed).
void standby_hold_until(TransactionId xid);
// Clears the overflow if it still names xid.
void standby_clear_overflow(TransactionId xid);

} // namespace pgbs::shmem
