// The hold of a stream that logical replication writes: applied_hold.hpp.
#include "shmem/applied_hold.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

namespace pgbs::shmem {

int64 applied_hold(StreamEntry *e, int64 now_us) {
  if (pg_atomic_read_u32(&e->hold_active) == 0)
    return kNoHold;
  int64 hold = kNoHold;
  SpinLockAcquire(&e->hold_lock);
  if (pg_atomic_read_u32(&e->hold_active) != 0) {
    if (now_us - e->hold_moved_us >= e->hold_window_us) {
      const int64 max = (int64)pg_atomic_read_u64(&e->max_committed);
      if (e->hold == e->hold_next && e->hold_next == max) {
        pg_atomic_write_u32(&e->hold_active, 0); // nothing committed for two windows
      } else {
        e->hold = e->hold_next; // the maximum of (at least) one window ago
        e->hold_next = max;
        e->hold_moved_us = now_us;
      }
    }
    if (pg_atomic_read_u32(&e->hold_active) != 0)
      hold = e->hold;
  }
  SpinLockRelease(&e->hold_lock);
  return hold;
}

void applied_hold_start(StreamEntry *e, int64 now_us, int64 window_us) {
  if (window_us <= 0)
    return;
  SpinLockAcquire(&e->hold_lock);
  if (pg_atomic_read_u32(&e->hold_active) == 0) {
    const int64 max = (int64)pg_atomic_read_u64(&e->max_committed);
    e->hold = e->hold_next = max;
    e->hold_moved_us = now_us;
    e->hold_window_us = window_us;
    pg_atomic_write_u32(&e->hold_active, 1);
  }
  SpinLockRelease(&e->hold_lock); // a barrier: seen before the maximum moves
}

bool applied_hold_active(const StreamEntry *e) {
  return pg_atomic_read_u32(const_cast<pg_atomic_uint32 *>(&e->hold_active)) != 0;
}

} // namespace pgbs::shmem
