// The producers' in-flight slots (shmem/slots.hpp).
#include "shmem/slots.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"
#include "pg/compat.hpp"

namespace pgbs::shmem {

namespace {
BackendSlot *my_slot() { return &shared()->slots[pg::my_proc_number()]; }
pg_atomic_uint64 *my_active_word() { return &shared()->active_slots[pg::my_proc_number() / 64]; }
uint64 my_active_bit() { return UINT64CONST(1) << (pg::my_proc_number() % 64); }
} // namespace

void slot_open(Oid dboid, bool first) {
  my_slot()->dboid = dboid;
  if (first) // full barrier: the bit is visible before any entry
    pg_atomic_fetch_or_u64(my_active_word(), my_active_bit());
}

void slot_publish(int n, int64 stream_id, int64 floor) {
  BackendSlot *slot = my_slot();
  if (n < kSlotStreams) {
    slot->entries[n].stream_id = stream_id;
    slot->entries[n].floor = floor;
    pg_write_barrier();
    pg_atomic_write_u32(&slot->count, (uint32)(n + 1));
  } else {
    // Out of slot entries: hold every horizon of this database until commit.
    pg_write_barrier();
    pg_atomic_write_u32(&slot->wildcard, 1);
  }
  pg_memory_barrier(); // the slot is visible before this statement draws any msg_id
}

void slot_clear() {
  BackendSlot *slot = my_slot();
  pg_atomic_fetch_add_u32(&slot->gen, 1); // readers that saw the old entries retry
  pg_memory_barrier();
  pg_atomic_write_u32(&slot->count, 0);
  pg_atomic_write_u32(&slot->wildcard, 0);
  pg_memory_barrier();
  pg_atomic_fetch_and_u64(my_active_word(), ~my_active_bit());
}

bool copy_slot_floors(Oid dboid, std::vector<SlotEntry> *out) {
  Shared *s = shared();
  bool frozen = false;
  // Only slots whose bit is set can hold entries (see Shared::active_slots).
  for (int w = 0; w < (s->nslots + 63) / 64; w++) {
    uint64 bits = pg_atomic_read_u64(&s->active_slots[w]);
    while (bits != 0) {
      const int i = w * 64 + __builtin_ctzll(bits);
      bits &= bits - 1;
      BackendSlot *slot = &s->slots[i];
      for (int attempt = 0;; attempt++) {
        uint32 gen = pg_atomic_read_u32(&slot->gen);
        pg_read_barrier();
        uint32 n = pg_atomic_read_u32(&slot->count);
        bool wildcard = pg_atomic_read_u32(&slot->wildcard) != 0;
        if (n == 0 && !wildcard)
          break;
        pg_read_barrier();
        Oid slot_db = slot->dboid;
        SlotEntry entries[kSlotStreams];
        if (n > (uint32)kSlotStreams)
          n = kSlotStreams;
        memcpy(entries, slot->entries, sizeof(SlotEntry) * n);
        pg_read_barrier();
        if (pg_atomic_read_u32(&slot->gen) != gen) {
          if (attempt < 1000)
            continue;    // the producer moved on while we read: read again
          frozen = true; // never settled: hold the horizons this round
          break;
        }
        if (slot_db != dboid)
          break;
        if (wildcard)
          frozen = true;
        out->insert(out->end(), entries, entries + n);
        break;
      }
    }
  }
  return frozen;
}

} // namespace pgbs::shmem
