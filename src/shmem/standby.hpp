// Standby floors: on a node replaying WAL, the floors the primary's
// producers published (read back from the capture's WAL messages), keyed by
// the producing transaction's xid. They play the part of the producers'
// in-flight slots for the horizon (docs/ARCHITECTURE.md, "Standbys").
#pragma once

#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
}

#include <vector>

namespace pgbs::shmem {

enum ReaderPhase : uint32 {
  kReaderCatchingUp = 0, // from shared memory's start until it reaches the replay position
  kReaderLive = 1,       // reading as replay goes
  kReaderDone = 2,       // not in recovery and nothing left to read
};

Size standby_size();
void standby_request();
void standby_startup();

// The WAL reader (worker 0, worker/wal_reader.hpp): its phase, and the end
// of the last record it read (0: none yet). Every horizon is held while it
// catches up at start (floors not read yet) and, once the node is
// promoted, until it has read the last replayed message. Atomics only.
ReaderPhase standby_reader_phase();
void set_standby_reader_phase(ReaderPhase phase);
uint64 standby_read_lsn();
void set_standby_read_lsn(uint64 lsn);

// Whether any floor is held (or one did not fit): the sweep has work.
bool standby_floors_held();

// replication(): floors in use, floors that did not fit, floors swept.
struct StandbyFigures {
  int32 used = 0;
  uint64 overflows = 0, swept = 0;
};
StandbyFigures standby_figures();

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
