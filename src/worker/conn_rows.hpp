// This worker's rows of connections() and presence() in shared memory
// (docs/ARCHITECTURE.md, "Presence"). Main thread only.
//
// A connection that comes or goes rewrites every row at once (presence
// counts must never see one twice or miss one). The periodic refresh of the
// figures (queued, delivered, cursor, state) goes a slice of rows per turn of
// the loop, so that it never holds the loop up for a pass over every
// connection (with thousands of them, that pass took tens of milliseconds,
// twice a second: a stall every delivery in flight waited out).
#pragma once
#include "http/server.hpp"
#include "shmem/shared.hpp"
#include "worker/hub.hpp"

#include <string>
#include <vector>

namespace pgbs::worker {

class ConnRows {
public:
  explicit ConnRows(int worker_index) : worker_(worker_index) {}
  // Every row from scratch; true when what presence reads in them moved.
  bool rewrite(const Hub &hub, const http::Server &server);
  // Starts a refresh of every row (a pass), done by step().
  void start_pass() { next_ = 0, passing_ = true; }
  bool passing() const { return passing_; }
  // Refreshes the next slice of rows. A row whose connection is no longer
  // described ends the pass and asks for a rewrite (needs_rewrite()); a row
  // whose presence content moved is announced to the presence watchers.
  void step(const Hub &hub, const http::Server &server);
  bool needs_rewrite() const { return needs_rewrite_; }

  static constexpr int kSlice = 256; // rows per turn: well under a millisecond

private:
  bool fill(const Hub &hub, uint64_t conn_id, const http::ConnectionInfo &ci,
            shmem::ConnSnapshot *r);

  int worker_;
  int next_ = 0;
  bool passing_ = false;
  bool needs_rewrite_ = false;
  uint64 digest_ = 0; // of the presence content of the last rewrite
  std::vector<shmem::ConnSnapshot> slice_;
  std::string streams_, cursor_, subscriber_, state_;
  std::vector<std::pair<int64_t, std::string>> ids_;
  std::optional<std::string> sub_;
};

} // namespace pgbs::worker
