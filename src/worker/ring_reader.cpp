// RingReader: copies this worker's unread part of the commit ring under the
// ring lock (shared mode) and parses it after releasing the lock.
#include "worker/ring_reader.hpp"
#include "shmem/applied_hold.hpp"
#include "shmem/shared.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"
}

namespace pgbs::worker {

RingReader::RingReader(uint32_t dboid) : dboid_(dboid) {}

void RingReader::start() {
  shmem::Shared *s = shmem::shared();
  LWLockAcquire(s->ring_lock, LW_SHARED);
  pos_ = pg_atomic_read_u64(&s->ring_head);
  LWLockRelease(s->ring_lock);
  overrun_seq_ = pg_atomic_read_u64(&s->overrun_seq);
}

uint64_t RingReader::catalog_version() const {
  return pg_atomic_read_u64(&shmem::shared()->catalog_version);
}

bool RingReader::drain(std::vector<ring::Event> *out) {
  shmem::Shared *s = shmem::shared();
  bool complete = true;
  uint64 seq = pg_atomic_read_u64(&s->overrun_seq);
  if (seq != overrun_seq_) {
    overrun_seq_ = seq;
    complete = false;
  }
  // Copy [pos_, head) in one go; the lock only covers the memcpy.
  LWLockAcquire(s->ring_lock, LW_SHARED);
  const uint64 head = pg_atomic_read_u64(&s->ring_head);
  if (!ring::copy_span(s->ring, s->ring_capacity, pos_, head, &buf_))
    complete = false; // lapped: those records are gone
  LWLockRelease(s->ring_lock);
  pos_ = head;
  // A malformed span cannot happen with a consistent ring; stop rather than misparse.
  if (!ring::parse(buf_.data(), buf_.size(), dboid_, out, &records_read_))
    complete = false;
  return complete;
}

long RingReader::after_drain(int worker, size_t found, int64_t now_us) {
  pg_atomic_uint32 *flag = &shmem::shared()->worker_polling[worker];
  if (polling_) {
    if (found > 0)
      return 1;
    polling_ = false;
    quick_drains_ = 0;
    last_found_us_ = -1;
    pg_atomic_write_u32(flag, 0);
    // Pairs with the producer's barrier between its ring write and its read
    // of the flag: a producer that still saw the flag set wrote the ring
    // before this, so one more drain (now) finds its commit.
    pg_memory_barrier();
    return 0;
  }
  if (found == 0)
    return -1;
  quick_drains_ = last_found_us_ >= 0 && now_us - last_found_us_ < 500 ? quick_drains_ + 1 : 0;
  last_found_us_ = now_us;
  if (quick_drains_ < 8)
    return -1;
  polling_ = true;
  pg_atomic_write_u32(flag, 1); // a producer that misses it sets the latch: harmless
  return 1;
}

void read_horizon_bounds(uint32_t dboid, int holder, const std::vector<int64_t> &stream_ids,
                         std::vector<shmem::StreamEntry *> *entries, engine::HorizonBounds *out) {
  shmem::Shared *s = shmem::shared();
  out->max_committed.clear();
  out->min_floor.clear();
  out->frozen = false;
  for (size_t k = 0; k < stream_ids.size(); ++k) {
    shmem::StreamEntry *&e = (*entries)[k]; // held by the caller: not reused meanwhile
    if (e == nullptr)
      e = shmem::acquire_stream(dboid, stream_ids[k], holder);
    out->max_committed.emplace_back(stream_ids[k],
                                    e ? (int64_t)pg_atomic_read_u64(&e->max_committed) : 0);
  }
  pg_memory_barrier();
  // Streams logical replication writes: their holds, read after the maxima
  // (a commit starts its hold before it raises the maximum).
  int64 now_us = 0;
  for (size_t k = 0; k < stream_ids.size(); ++k) {
    shmem::StreamEntry *e = (*entries)[k];
    if (e == nullptr || pg_atomic_read_u32(&e->hold_active) == 0)
      continue;
    if (now_us == 0)
      now_us = (int64)GetCurrentTimestamp();
    const int64 hold = shmem::applied_hold(e, now_us);
    if (hold != shmem::kNoHold)
      out->lower_floor(stream_ids[k], hold);
  }
  // Only slots whose bit is set can hold entries (see Shared::active_slots).
  for (int w = 0; w < (s->nslots + 63) / 64; w++) {
    uint64 bits = pg_atomic_read_u64(&s->active_slots[w]);
    while (bits != 0) {
      const int i = w * 64 + __builtin_ctzll(bits);
      bits &= bits - 1;
      shmem::BackendSlot *slot = &s->slots[i];
      for (int attempt = 0;; attempt++) {
        uint32 gen = pg_atomic_read_u32(&slot->gen);
        pg_read_barrier();
        uint32 n = pg_atomic_read_u32(&slot->count);
        bool wildcard = pg_atomic_read_u32(&slot->wildcard) != 0;
        if (n == 0 && !wildcard)
          break;
        pg_read_barrier();
        Oid slot_db = slot->dboid;
        shmem::SlotEntry entries[shmem::kSlotStreams];
        if (n > (uint32)shmem::kSlotStreams)
          n = shmem::kSlotStreams;
        memcpy(entries, slot->entries, sizeof(shmem::SlotEntry) * n);
        pg_read_barrier();
        if (pg_atomic_read_u32(&slot->gen) != gen) {
          if (attempt < 1000)
            continue;         // the producer moved on while we read: read again
          out->frozen = true; // never settled: hold the horizons this round
          break;
        }
        if (slot_db != dboid)
          break;
        if (wildcard)
          out->frozen = true;
        for (uint32 k = 0; k < n; k++)
          out->lower_floor(entries[k].stream_id, entries[k].floor);
        break;
      }
    }
  }
  // On a node replaying WAL: the primary's producers' floors.
  static std::vector<shmem::SlotEntry> replayed;
  replayed.clear();
  if (shmem::standby_copy_floors(dboid, &replayed))
    out->frozen = true;
  for (const shmem::SlotEntry &e : replayed)
    out->lower_floor(e.stream_id, e.floor);
  pg_memory_barrier();
}

} // namespace pgbs::worker
