// The worker's side of the standby floor table (see standby.hpp).
#include "worker/standby.hpp"
#include "pg/guard.hpp"
#include "shmem/ring.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "utils/timestamp.h"
}

#include <vector>

namespace pgbs::worker {

bool in_recovery() { return RecoveryInProgress(); }

namespace {
// A committed transaction's COMMIT record is the next record after its
// commit record but for concurrent inserts; a floor still held this long
// after its commit was replayed belongs to a record that will not come.
constexpr int64 kCommittedGraceUs = 1000000;
} // namespace

bool sweep_standby_floors() {
  if (!shmem::standby_floors_held())
    return false;
  static std::vector<shmem::FloorXid> held;
  TransactionId overflow = InvalidTransactionId;
  shmem::standby_held_xids(&held, &overflow);
  const int64 now = (int64)GetCurrentTimestamp();
  bool lost = false, changed = false;
  for (const shmem::FloorXid &x : held) {
    bool running = true, committed = false;
    pg::call([&] {
      running = TransactionIdIsInProgress(x.xid);
      if (!running)
        committed = TransactionIdDidCommit(x.xid);
    });
    if (running)
      continue;
    if (!committed) { // aborted: it inserted nothing anyone will see
      shmem::standby_drop(x.xid);
      changed = true;
    } else if (x.committed_seen_us == 0) {
      shmem::standby_mark_committed(x.xid, now);
    } else if (now - x.committed_seen_us > kCommittedGraceUs) {
      // Its rows are visible in the tables: readers catch up from there.
      shmem::standby_drop(x.xid);
      lost = changed = true;
    }
  }
  if (TransactionIdIsValid(overflow)) {
    TransactionId oldest = InvalidTransactionId;
    pg::call([&] { oldest = GetOldestNonRemovableTransactionId(nullptr); });
    if (TransactionIdIsValid(oldest) && TransactionIdPrecedes(overflow, oldest)) {
      shmem::standby_clear_overflow(overflow);
      changed = true;
    }
  }
  if (lost)
    shmem::ring_incomplete();
  if (changed) // horizons may move: every worker looks
    shmem::wake_all_workers();
  return true;
}

} // namespace pgbs::worker
