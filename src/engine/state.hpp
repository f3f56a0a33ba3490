// The engine's per-stream and per-connection state (internal to src/engine).
#pragma once
#include "core/cursor.hpp"
#include "core/no_postgres.hpp"
#include "core/sse.hpp"
#include "engine/interfaces.hpp"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pgbs::engine {

struct Connection;

// A row's encoded event (no id line) in both framings (README "Wire
// format"): `lines` for this server's routes, `one_line` for the pgbus
// gem's, made from `lines` at its first use and then shared, so that each
// framing is encoded once per row, not per connection. A payload without
// line breaks has one form: both point at the same bytes.
struct Body {
  std::shared_ptr<const std::string> lines;
  mutable std::shared_ptr<const std::string> one_line;
  explicit operator bool() const { return lines != nullptr; }
  const std::shared_ptr<const std::string> &get(bool one) const {
    if (!one)
      return lines;
    if (!one_line)
      one_line = sse::has_one_data_line(*lines)
                     ? lines
                     : std::make_shared<const std::string>(sse::one_line_frame(*lines));
    return one_line;
  }
  // Memory held (the one-line form counted when it is bytes of its own).
  size_t bytes() const {
    return lines->size() + (one_line && one_line != lines ? one_line->size() : 0);
  }
};

constexpr size_t kMaxAborted = 1024; // Stream::aborted ranges kept per stream

// A row with its encoded body (a stream's tail, a page of a paging subscription).
struct TailRow {
  Row row; // data cleared when the body carries it
  Body body;
  int64_t at_us = 0; // when it was dispatched (memory_retention_time)
};

struct Stream {
  StreamInfo info;
  // The observer's handle (a shared-memory entry) is held only while the
  // stream is awake: it has connections here, or had within the linger, or
  // a subscription is being opened on it. A dormant stream keeps its
  // catalog row and its ephemeral retention, nothing of its position
  // (Engine::wake rebuilds that from the table).
  void *handle = nullptr;
  bool awake = false;
  bool woken_before = false;  // awake at least once since it was loaded
  bool idle_listed = false;   // awake without connections: on Engine::idle_
  int64_t idle_since_us = 0;  // since when (or since it woke)
  bool lossy = false;         // ring events were lost while it was dormant
  bool eph_unknown = false;   // first wake: ephemeral broadcasts from before this process are gone
  size_t awake_pos = 0;       // index in Engine::awake_ while awake
  uint64_t touched_round = 0; // the last round a subscription or a wake needed it
  cursor::StreamPosition pos; // horizon + ids dispatched above it
  cursor::StreamPosition pos_before; // pos before the row being dispatched was added
  // This round's run of rows for the connections in step with the stream,
  // pushed to each of them as one frame when the run ends (Engine::flush_batch).
  struct Batched {
    int64_t msg_id;
    int64_t commit_us;
    Body body;
    std::shared_ptr<const std::string> frame;  // id line included
    std::shared_ptr<const std::string> frame1; // the same in one-line framing (if wanted)
    const std::shared_ptr<const std::string> &frame_of(bool one) const {
      return one ? frame1 : frame;
    }
    cursor::StreamPosition before; // pos before this row
    StreamDelta others;            // its figures from the connections not riding
  };
  std::vector<Batched> batch;
  size_t batch_bytes = 0;
  size_t riders = 0;         // connections riding the batch
  size_t one_line_conns = 0; // connections here in the gem's framing (Connection::one_line)
  // On Engine::hot_: its horizon may move in the next round (rows came, a
  // floor holds it, a connection joined); the rounds between the full ones
  // visit only these streams.
  bool hot = false;
  mutable std::string token;       // pos encoded (see token_of() below)
  mutable bool token_stale = true; // pos changed since token was encoded
  std::vector<Connection *> conns;
  // Observer::wake is on: some subscription here may take its rows live
  // (Engine::set_wake). Off while it has no connection, or all of them page.
  bool wake_on = false;
  int64_t published_horizon = 0;
  // Recent ephemeral broadcasts (memory_retention), and the ids of those no
  // longer held (every evicted id not listed is <= evicted_floor).
  std::deque<Row> ephemeral;
  std::deque<int64_t> evicted;
  int64_t evicted_floor = 0;
  uint64_t ephemeral_seq = 0;      // last ephemeral sequence number read from the ring
  bool ephemeral_check = false;    // ring events were lost: compare with the producers' count
  uint64_t ephemeral_check_at = 0; // that count, read after the incomplete drain
  // The recent durable rows dispatched while the stream had connections, with
  // their encoded bodies: memory_retention rows, or more while they are
  // younger than memory_retention_time, never above queue_max_bytes.
  // Every row with an id above tail_floor that this process dispatched is here.
  using TailRow = engine::TailRow;
  // In id order, so the common case (ids dispatched in ascending order)
  // appends and evicts at the ends: no tree node per row (the deque
  // allocates a block per three rows) and no tree walks.
  std::deque<TailRow> tail;
  size_t tail_bytes = 0;
  size_t ephemeral_bytes = 0;
  int64_t tail_floor = 0;
  // After ring events were lost, the tail's floor is unknown until the
  // table's maximum has been read: paging reads the table meanwhile.
  bool tail_unknown = false;
  // Committed rows up to here may be missing from pos (lost ring events,
  // rows from before this process started): while the horizon is below it,
  // a new subscription pages them from the table instead of trusting pos.
  int64_t lost_upto = 0;
  bool first_bounds = false;      // no round has bounded this stream yet
  int ephemeral_floor_rounds = 0; // rounds that still raise evicted_floor after a loss
  // Ids the ring said were committed and that are not known to be in the
  // table (a read failed, or it missed them): a page that passes one the
  // table does not return announces it as deleted. Bounded (oldest dropped).
  std::set<int64_t> unread;
  // Ids above the horizon that were inserted and rolled back (Aborted ring
  // records), as ranges lo -> hi: pos covers them, and a subscription that
  // pages past them covers them too, so a rollback is not a hole in its
  // token. Bounded (kMaxAborted, lowest dropped: those stay holes until the
  // horizon passes them); emptied below the horizon.
  std::map<int64_t, int64_t> aborted;
  int64_t retry_at_us = 0; // a table read failed: none before this
  int64_t backoff_us = 0;
  // The bodies of large rows paged from the table, by id, while some
  // connection still holds them (queued or being written): a connection
  // paging the same row takes the same bytes instead of encoding a copy of
  // its own, so a large row is held about once however many connections
  // page it (Engine::paged_body). Entries whose body is gone are swept as
  // the map grows: those left are bounded by what the connections hold.
  struct PagedBody {
    std::weak_ptr<const std::string> lines, one_line;
  };
  std::map<int64_t, PagedBody> paged_bodies;
  size_t paged_sweep_at = 16;

  const std::string &token_of() const {
    if (token_stale) {
      token.clear();
      pos.encode(token);
      token_stale = false;
    }
    return token;
  }
  // Empties the tail and moves its floor to at least `upto`: every row at or
  // below it must come from the table.
  void tail_drop(int64_t upto) {
    if (tail_floor < upto)
      tail_floor = upto;
    if (tail.empty())
      return;
    if (tail_floor < tail.back().row.msg_id)
      tail_floor = tail.back().row.msg_id;
    tail.clear();
    tail_bytes = 0;
  }
};

// One stream of one connection.
struct Sub {
  Stream *st;
  cursor::StreamPosition pos;    // own position while not synced with the stream
  bool synced = false;           // pos == st->pos: use the stream's token
  bool paging = false;           // paged from tail/table (replay, lag) instead of live
  int64_t page_after = 0;        // paging reads ids above this
  int64_t held_at_horizon = -1;  // held back at this stream horizon (-1: not held)
  int64_t ephemeral_noticed = 0; // evicted ephemeral ids up to here were announced
  // The last page stopped at a row of wait_bytes that did not fit the
  // queue: while the subscription still pages from wait_after, the next
  // page waits for that much room instead of reading the row again now.
  size_t wait_bytes = 0;
  int64_t wait_after = -1;
  const cursor::StreamPosition &position() const { return synced ? st->pos : pos; }
};

// A stream a connection waits for (no such stream yet): from where it starts
// once the stream is born (the cursor's position of it, else its first row).
struct PendingSub {
  std::string name;
  bool has_pos = false;
  cursor::StreamPosition pos;
};

// One SSE connection: the engine's side. The sink's side is reached through
// `ref`, a handle valid until the engine releases it.
struct Connection {
  uint64_t id = 0;
  SinkRef ref = nullptr;
  bool multi = false;
  bool live_only = false; // a drop policy applies to it (never to durable subscribers)
  std::string subscriber;
  std::string ctx;                // audience context (the JWT's ctx claim), "" if none
  std::optional<std::string> sub; // the credential's identity (presence); none: anonymous
  bool presence = false;          // asked for pgbus:presence events (?presence=1)
  int64_t expires_at_s = 0;       // the credential's end (Unix time; 0: none): then it ends
  bool one_line = false;          // the gem's routes: one data line per event (Body)
  int64_t opened_us = 0;
  std::vector<Sub> subs;
  std::vector<PendingSub> pending; // streams not born yet (Engine::settle_pending)
  bool paging_listed = false;      // on Engine::paging_
  bool riding = false;             // on its stream's batch, from row ride_from
  size_t ride_from = 0;
  bool overflow_noted = false;
  // Durable subscribers: the token of each data frame pushed, by push index
  // (1, 2, ...), oldest first; bounded: when it is full the oldest are
  // forgotten and the stored cursor lags (never runs ahead of the socket).
  uint64_t pushed = 0;
  std::deque<std::pair<uint64_t, std::string>> pushed_tokens;
  std::string written_token;
};

} // namespace pgbs::engine
