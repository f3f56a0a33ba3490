// RingReader: copies this worker's unread part of the commit ring under the
// ring lock (shared mode) and parses it after releasing the lock.
#include "worker/ring_reader.hpp"
#include "shmem/applied_hold.hpp"
#include "shmem/ring.hpp"
#include "shmem/shared.hpp"
#include "shmem/slots.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"
}

namespace pgbs::worker {

RingReader::RingReader(uint32_t dboid) : dboid_(dboid) {}

void RingReader::start() {
  pos_ = shmem::ring_head();
  overrun_seq_ = shmem::overrun_seq();
}

uint64_t RingReader::catalog_version() const { return shmem::catalog_version(); }

bool RingReader::drain(std::vector<ring::Event> *out) {
  bool complete = true;
  uint64 seq = shmem::overrun_seq();
  if (seq != overrun_seq_) {
    overrun_seq_ = seq;
    complete = false;
  }
  // Copy [pos_, head) in one go; the lock only covers the memcpy.
  uint64 head = 0;
  if (!shmem::ring_copy(pos_, &head, &buf_))
    complete = false; // lapped: those records are gone
  pos_ = head;
  // A malformed span cannot happen with a consistent ring; stop rather than misparse.
  if (!ring::parse(buf_.data(), buf_.size(), dboid_, out, &records_read_))
    complete = false;
  return complete;
}

long RingReader::after_drain(int worker, size_t found, int64_t now_us) {
  if (polling_) {
    if (found > 0)
      return 1;
    polling_ = false;
    quick_drains_ = 0;
    last_found_us_ = -1;
    shmem::set_ring_polling(worker, false);
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
  shmem::set_ring_polling(worker, true); // a producer that misses it sets the latch: harmless
  return 1;
}

void read_horizon_bounds(uint32_t dboid, int holder, const std::vector<int64_t> &stream_ids,
                         std::vector<shmem::StreamEntry *> *entries, engine::HorizonBounds *out) {
  out->max_committed.clear();
  out->min_floor.clear();
  out->frozen = false;
  for (size_t k = 0; k < stream_ids.size(); ++k) {
    shmem::StreamEntry *&e = (*entries)[k]; // held by the caller: not reused meanwhile
    if (e == nullptr)
      e = shmem::acquire_stream(dboid, stream_ids[k], holder);
    out->max_committed.emplace_back(stream_ids[k], e ? (int64_t)shmem::committed_max(e) : 0);
  }
  pg_memory_barrier();
  // Streams logical replication writes: their holds, read after the maxima
  // (a commit starts its hold before it raises the maximum).
  int64 now_us = 0;
  for (size_t k = 0; k < stream_ids.size(); ++k) {
    shmem::StreamEntry *e = (*entries)[k];
    if (e == nullptr || !shmem::applied_hold_active(e))
      continue;
    if (now_us == 0)
      now_us = (int64)GetCurrentTimestamp();
    const int64 hold = shmem::applied_hold(e, now_us);
    if (hold != shmem::kNoHold)
      out->lower_floor(stream_ids[k], hold);
  }
  // The producers' floors, then on a node replaying WAL the primary's.
  static std::vector<shmem::SlotEntry> floors;
  floors.clear();
  if (shmem::copy_slot_floors(dboid, &floors))
    out->frozen = true;
  if (shmem::standby_copy_floors(dboid, &floors))
    out->frozen = true;
  for (const shmem::SlotEntry &e : floors)
    out->lower_floor(e.stream_id, e.floor);
  pg_memory_barrier();
}

} // namespace pgbs::worker
