// Presence from shared memory: the connection rows every worker publishes
// (shmem::ConnSnapshot) counted per stream and identity, and the worker's
// own side of them (docs/ARCHITECTURE.md, "Presence"). Main thread only.
#pragma once
#include "engine/presence.hpp"

#include <cstdint>
#include <map>
#include <vector>

namespace pgbs::worker {

// What one connection row says of presence (copied out under its lock).
struct PresenceRow {
  bool has_identity;
  int32_t nstreams;
  int64_t stream_ids[32]; // shmem::kConnStreams
  char identity[129];     // shmem::kIdentityBytes
};

// Counts, over every worker's rows, the connections of each stream in
// `streams` (sorted) by identity. `scratch` is reused between calls.
void count_presence(const std::vector<int64_t> &streams,
                    std::map<int64_t, engine::PresenceCounts> *out,
                    std::vector<PresenceRow> *scratch);

} // namespace pgbs::worker
