// The commit ring and the workers around it (shmem/ring.hpp).
#include "shmem/ring.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

extern "C" {
#include "storage/lwlock.h"
}

namespace pgbs::shmem {

uint64 ring_capacity() { return shared()->ring_capacity; }

RingAppend ring_append_begin() {
  Shared *s = shared();
  LWLockAcquire(s->ring_lock, LW_EXCLUSIVE);
  return RingAppend{s->ring, s->ring_capacity, pg_atomic_read_u64(&s->ring_head)};
}

void ring_append_end(const RingAppend &a) {
  Shared *s = shared();
  pg_atomic_write_u64(&s->ring_head, a.head);
  LWLockRelease(s->ring_lock);
}

uint64 ring_head() {
  Shared *s = shared();
  LWLockAcquire(s->ring_lock, LW_SHARED);
  const uint64 head = pg_atomic_read_u64(&s->ring_head);
  LWLockRelease(s->ring_lock);
  return head;
}

bool ring_copy(uint64 pos, uint64 *head, std::vector<char> *out) {
  Shared *s = shared();
  LWLockAcquire(s->ring_lock, LW_SHARED);
  *head = pg_atomic_read_u64(&s->ring_head);
  const bool whole = ring::copy_span(s->ring, s->ring_capacity, pos, *head, out);
  LWLockRelease(s->ring_lock);
  return whole;
}

uint64 overrun_seq() { return pg_atomic_read_u64(&shared()->overrun_seq); }
void ring_incomplete() { pg_atomic_fetch_add_u64(&shared()->overrun_seq, 1); }
void ring_overflow() {
  pg_atomic_fetch_add_u64(&shared()->overrun_seq, 1);
  pg_atomic_fetch_add_u64(&shared()->ring_overflows, 1);
}
uint64 ring_overflows() { return pg_atomic_read_u64(&shared()->ring_overflows); }

uint64 catalog_version() { return pg_atomic_read_u64(&shared()->catalog_version); }
void catalog_changed() { pg_atomic_fetch_add_u64(&shared()->catalog_version, 1); }

void publish_ring_position(int w, uint64 pos) {
  pg_atomic_write_u64(&shared()->worker_ring_pos[w], pos);
}

void set_ring_polling(int w, bool on) {
  pg_atomic_write_u32(&shared()->worker_polling[w], on ? 1 : 0);
}

void wake_workers(uint32 mask, bool all) {
  Shared *s = shared();
  const uint64 head = pg_atomic_read_u64(&s->ring_head);
  for (int i = 0; i < kMaxWorkers; i++) {
    Latch *l = s->worker_latch[i];
    if (l == nullptr)
      continue;
    if (all || ((mask & (1u << i)) && pg_atomic_read_u32(&s->worker_polling[i]) == 0) ||
        head - pg_atomic_read_u64(&s->worker_ring_pos[i]) > s->ring_capacity / 4)
      SetLatch(l);
  }
}

void wake_all_workers() {
  Shared *s = shared();
  pg_memory_barrier();
  for (int i = 0; i < kMaxWorkers; i++)
    if (Latch *l = s->worker_latch[i])
      SetLatch(l);
}

} // namespace pgbs::shmem
