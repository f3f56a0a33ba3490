// The commit ring in shared memory (its record format: shmem/ring_record.hpp),
// the workers that read it, and the flags and latches around it
// (docs/ARCHITECTURE.md, "The commit ring"). Producers append under the ring
// lock in exclusive mode; workers copy their unread span under it in shared
// mode and parse it after releasing it.
#pragma once

#include "shmem/ring_record.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "storage/latch.h"
}

#include <vector>

namespace pgbs::shmem {

// The ring's size in bytes (fixed at server start).
uint64 ring_capacity();

// An append in progress: ring_append_begin() takes the ring lock exclusive
// and ring_append_end() publishes the new head and releases it. In between
// only put() and plain arithmetic: nothing that can fail or allocate (the
// commit callback appends). put() is a memcpy into the ring.
struct RingAppend {
  char *ring;
  uint64 capacity;
  uint64 head;
  void put(const ring::Header &h, const char *payload) {
    ring::write_record(ring, capacity, head, h, payload);
    head += h.len;
  }
};
RingAppend ring_append_begin();
void ring_append_end(const RingAppend &a);

// The ring's head (bytes ever appended), read under the ring lock shared.
uint64 ring_head();
// Copies [pos, head) into *out under the ring lock shared and sets *head;
// false when pos was lapped (those records are gone). The lock only covers
// the copy.
bool ring_copy(uint64 pos, uint64 *head, std::vector<char> *out);

// Bumped when events were not put in the ring (a reader then catches up
// from the tables): ring_incomplete(); ring_overflow() counts it as a
// producer that fell back too (stats()).
uint64 overrun_seq();
void ring_incomplete();
void ring_overflow();
uint64 ring_overflows();

// Bumped by a commit that changed the catalog (every worker is woken).
uint64 catalog_version();
void catalog_changed();

// Worker w: how far it has read the ring, and whether it reads the ring on
// a 1 ms timer (committing producers leave its latch alone then, unless it
// falls a quarter of the ring behind).
void publish_ring_position(int w, uint64 pos);
void set_ring_polling(int w, bool on);

// Wakes the workers a commit concerns: those in mask that do not poll the
// ring, any worker a quarter of the ring behind, every worker when all.
// Call after the ring write and a full barrier (the masks read after it).
void wake_workers(uint32 mask, bool all);
// A full barrier, then every worker's latch.
void wake_all_workers();

} // namespace pgbs::shmem
