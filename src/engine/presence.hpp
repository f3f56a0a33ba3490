// Presence events: who is connected to a stream, across every worker, sent
// to the connections of this worker that asked (?presence=1) as
// `event: pgbus:presence` frames without an id line: one snapshot, then a
// join or leave each time an identity's count of connections changes.
// Plain C++; the worker counts the shared-memory connection rows and hands
// the counts in (docs/ARCHITECTURE.md, "Presence").
#pragma once
#include "core/no_postgres.hpp"
#include "core/wire.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pgbs::engine {

// Connections of one stream by identity (the credential's sub; nullopt:
// anonymous), over every worker; the frames are wire::presence_*_frame.
using PresenceCounts = wire::PresenceCounts;

class PresenceFeed {
public:
  // Queues a frame on a connection; false when its queue has no room.
  using Push = std::function<bool(uint64_t conn_id, const std::string &frame)>;

  // A connection that asked for presence: a snapshot of each of its
  // streams at the next update, then changes.
  void add(uint64_t conn_id, const std::vector<std::pair<int64_t, std::string>> &streams);
  void remove(uint64_t conn_id);
  bool empty() const { return conns_.empty(); }
  // The streams to count (sorted): those of the connections added.
  std::vector<int64_t> streams() const;
  // Snapshots still owed (new connections, or a frame that found no room):
  // the next update has work even if no connection changed anywhere.
  bool pending() const { return owed_ > 0; }
  // `now` holds the counts of every stream of streams(). Sends each
  // identity whose count moved since the last update to the stream's
  // connections, and snapshots to those owed one. A connection whose queue
  // refuses a change is owed a snapshot instead (nothing queues unbounded).
  void update(const std::map<int64_t, PresenceCounts> &now, const Push &push);

private:
  struct Watched {
    std::string name;
    PresenceCounts counts; // as last sent
    std::vector<uint64_t> conns;
  };
  struct Conn {
    std::vector<int64_t> streams;
    std::set<int64_t> owed; // streams whose snapshot this connection still needs
  };
  std::map<int64_t, Watched> streams_;
  std::unordered_map<uint64_t, Conn> conns_;
  size_t owed_ = 0;
};

} // namespace pgbs::engine
