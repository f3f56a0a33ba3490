// The worker's streams and connections: turns ring events into SSE frames,
// keeps each stream's horizon, replays backlogs and catches up after ring
// overruns (DESIGN §3.1, §4). Runs on the worker's main thread only.
#pragma once
#include "core/auth.hpp"
#include "core/auth_audience.hpp"
#include "core/auth_gate.hpp"
#include "core/cursor.hpp"
#include "core/metrics.hpp"
#include "core/outqueue.hpp"
#include "http/server.hpp"
#include "pg/spi.hpp"
#include "shmem/shared.hpp" // after the PostgreSQL-free headers
#include "worker/ring_reader.hpp"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pgbs::worker {

struct StreamInfo {
  int64_t id = 0; // catalog id, also the stream's epoch
  std::string name;
  std::string rows_sql; // SELECT msg_id, data, event, visible_to, enqueued_us, exclude FROM <queue
                        // ∪ archive> m
  bool is_public = true;
  bool has_retention = false;
  bool hooked = true;          // capture triggers in place (auto-attached: at first subscription)
  int64_t retention_floor = 0; // highest msg_id removed by retention
};

struct Row {
  int64_t msg_id = 0;
  std::string data;
  std::optional<std::string> event, visible_to;
  int64_t enqueued_us = 0;
  int64_t commit_us = 0;  // from the ring; 0 for rows read by replay/catch-up
  bool ephemeral = false; // no table row: cannot be paged from the table
  uint64_t exclude = 0;   // broadcast(exclude => ...): this connection does not get it
};

struct HubCounters {
  uint64_t delivered = 0, dropped = 0, overruns = 0, events = 0, held_back = 0;
};

class Hub {
public:
  Hub(http::Server &server, uint32_t dboid, int worker_index);
  ~Hub(); // gives back the subscriber counts of connections still open

  // Loads the stream catalog; call at start and when the catalog version moves.
  void reload_catalog();
  // One wake-up: horizon bounds, ring drain, dispatch, horizon advance.
  // full: every stream's horizon (else only streams with connections here,
  // the others at least every 100 ms); subscribing needs a full one first.
  void cycle(bool full = false);
  // Decides a pending SSE request (404/400, or open + replay).
  void subscribe(const http::Request &req);
  // Forgets a closed connection.
  void closed(uint64_t conn_id);
  // Continues paged replays whose connection has room; true while some remain.
  bool continue_replays();
  bool has_room(uint64_t conn_id) const;
  bool replays_pending() const { return !replaying_.empty(); }
  // Durable subscribers: notes which ids reached their sockets (every loop),
  // and stores changed cursors in one statement (every cursor_flush_interval).
  void track_written();
  void flush_cursors();
  // Removes rows past each stream's retention, in batches (one worker does this).
  void apply_retention();
  // stream_stats history (stats_enabled): rows buffered, written with the cursor flush.
  void flush_history();
  void prune_history();
  // Per-stream figures for /metrics and /stats.json (no PostgreSQL calls);
  // private streams only with include_private.
  void fill_snapshot(metrics::Snapshot *out, bool include_private) const;
  // Keys subscribe() verifies credentials with (start, SIGHUP).
  void configure_auth(const auth::Secrets &s) { gate_.configure(s); }
  // Rules of visible_to labels (owned by the caller; none: labelled messages reach no one).
  void set_audiences(auth::Audiences *a) { audiences_ = a; }
  const HubCounters &counters() const { return counters_; }
  // What connections() shows of one connection; false for unknown ids.
  bool describe(uint64_t conn_id, std::string *streams, std::string *cursor,
                std::string *subscriber, std::string *state) const;

private:
  struct StreamState {
    StreamInfo info;
    cursor::StreamPosition pos;      // horizon + ids delivered above it
    mutable std::string token;       // pos encoded (see token_of)
    mutable bool token_stale = true; // pos changed since token was encoded
    std::vector<uint64_t> conns;
    shmem::StreamEntry *entry = nullptr; // shared figures of this stream
    int64_t published_horizon = 0;       // last horizon written to entry
    std::deque<Row> ephemeral;           // recent ephemeral broadcasts (memory_retention)
    std::deque<int64_t> evicted;         // ids of ephemeral broadcasts no longer held
    int64_t evicted_floor = 0;           // every evicted id not in `evicted` is <= this
    // The recent durable rows dispatched while the stream had connections,
    // with their encoded bodies, bounded by memory_retention rows and
    // queue_max_bytes: replays above tail_floor (reconnects, connections
    // catching up after a burst) are served from here instead of the table.
    // Every committed row with an id above tail_floor that this worker has
    // dispatched is here (a row dropped from it raises tail_floor to its id).
    struct TailRow {
      Row row; // data cleared: the body carries it
      std::shared_ptr<const std::string> body;
    };
    std::map<int64_t, TailRow> tail;
    std::deque<int64_t> tail_order; // dispatch order, oldest first
    size_t tail_bytes = 0;
    int64_t tail_floor = 0;
  };
  struct Sub {
    StreamState *st;
    cursor::StreamPosition pos;   // own position while not synced with the stream
    bool synced = false;          // pos == st->pos: use the stream's token
    bool replaying = false;       // paged backlog in progress (or held back)
    int64_t page_after = 0;       // replay reads ids above this
    int64_t held_at_horizon = -1; // held back at this stream horizon (-1: not held)
  };
  struct Conn {
    uint64_t id;
    bool multi = false;
    std::string subscriber;
    std::string ctx;       // audience context (the JWT's ctx claim), "" if none
    int64_t opened_us = 0; // for stream_stats durations
    // subscriber connections: ids queued, oldest first (allocated on first use:
    // an empty std::deque costs over 500 bytes)
    std::unique_ptr<std::deque<std::string>> pushed_tokens;
    uint64_t tokens_base = 0;    // push index of pushed_tokens.front()
    std::string written_token;   // last id known written to the socket
    bool cursor_frozen = false;  // a frame was dropped: stop advancing the stored cursor
    bool overflow_noted = false; // diagnostics() has its overflow entry
    uint64_t burst_seen = 0;     // burst number drained_at_burst refers to
    bool drained_at_burst = false;
    std::vector<Sub> subs;
  };

  bool load_catalog_rows(std::vector<StreamInfo> *out,
                         std::vector<std::pair<int64_t, int64_t>> *maxima, const std::string &where,
                         const std::vector<pg::Arg> &args);
  void load_streams(const std::string &where, const std::vector<pg::Arg> &args,
                    std::unordered_set<int64_t> *present = nullptr);
  StreamState *find_by_name(const std::string &name);
  StreamState *hook(StreamState *st);
  void dispatch(StreamState &st, const Row &row);
  void tail_add(StreamState &st, const Row &row, const std::shared_ptr<const std::string> &body);
  void tail_drop(StreamState &st, int64_t upto);
  void note_watched(StreamState &st, bool watched);
  // Queues one row on one subscription; false when it was held back.
  bool deliver_to(Conn &c, Sub &sub, const Row &row, const std::shared_ptr<const std::string> &body,
                  const cursor::StreamPosition *stream_before = nullptr,
                  const std::shared_ptr<const std::string> *shared_frame = nullptr);
  void hold(Conn &c, Sub &sub, int64_t from_id);
  void note_overflow(Conn &c);
  bool push(Conn &c, OutFrame f);
  void defer(Conn &c, Sub &sub, int64_t from_id);
  bool drained_at_burst_start(Conn &c);
  struct HistoryRow {
    std::string stream, event;
    double duration_ms;
    int64_t fanout;
  };
  std::vector<HistoryRow> history_; // bounded; beyond the bound counted in history_lost_
  uint64_t history_lost_ = 0;
  void record_history(const std::string &stream, const char *event, double duration_ms,
                      int64_t fanout);
  std::vector<int64_t> cycle_ids_;
  std::vector<StreamState *> cycle_states_; // same order as cycle_ids_
  std::vector<shmem::StreamEntry *> cycle_entries_;
  bool catalog_reloaded_ = false;      // since cycle_states_ was built
  std::vector<StreamState *> watched_; // streams with a connection on this worker
  int64_t last_full_us_ = 0;           // last cycle over every stream
  HorizonBounds cycle_bounds_;
  bool burst_ = false;
  uint64_t burst_no_ = 0;
  void reject(const http::Request &req, int status, const std::string &reason);
  std::string conn_token(const Conn &c) const;
  // The stream's position as a token, encoded only when asked after a change.
  static const std::string &token_of(const StreamState &st);
  void advance_horizons(const HorizonBounds &b);
  void catch_up_all();
  bool replay_page(Conn &c, Sub &sub, int64_t page);
  std::vector<Row> read_rows(const StreamInfo &si, const std::string &where,
                             const std::vector<int64_t> *ids, int64_t after, int64_t limit);
  void drop_stream_state(int64_t id, const char *reason);
  void retain_ephemeral(StreamState &st, const Row &row);
  void flush_stats(StreamState &st, int64_t commit_us);
  struct StatsBatch {
    uint64_t delivered = 0, dropped = 0, bytes = 0;
  } batch_;
  static bool missed_ephemeral(const StreamState &st, const cursor::StreamPosition &p);
  static std::shared_ptr<const std::string> encode_body(const Row &row);

  http::Server &server_;
  auth::Gate gate_;
  auth::Audiences *audiences_ = nullptr;
  // Whether connection c may get row: not excluded, and in the row's audience.
  bool may_see(const Conn &c, const Row &row) const;
  uint32_t dboid_;
  int worker_index_;
  RingReader reader_;
  uint64_t catalog_version_ = 0;
  int64_t default_retention_after_ = 0; // apply_retention's round-robin position
  std::unordered_map<int64_t, std::unique_ptr<StreamState>> streams_;
  std::unordered_map<std::string, int64_t> by_name_;
  std::unordered_map<uint64_t, Conn> conns_;
  std::vector<uint64_t> replaying_;
  std::vector<uint64_t> subscriber_conns_;
  // (subscriber, stream) -> position token, waiting for the next flush
  std::map<std::pair<std::string, std::string>, std::string> dirty_cursors_;
  void note_written_token(const Conn &c);
  HubCounters counters_;
};

} // namespace pgbs::worker
