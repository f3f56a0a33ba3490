// This worker's rows of connections() and presence() in shared memory
// (docs/ARCHITECTURE.md, "Presence"). Main thread only.
//
// Kept row by row: the connections the hub names as changed (subscribed,
// closed, a waiting stream born) get their row appended, rewritten in place
// or removed (the last row moved into its place), planned outside the lock
// and copied under it, so presence counts never see a connection twice or
// miss one. A whole rewrite (every connection from scratch) is left for
// when the hub named more changes than it keeps (or a connection found no
// room). The periodic refresh of the figures (queued, delivered, cursor,
// state) goes a slice of rows per turn of the loop, so that it never holds
// the loop up for a pass over every connection (with thousands of them,
// that pass took tens of milliseconds, twice a second: a stall every
// delivery in flight waited out).
#pragma once
#include "http/server.hpp"
#include "shmem/conns.hpp"
#include "worker/hub.hpp"

#include <string>
#include <unordered_map>
#include <vector>

namespace pgbs::worker {

class ConnRows {
public:
  explicit ConnRows(int worker_index);
  // The rows of the connections the hub named since the last call brought
  // up to date (every row, when it named too many or a connection had found
  // no room); true when what presence reads in them moved.
  bool update(Hub &hub, const http::Server &server);
  // Starts a refresh of every row (a pass), done by step().
  void start_pass() { next_ = 0, passing_ = true; }
  bool passing() const { return passing_; }
  // Refreshes the next slice of rows. A row whose connection is no longer
  // described is removed; a row whose presence content moved is announced
  // to the presence watchers. A row moved by a removal meanwhile may wait
  // for the next pass.
  void step(const Hub &hub, const http::Server &server);

  static constexpr int kSlice = 256; // rows per turn: well under a millisecond

private:
  bool fill(const Hub &hub, uint64_t conn_id, const http::ConnectionInfo &ci,
            shmem::ConnSnapshot *r);
  bool rewrite(const Hub &hub, const http::Server &server);
  // Brings the rows of `ids` to what the hub and the server say of them now.
  bool apply(const Hub &hub, const http::Server &server, const std::vector<uint64_t> &ids);
  // Copies what apply() planned into shared memory, `count` rows after it.
  void flush(int count);

  int worker_;
  int capacity_;
  int count_ = 0; // rows in shared memory (only this process writes them)
  int next_ = 0;
  bool passing_ = false;
  bool rewrite_ = true;    // from scratch at the first update
  bool truncated_ = false; // a connection found no room: rewrite after a removal
  uint64 digest_ = 0;      // of the presence content of every row (a sum)
  // Each row's connection and presence digest, and where each connection's
  // row is: private, ahead of shared memory while a turn's changes are planned.
  std::vector<uint64_t> id_at_;
  std::vector<uint64> digest_at_;
  std::unordered_map<uint64_t, int> index_;
  // A turn's changes: rows staged (at most kSlice) and the moves, applied in
  // order under the lock.
  std::vector<shmem::ConnRowMove> ops_;
  std::vector<shmem::ConnSnapshot> staged_;
  std::vector<uint64_t> changed_, stale_;
  std::vector<shmem::ConnSnapshot> slice_;
  std::string streams_, cursor_, subscriber_, state_;
  std::vector<std::pair<int64_t, std::string>> ids_;
  std::optional<std::string> sub_;
};

} // namespace pgbs::worker
