// The delivery engine: streams, subscriptions, horizons, the per-stream
// tail, ephemeral retention, paging (replays and lag), durable-cursor
// bookkeeping. Plain C++ without PostgreSQL; it reaches the outside only
// through RowSource, FrameSink and Observer (interfaces.hpp), so the
// simulator in test/engine drives exactly this code. docs/ARCHITECTURE.md,
// "The engine".
#pragma once
#include "core/auth_admit.hpp"
#include "core/auth_audience.hpp"
#include "core/auth_gate.hpp"
#include "core/cursor.hpp"
#include "core/no_postgres.hpp"
#include "core/wire.hpp"
#include "engine/interfaces.hpp"
#include "shmem/ring_record.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace pgbs::engine {

// Everything the engine is tuned by, passed in as one value. The fields
// that settings drive have no defaults here: settings::engine_config()
// (src/settings/configs.hpp) fills them, from the defaults in Settings too.
struct Config {
  size_t queue_max_events = 0;
  size_t queue_max_bytes = 0;
  // Lag: durable frames are never dropped (a full queue pages them later).
  // The drop policies make a connection live-only: the sink's queue drops.
  OverflowPolicy overflow_policy{};
  size_t memory_retention = 0;
  // The durable tail also keeps every row dispatched within this time, even
  // beyond memory_retention rows (still within queue_max_bytes): a
  // connection on a fast stream that lags this long pages from memory.
  int64_t memory_retention_us = 0;
  size_t replay_page_size = 0;
  // Payload bytes one table read holds: a read stops at the row that
  // reaches it (so one row is always read, however large).
  size_t replay_page_bytes = 0;
  std::string default_event;
  bool stats_enabled = false;
  // History with the pgbus gem's semantics (stats_table): one broadcast row
  // per run of a stream's rows dispatched together, its fan-out the
  // connections it reached; otherwise one per row.
  bool stats_per_batch = false;
  bool default_retention = false; // streams without their own retention get the default one
  size_t max_token_bytes = cursor::kMaxTokenBytes; // per stream of a token
  size_t max_pending_streams = 0; // distinct streams this process waits for at once
  size_t negative_cache_size = 0; // unknown names remembered (no catalog read when asked again)
  // How long a stream without connections here keeps its shared-memory
  // entry (a reconnect within it finds the stream as it was); released at
  // once when the observer says entries run short.
  int64_t stream_linger_us = 0;
};

// What bounds each stream's horizon, read from shared memory before the
// ring is drained: the committed maximum first, then the lowest floor any
// in-flight producer published.
struct HorizonBounds {
  std::vector<std::pair<int64_t, int64_t>> max_committed; // (stream_id, M)
  std::vector<std::pair<int64_t, int64_t>> min_floor;     // (stream_id, lowest floor)
  bool frozen = false;                                    // a producer holds every horizon
  void lower_floor(int64_t stream_id, int64_t floor);
  const int64_t *floor_of(int64_t stream_id) const;
};

// An SSE request as the engine sees it.
struct Subscribe {
  uint64_t conn_id = 0;
  std::vector<std::string> streams;
  const std::string *cursor = nullptr; // Last-Event-ID or ?since, already chosen
  std::string replay;                  // ?replay=
  std::string subscriber;
  std::string remote_addr;
  auth::Credentials creds; // as the request presented them (auth::Gate checks them)
  int64_t now_unix_s = 0;  // the Unix time to check them at
  bool presence = false; // ?presence=1: needs a credential that covers every stream
  // The pgbus gem's routes: its framing (one data line per event) and its
  // preamble (no pgbus:connected frame unless `connected`).
  bool gem = false;
  bool connected = true;
};

struct Counters {
  uint64_t queued = 0, overflow_dropped = 0, catch_ups = 0, events = 0, held_back = 0;
  uint64_t deferred = 0;      // frames that waited for room (lag) instead of being dropped
  uint64_t read_failures = 0; // row-source calls that failed (retried later)
  uint64_t gaps = 0;          // gap notices sent
  uint64_t catalog_reads = 0; // catalog queries (load_catalog calls)
  uint64_t rows_read = 0;     // rows the tables returned (rows_by_id, rows_after)
};

struct Stream;
struct TailRow;
struct Connection;
struct Sub;
struct Body;

// The engine is admission's catalog (auth::admit decides, the engine looks
// streams up).
class Engine final : private auth::Catalog {
public:
  Engine(const Config &cfg, RowSource &rows, FrameSink &sink, Observer &obs);
  ~Engine(); // releases every connection still open
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  void configure(const Config &cfg);
  // Keys subscribe() verifies credentials with (start, SIGHUP).
  void configure_auth(const auth::Secrets &s) { gate_.configure(s); }
  // Rules of visible_to labels (owned by the caller; none: labelled messages reach no one).
  void set_audiences(auth::Audiences *a) { audiences_ = a; }
  // The clock (microseconds, the ring's commit_us epoch); set before each call.
  void set_now(int64_t now_us) { now_us_ = now_us; }

  // Loads the catalog; false when the source failed (the old one is kept).
  bool reload_catalog();
  // Loads only these streams (met one at a time: a subscription, a commit),
  // so that many streams do not make every miss a full reload.
  bool load_streams(const CatalogFilter &which);
  bool knows(int64_t stream_id) const;
  // What the catalog counters say before a decision: a change of the version
  // or of the births forgets the unknown names. `complete`: the last full
  // load is of this version, so every public stream is known and an
  // anonymous request for an unknown name is refused without a catalog read.
  void catalog_state(uint64_t version, uint64_t births, bool complete);
  // Subscriptions waiting for streams not born yet: looks their names up
  // (one query) when a birth was announced; true when nothing is left to read.
  bool pending_lookup_due() const { return pending_lookup_; }
  bool load_pending();
  // Turns waiting subscriptions whose stream is now known into live ones,
  // from the stream's first row (hooking its queue if needed). True when a
  // stream is loaded but not bounded yet: run a full round, then call again.
  bool settle_pending();
  size_t pending_count() const { return pending_subs_; }
  // How soon the next round must run for streams without connections here
  // to go dormant once their linger is over (release_idle checks at this
  // cadence); -1 when none waits. A worker with no connections left is not
  // woken otherwise, and would hold their entries indefinitely.
  long release_check_ms() const {
    if (idle_.empty())
      return -1;
    return (long)std::max<int64_t>(1, std::min<int64_t>(100 * 1000, cfg_.stream_linger_us) / 1000);
  }
  // Connections whose waiting subscriptions started since the last call.
  std::vector<uint64_t> take_born() { return std::exchange(born_conns_, {}); }
  // The streams whose horizon bounds the next round needs (every stream when
  // `full`, else the ones with connections here, all at least every 100 ms).
  const std::vector<int64_t> &round_streams(bool full);
  // The observer's handles of those streams, in the same order.
  const std::vector<void *> &round_handles() const { return round_handles_; }
  // One wake-up: the events drained from the ring in commit order, whether
  // the drain was complete (no lap, no overrun), and the bounds read before it.
  void round(std::vector<ring::Event> &events, bool complete, const HorizonBounds &bounds);

  // Decides an SSE request (reject, or open and start its replay). False
  // (nothing decided) when it would open a stream and no full round ran since
  // the last drain (`bounded` false), or a stream it names was just loaded and
  // no round has bounded it yet: run a full round, then call again with
  // `again` set. A refusal needs no round.
  bool subscribe(const Subscribe &req, bool again = false, bool bounded = true);
  // The sink closed the connection: forget it.
  void closed(uint64_t conn_id);
  // Continues paged replays and lagging connections that have room. True
  // while some paging connection has room (it can move at the next call); one
  // whose queue is full waits for its socket to drain, which needs no timer.
  bool continue_paging();
  bool paging_pending() const;

  void track_written();   // every loop: what reached the sockets
  bool flush_cursors();   // every cursor_flush_interval
  void apply_retention(); // one worker, every retention_interval
  bool flush_history();   // stats_enabled
  bool prune_history(int64_t max_age_s);

  const Counters &counters() const { return counters_; }
  size_t stream_count() const { return streams_.size(); }
  size_t awake_count() const { return awake_.size(); }
  size_t connection_count() const { return conns_.size(); }
  // What connections() shows of one connection; false for unknown ids.
  bool describe(uint64_t conn_id, std::string *streams, std::string *cursor,
                std::string *subscriber, std::string *state) const;
  // What presence needs of a connection: its streams (catalog id, name),
  // the credential's sub, whether it asked for presence events. False for
  // unknown ids.
  bool presence_of(uint64_t conn_id, std::vector<std::pair<int64_t, std::string>> *streams,
                   std::optional<std::string> *sub, bool *wants) const;
  // Ends the connections whose credential expired before now_unix_s (a JWT's
  // exp, with the leeway it is accepted with): each gets a pgbus:shutdown
  // frame with reason credential_expired, then its stream ends, so the
  // client comes back with a fresh token. Returns how many.
  size_t end_expired(int64_t now_unix_s);
  // Ends the connection with this id (conn_id != 0) or every connection
  // whose credential's sub is `sub` (pgbus_stream.disconnect()), with a
  // pgbus:shutdown frame with reason `reason`. Returns how many.
  size_t end_connections(uint64_t conn_id, const std::string &sub, const std::string &reason);
  // Queues a control frame (no id line) when the connection's queue has
  // room for it; false when it has none or the connection is unknown.
  bool push_control(uint64_t conn_id, const std::string &frame);
  struct StreamView {
    std::string name;
    int64_t id, horizon;
    int64_t max_committed; // the tables' maximum at the last catalog load
    bool is_public;
    void *handle;
  };
  std::vector<StreamView> streams() const;
  // Memory the engine holds for tails and ephemeral retention (bytes, approximate).
  size_t retained_bytes() const;
  size_t tail_rows() const; // rows in the streams' tails
  // The handles of the streams with a subscription that takes rows live (is
  // not paging): the simulator checks that producers wake this process for
  // each of them.
  std::vector<void *> live_handles() const;
  // Ring events of the last round that a live subscription took: the worker
  // reads the ring on a timer only while these come fast.
  size_t live_events() const { return live_events_; }

private:
  Stream *find_by_name(const std::string &name);
  // find_by_name, else the catalog (one query), unless the name is known to
  // be unknown; *failed when the catalog could not be read.
  Stream *lookup(const std::string &name, bool *failed);
  // auth::Catalog: what admission reads (find_by_name, else lookup when
  // may_read or the catalog held here is not complete).
  Found find_stream(const std::string &name, bool may_read, bool *is_public) override;
  Found find_signed_stream(const std::string &logical, std::string *name) override;
  // The steps of subscribe(), in order. Each returns false when it answered
  // the request (refused it, or told it to come back: turn_away).
  bool turn_away(const Subscribe &req, int status, const std::string &reason);
  std::unique_ptr<Connection> new_connection(const Subscribe &req, const auth::Admission &adm);
  bool attach(const Subscribe &req, Connection &c, const std::vector<std::string> &open);
  bool start_cursor(const Subscribe &req, Connection &c, cursor::Cursor *cur, bool *have);
  bool place(const Connection &c, Sub &sub, const cursor::Cursor *cur, int64_t replay_n,
             std::string *gaps);
  bool await(const Subscribe &req, const Connection &c, std::vector<std::string> *awaited_now);
  std::string preamble(const Subscribe &req, const Connection &c, const std::string &since,
                       const std::string &names, const std::string &gaps) const;
  void enter(const Subscribe &req, std::unique_ptr<Connection> c, const std::string &names,
             const std::string &since);
  void forget_unknown();
  void end_connection(Connection &c, const std::string &reason);
  void forget_expiry(const Connection &c);
  void unpend(const std::string &name, Connection *c);
  void start_pending(Stream &st);
  // Takes the shared-memory entry of a dormant stream and restarts its
  // position from the table's maximum; false (nothing changed) when the
  // table or shared memory could not be read.
  enum class Wake { Ok, ReadFailed, NoRoom };
  Wake wake(Stream &st);
  void sleep(Stream &st);
  void idle(Stream &st);
  void release_idle();
  Stream *hook(Stream *st);
  void drop_stream(int64_t id, const char *reason);
  size_t dispatch_slice(std::vector<ring::Event> &events, size_t begin);
  void dispatch(Stream &st, const Row &row);
  void set_wake(Stream &st, bool on);
  bool rides(const Connection &c, const Sub &sub) const;
  bool fits(const Connection &c, size_t events, size_t bytes) const;
  void flush_batch();
  void unread(Stream &st, int64_t id);
  void remember_unread(Stream &st, int64_t id);
  void deleted(Stream &st, int64_t id, wire::GapReason reason = wire::GapReason::Deleted);
  void late(Stream &st, int64_t id);
  void aborted(Stream &st, int64_t lo, int64_t hi);
  void cover_aborted(const Stream &st, Sub &sub, int64_t after, int64_t upto);
  void ephemeral_lost(Stream &st, uint64_t lost);
  void advance_horizons(const HorizonBounds &b);
  void catch_up_all();
  void settle_tails();
  void demote(Connection &c, size_t sub, int64_t from_id);
  bool deliver(Connection &c, size_t sub, const Row &row, const Body &body,
               const std::shared_ptr<const std::string> *shared_frame = nullptr);
  bool page(Connection &c, size_t sub);
  size_t need(const Sub &sub) const;
  size_t need(const Connection &c) const;
  bool take_page(Connection &c, size_t sub, std::vector<TailRow> *items, bool *last);
  Body paged_body(Stream &st, Row &row, bool one_line);
  bool push(Connection &c, OutFrame f, bool data);
  void notice(Connection &c, size_t sub, wire::Gap gap);
  bool room(const Connection &c, size_t bytes) const;
  bool lags(const Connection &c) const;
  std::string conn_token(const Connection &c) const;
  void note_written_token(Connection &c);
  void record_history(const std::string &stream, const char *event, double ms, int64_t fanout);
  void flush_stats(Stream &st, int64_t commit_us);
  void end_stats_batch(); // records the run flush_stats gathered (stats_per_batch)
  void tail_add(Stream &st, const Row &row, const Body &body);
  void
  tail_trim(Stream &st); // evicts what memory_retention(_time) and queue_max_bytes no longer hold
  void retain_ephemeral(Stream &st, const Row &row);
  bool read_ok(bool ok);
  std::shared_ptr<const std::string> encode_body(const Row &row) const;
  // Bodies up to this size are also copied into a frame with the id line
  // (shared by the connections in step with the stream, and batched).
  static constexpr size_t kJoinedFrameMax = 64 * 1024;
  // The per-connection, per-message visibility rule (audiences); applied on
  // every path a row takes to a connection: live, tail and table replay.
  bool may_see(const Connection &c, const Row &row) const;

  Config cfg_;
  RowSource &rows_;
  FrameSink &sink_;
  Observer &obs_;
  int64_t now_us_ = 0;
  std::unordered_map<int64_t, std::unique_ptr<Stream>> streams_;
  std::unordered_map<std::string, int64_t> by_name_;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  std::vector<Connection *> paging_;
  // Credential end -> connection (Connection::expires_at_s), for end_expired().
  std::multimap<int64_t, uint64_t> expiries_;
  Stream *batching_ = nullptr;             // the stream whose run of rows is batched (at most one)
  static constexpr size_t kBatchRows = 64; // rows in one batch at most
  std::vector<Connection *> subscriber_conns_;
  std::vector<Stream *> watched_;
  std::vector<Stream *> hot_; // streams a round between the full ones visits (Stream::hot)
  void heat(Stream &st);
  std::vector<Stream *> awake_; // streams holding their entry (the full rounds' streams)
  std::vector<Stream *> idle_;  // awake streams without connections (some may have one again)
  uint64_t round_no_ = 0;
  std::vector<uint64_t> born_conns_;
  std::vector<Stream *> unsettled_; // woken with the entry's ephemeral count, before a drain
  int64_t last_release_us_ = 0;
  std::vector<int64_t> round_ids_;
  std::vector<void *> round_handles_;
  std::vector<Stream *> round_bounded_; // the streams of round_ids_, until round() cools them
  int64_t last_full_us_ = -1;
  bool tails_unknown_ = false;
  auth::Gate gate_;
  auth::Audiences *audiences_ = nullptr;
  int64_t default_retention_after_ = 0; // apply_retention's round-robin position
  std::vector<Stream *> eph_checks_;    // streams to compare after the next drain
  std::map<std::pair<std::string, std::string>, std::string> dirty_cursors_;
  std::vector<HistoryRow> history_;
  struct StatsBatch {
    Stream *st = nullptr;
    int64_t first_commit_us = 0, fanout = 0;
  } stats_batch_;
  uint64_t history_lost_ = 0;
  StreamDelta batch_;
  Counters counters_;
  size_t live_events_ = 0;
  // Names the catalog did not have (bounded, oldest forgotten first).
  std::unordered_set<std::string> unknown_;
  std::deque<std::string> unknown_order_;
  uint64_t cat_version_ = 0, cat_births_ = 0;
  bool catalog_complete_ = false;
  bool full_ok_ = false; // no stream of the last full load went missing since
  // Waiting subscriptions by stream name (see Connection::pending).
  std::map<std::string, std::vector<Connection *>> pending_;
  size_t pending_subs_ = 0;
  bool pending_lookup_ = false;
  int64_t pending_retry_us_ = 0; // a hook or lookup failed: not again before this
};

} // namespace pgbs::engine
