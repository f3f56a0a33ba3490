// RingReader: copies this worker's unread part of the commit ring under the
// ring lock (shared mode) and parses it after releasing the lock.
#include "worker/ring_reader.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "storage/lwlock.h"
}

namespace pgbs::worker {

using shmem::RecordHeader;

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

bool RingReader::drain(std::vector<RingEvent> *out) {
  shmem::Shared *s = shmem::shared();
  bool complete = true;
  uint64 seq = pg_atomic_read_u64(&s->overrun_seq);
  if (seq != overrun_seq_) {
    overrun_seq_ = seq;
    complete = false;
  }
  const uint64 cap = s->ring_capacity;
  if (buf_.size() < cap)
    buf_.resize(cap);
  // Copy [pos_, head) in one go; the lock only covers the memcpy.
  LWLockAcquire(s->ring_lock, LW_SHARED);
  uint64 head = pg_atomic_read_u64(&s->ring_head);
  uint64 len = 0;
  if (head - pos_ > cap) {
    complete = false; // lapped: those records are gone
    pos_ = head;
  } else {
    len = head - pos_;
    uint64 off = pos_ % cap;
    uint64 first = Min(len, cap - off);
    memcpy(buf_.data(), s->ring + off, first);
    if (first < len)
      memcpy(buf_.data() + first, s->ring, len - first);
  }
  LWLockRelease(s->ring_lock);
  pos_ = head;
  for (uint64 o = 0; o + sizeof(RecordHeader) <= len;) {
    RecordHeader h;
    memcpy(&h, buf_.data() + o, sizeof(h));
    if (h.len < sizeof(RecordHeader) || o + h.len > len)
      break; // cannot happen with a consistent ring; stop rather than misparse
    o += h.len;
    records_read_++;
    if (h.dboid != dboid_)
      continue;
    RingEvent ev{h.stream_id, h.msg_id, h.commit_us};
    ev.exclude = h.exclude;
    if (h.kind == shmem::RecordKind::Inline || h.kind == shmem::RecordKind::RowInline) {
      const char *p = buf_.data() + (o - h.len) + sizeof(RecordHeader);
      if ((uint64)sizeof(RecordHeader) + h.data_len + h.event_len + h.visible_len > h.len)
        continue;
      ev.has_payload = true;
      ev.ephemeral = h.kind == shmem::RecordKind::Inline;
      ev.data.assign(p, h.data_len);
      ev.event.assign(p + h.data_len, h.event_len);
      ev.visible_to.assign(p + h.data_len + h.event_len, h.visible_len);
    } else if (h.kind != shmem::RecordKind::Row) {
      continue;
    }
    out->push_back(std::move(ev));
  }
  return complete;
}

void read_horizon_bounds(uint32_t dboid, int holder, const std::vector<int64_t> &stream_ids,
                         std::vector<shmem::StreamEntry *> *entries, HorizonBounds *out) {
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
  pg_memory_barrier();
}

} // namespace pgbs::worker
