// The worker's view of shared memory: its own read position in the commit
// ring, the per-stream committed maxima and the producers' floors.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace pgbs::shmem {
struct StreamEntry;
}

namespace pgbs::worker {

struct RingEvent {
  int64_t stream_id;
  int64_t msg_id;
  int64_t commit_us;
  bool has_payload = false; // data/event/visible_to below
  bool ephemeral = false;   // and no table row
  std::string data, event, visible_to;
  uint64_t exclude = 0; // connection id that must not get it (0: none)
};

class RingReader {
public:
  explicit RingReader(uint32_t dboid);
  // Starts reading at the current head (what came before is the tables' job).
  void start();
  // Appends the events committed since the last call (this database only).
  // Returns false when events were lost (ring lapped, or a producer skipped
  // the ring): the caller must catch up from the tables.
  bool drain(std::vector<RingEvent> *out);
  uint64_t position() const { return pos_; } // ring bytes read so far
  uint64_t catalog_version() const;
  uint64_t records_read() const { return records_read_; }

private:
  uint32_t dboid_;
  uint64_t pos_ = 0;
  uint64_t overrun_seq_ = 0;
  uint64_t records_read_ = 0;
  std::vector<char> buf_;
};

// Snapshot of what bounds each stream's horizon: the committed maximum read
// first, then the lowest floor any in-flight producer published.
struct HorizonBounds {
  std::vector<std::pair<int64_t, int64_t>> max_committed; // (stream_id, M), in the order asked
  // (stream_id, lowest floor) of streams with producers in flight: few, so a
  // vector reused between wake-ups (no allocation per wake-up)
  std::vector<std::pair<int64_t, int64_t>> min_floor;
  void lower_floor(int64_t stream_id, int64_t floor) {
    for (auto &f : min_floor)
      if (f.first == stream_id) {
        f.second = std::min(f.second, floor);
        return;
      }
    min_floor.emplace_back(stream_id, floor);
  }
  const int64_t *floor_of(int64_t stream_id) const {
    for (const auto &f : min_floor)
      if (f.first == stream_id)
        return &f.second;
    return nullptr;
  }
  bool frozen = false; // a producer holds every horizon
};

// Reads M for the given streams, then the producer slots. Call before drain()
// (DESIGN §3.1 ordering). entries[k] is stream_ids[k]'s shared entry; a null
// one is acquired for worker `holder` and stored back (the caller releases it).
void read_horizon_bounds(uint32_t dboid, int holder, const std::vector<int64_t> &stream_ids,
                         std::vector<shmem::StreamEntry *> *entries, HorizonBounds *out);

} // namespace pgbs::worker
