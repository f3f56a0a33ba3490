// The worker's view of shared memory: its own read position in the commit
// ring, the per-stream committed maxima and the producers' floors.
#pragma once
#include "engine/engine.hpp"
#include "shmem/ring_record.hpp"

#include <cstdint>
#include <vector>

namespace pgbs::shmem {
struct StreamEntry;
}

namespace pgbs::worker {

class RingReader {
public:
  explicit RingReader(uint32_t dboid);
  // Starts reading at the current head (what came before is the tables' job).
  void start();
  // Appends the events committed since the last call (this database only).
  // Returns false when events were lost (ring lapped, or a producer skipped
  // the ring): the caller must catch up from the tables.
  bool drain(std::vector<ring::Event> *out);
  uint64_t position() const { return pos_; } // ring bytes read so far
  uint64_t catalog_version() const;
  uint64_t records_read() const { return records_read_; }
  // Wake coalescing, called after each drain with the events it found:
  // returns how long worker `worker` may sleep before the next drain (-1:
  // until its latch is set). Eight drains in a row that found events within
  // 0.5 ms of the previous one switch to reading the ring every millisecond,
  // with producers told not to wake it (shmem::set_ring_polling); a drain
  // that finds nothing switches back.
  long after_drain(int worker, size_t found, int64_t now_us);

private:
  uint32_t dboid_;
  bool polling_ = false;
  int quick_drains_ = 0;
  int64_t last_found_us_ = -1;
  uint64_t pos_ = 0;
  uint64_t overrun_seq_ = 0;
  uint64_t records_read_ = 0;
  std::vector<char> buf_;
};

// Reads M for the given streams, then the producer slots. Call before drain()
// (docs/ARCHITECTURE.md, "The horizon": the order matters). entries[k] is
// stream_ids[k]'s shared entry; a null one is acquired for worker `holder`
// and stored back (the caller releases it).
void read_horizon_bounds(uint32_t dboid, int holder, const std::vector<int64_t> &stream_ids,
                         std::vector<shmem::StreamEntry *> *entries, engine::HorizonBounds *out);

} // namespace pgbs::worker
