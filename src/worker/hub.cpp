// Hub: ring events -> SSE frames, horizons, replays and catch-up.
#include "worker/hub.hpp"
#include "core/sse.hpp"
#include "pg/spi.hpp"
#include "pgbus_stream.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <memory>
#include <unordered_set>

extern "C" {
#include "utils/timestamp.h"
}

namespace pgbs::worker {

namespace {

std::string hex_id(uint64_t id) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%016" PRIx64, id);
  return buf;
}

int64_t to_i64(const std::optional<std::string> &s) { return s ? std::stoll(*s) : 0; }

std::string control_event(const std::string &event, const std::string &json) {
  std::string out;
  sse::append_event(out, "", event, json);
  return out;
}

} // namespace

Hub::Hub(http::Server &server, uint32_t dboid, int worker_index)
    : server_(server), dboid_(dboid), worker_index_(worker_index), reader_(dboid) {
  shmem::clear_subscriber_bits(worker_index_); // left by a previous process in this slot
  reader_.start();
  pg_atomic_write_u64(&shmem::shared()->worker_ring_pos[worker_index_], reader_.position());
}

// Producers wake this worker for a stream only while the bit is set (see
// StreamEntry::subscriber_workers). Setting it is a full barrier; the caller
// drains the ring after it (the worker sets its own latch after subscribing),
// so a commit that missed the bit is still picked up at once.
void Hub::note_watched(StreamState &st, bool watched) {
  if (watched)
    watched_.push_back(&st);
  else
    watched_.erase(std::remove(watched_.begin(), watched_.end(), &st), watched_.end());
  if (!st.entry)
    return;
  if (watched)
    pg_atomic_fetch_or_u32(&st.entry->subscriber_workers, 1u << worker_index_);
  else
    pg_atomic_fetch_and_u32(&st.entry->subscriber_workers, ~(1u << worker_index_));
}

Hub::~Hub() {
  std::vector<uint64_t> ids;
  for (auto &[id, c] : conns_)
    ids.push_back(id);
  for (uint64_t id : ids)
    closed(id);
  for (auto &[id, st] : streams_)
    shmem::release_stream(st->entry, worker_index_);
}

bool Hub::load_catalog_rows(std::vector<StreamInfo> *out,
                            std::vector<std::pair<int64_t, int64_t>> *maxima,
                            const std::string &where, const std::vector<pg::Arg> &args) {
  pg::SpiTx tx;
  pg::Table ext = tx.query("SELECT 1 FROM pg_extension WHERE extname = 'pgbus_stream'");
  if (ext.rows() == 0) {
    tx.commit();
    return false;
  }
  // The committed maximum of each queue (and archive) seeds the horizon.
  pg::Table t = tx.query(
      "SELECT s.id, s.name, s.public, pgbus_stream._rows_sql(s), "
      "       s.retention_floor, (s.retention IS NOT NULL OR s.retention_max IS NOT NULL), "
      "       format('SELECT greatest((SELECT max(msg_id) FROM %I.%I), %s)', s.queue_schema, "
      "s.queue_table, "
      "              CASE WHEN s.archive_table IS NOT NULL AND "
      "                        to_regclass(format('%I.%I', s.queue_schema, s.archive_table)) IS "
      "NOT NULL "
      "                   THEN format('(SELECT max(msg_id) FROM %I.%I)', s.queue_schema, "
      "s.archive_table) "
      "                   ELSE '0' END), "
      // hooked through to_jsonb: a 0.1.0 catalog (library updated, ALTER
      // EXTENSION not run yet) has no such column and must still be served.
      "       coalesce((to_jsonb(s) ->> 'hooked')::boolean, true) "
      "FROM pgbus_stream.streams s "
      "WHERE to_regclass(format('%I.%I', s.queue_schema, s.queue_table)) IS NOT NULL " +
          (where.empty() ? std::string() : " AND (" + where + ")") + " ORDER BY s.id",
      args);
  tx.commit();
  // Each maximum locks its tables until commit: commit every few hundred
  // streams so that a database with many queues stays within the lock table.
  std::unique_ptr<pg::SpiTx> mtx;
  for (size_t r = 0; r < t.rows(); r++) {
    if (r % 200 == 0) {
      if (mtx)
        mtx->commit();
      mtx = std::make_unique<pg::SpiTx>();
    }
    StreamInfo si;
    si.id = to_i64(t.at(r, 0));
    si.name = t.at(r, 1).value_or("");
    si.is_public = t.at(r, 2).value_or("t") == "t";
    si.rows_sql = t.at(r, 3).value_or("");
    si.retention_floor = to_i64(t.at(r, 4));
    si.has_retention = t.at(r, 5).value_or("f") == "t";
    si.hooked = t.at(r, 7).value_or("t") == "t";
    pg::Table m = mtx->query(t.at(r, 6).value_or("SELECT 0"));
    maxima->emplace_back(si.id, m.rows() ? to_i64(m.at(0, 0)) : 0);
    out->push_back(std::move(si));
  }
  if (mtx)
    mtx->commit();
  return true;
}

void Hub::reload_catalog() {
  catalog_version_ = reader_.catalog_version();
  std::unordered_set<int64_t> present;
  load_streams("", {}, &present);
  std::vector<int64_t> gone;
  for (auto &[id, st] : streams_)
    if (!present.count(id))
      gone.push_back(id);
  for (int64_t id : gone)
    drop_stream_state(id, "stream dropped");
}

// Loads the catalog rows matching `where` (a condition on s; none = all)
// and adds or refreshes their streams; others stay as they are. Streams the
// worker meets one at a time (a subscription, a commit) are loaded this way,
// so that their number does not make every miss a full reload.
void Hub::load_streams(const std::string &where, const std::vector<pg::Arg> &args,
                       std::unordered_set<int64_t> *present) {
  catalog_reloaded_ = true; // StreamState pointers held by cycle() may be gone
  std::vector<StreamInfo> infos;
  std::vector<std::pair<int64_t, int64_t>> maxima;
  load_catalog_rows(&infos, &maxima, where, args);
  for (auto &[id, max] : maxima)
    shmem::raise_max_committed(dboid_, id, max);
  for (auto &si : infos) {
    if (present)
      present->insert(si.id);
    auto it = streams_.find(si.id);
    if (it != streams_.end()) {
      it->second->info = si;
      continue;
    }
    auto st = std::make_unique<StreamState>();
    st->entry = shmem::acquire_stream(dboid_, si.id, worker_index_);
    if (st->entry)
      for (auto &[id, max] : maxima)
        if (id == si.id)
          shmem::advance_max_committed(st->entry, max); // a new entry starts at 0
    st->pos.epoch = si.id;
    for (auto &[id, max] : maxima)
      if (id == si.id) {
        st->pos.advance(max);
        st->tail_floor = max; // rows up to here were never dispatched by this process
      }
    st->info = std::move(si);
    st->token_stale = true;
    by_name_[st->info.name] = st->info.id;
    streams_[st->info.id] = std::move(st);
  }
}

void Hub::drop_stream_state(int64_t id, const char *reason) {
  auto it = streams_.find(id);
  if (it == streams_.end())
    return;
  for (uint64_t cid : std::vector<uint64_t>(it->second->conns)) {
    server_.close(cid, reason);
    closed(cid);
  }
  auto bn = by_name_.find(it->second->info.name);
  if (bn != by_name_.end() && bn->second == id)
    by_name_.erase(bn);
  watched_.erase(std::remove(watched_.begin(), watched_.end(), it->second.get()), watched_.end());
  shmem::release_stream(it->second->entry, worker_index_);
  streams_.erase(it);
}

// An auto-attached stream gets its capture triggers at its first
// subscription (until then its producers pay nothing). The rows committed
// before are all in the table (CREATE TRIGGER waits for inserts in flight),
// so the stream is loaded afresh: its position starts at the table's maximum
// and replays read the rest from the table. Nobody was subscribed to it.
Hub::StreamState *Hub::hook(StreamState *st) {
  const int64_t id = st->info.id;
  if (!st->conns.empty()) { // another worker hooked it, this one's catalog row is older
    st->info.hooked = true;
    return st;
  }
  {
    pg::SpiTx tx;
    tx.query("SET LOCAL lock_timeout = '2s'", {}, false);
    tx.query("SELECT pgbus_stream._hook_triggers($1)", {pg::Arg::int8(id)}, false);
    tx.commit();
  }
  drop_stream_state(id, "stream hooked");
  load_streams("s.id = $1", {pg::Arg::int8(id)});
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

Hub::StreamState *Hub::find_by_name(const std::string &name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    return nullptr;
  auto st = streams_.find(it->second);
  return st == streams_.end() ? nullptr : st->second.get();
}

std::vector<Row> Hub::read_rows(const StreamInfo &si, const std::string &where,
                                const std::vector<int64_t> *ids, int64_t after, int64_t limit) {
  std::vector<Row> rows;
  pg::SpiTx tx;
  std::vector<pg::Arg> args;
  if (ids)
    args.push_back(pg::Arg::int8_array(*ids));
  else {
    args.push_back(pg::Arg::int8(after));
    args.push_back(pg::Arg::int8(limit));
  }
  pg::Table t = tx.query(si.rows_sql + " " + where, args);
  tx.commit();
  rows.reserve(t.rows());
  for (size_t r = 0; r < t.rows(); r++) {
    Row row;
    row.msg_id = to_i64(t.at(r, 0));
    row.data = t.at(r, 1).value_or("");
    row.event = t.at(r, 2);
    row.visible_to = t.at(r, 3);
    row.enqueued_us = to_i64(t.at(r, 4));
    if (t.ncols > 5 && t.at(r, 5))
      auth::parse_connection_id(*t.at(r, 5), &row.exclude);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::shared_ptr<const std::string> Hub::encode_body(const Row &row) {
  auto body = std::make_shared<std::string>();
  body->reserve(row.data.size() + 48);
  // An event name from a row written straight into the queue may be anything:
  // one the SSE framing cannot carry falls back to the default.
  const char *fallback = guc::default_event ? guc::default_event : "";
  const bool named = row.event && !row.event->empty() && sse::valid_event_name(*row.event);
  sse::append_event(*body, "", named ? *row.event : fallback, row.data);
  return body;
}

const std::string &Hub::token_of(const StreamState &st) {
  if (st.token_stale) {
    st.token.clear();
    st.pos.encode(st.token);
    st.token_stale = false;
  }
  return st.token;
}

std::string Hub::conn_token(const Conn &c) const {
  if (!c.multi) {
    const Sub &s = c.subs[0];
    if (s.synced)
      return token_of(*s.st);
    std::string out;
    s.pos.encode(out);
    return out;
  }
  std::string out;
  for (const Sub &s : c.subs) {
    if (!out.empty())
      out += ',';
    out += s.st->info.name;
    out += ':';
    (s.synced ? s.st->pos : s.pos).encode(out);
  }
  return out;
}

bool Hub::deliver_to(Conn &c, Sub &sub, const Row &row,
                     const std::shared_ptr<const std::string> &body,
                     const cursor::StreamPosition *stream_before,
                     const std::shared_ptr<const std::string> *shared_frame) {
  cursor::StreamPosition before;
  if (!sub.synced) {
    if (sub.replaying && row.msg_id > sub.page_after)
      return true; // the paged replay will read it
    if (sub.pos.covers(row.msg_id))
      return true;
    before = sub.pos;
    sub.pos.add(row.msg_id);
  }
  // A burst (one wake-up brought more events than half a queue) must not
  // overflow a connection that was keeping up: its durable rows are paged
  // from the table instead, as a replay, when its queue has room again.
  // Takes the row back out of the subscription's position before a deferral.
  auto undo = [&] {
    if (sub.synced) {
      sub.pos = stream_before ? *stream_before : sub.st->pos;
      sub.synced = false;
    } else {
      sub.pos = std::move(before);
    }
  };
  if (burst_ && !row.ephemeral && drained_at_burst_start(c) && !has_room(c.id)) {
    undo();
    defer(c, sub, row.msg_id);
    return false;
  }
  // The one place every path (live, replay, tail) decides who gets a row.
  // A hidden row stays in the position, so later ones are not held up.
  if (!may_see(c, row))
    return true;
  // Fast path: a single-stream subscription in step with its stream shares
  // one encoded frame (id line included) with every such connection.
  if (sub.synced && !c.multi && shared_frame && c.subscriber.empty()) {
    OutFrame f;
    f.body = *shared_frame;
    push(c, std::move(f));
    return true;
  }
  std::string token = conn_token(c);
  if (token.size() > cursor::kMaxTokenBytes) {
    // Too many ids above the horizon to name in a token: hold this id (and
    // what follows) back until the horizon moves, rather than send an id the
    // client could not resume from.
    undo();
    hold(c, sub, row.msg_id);
    return false;
  }
  OutFrame f;
  f.head.reserve(token.size() + 5);
  f.head.append("id: ").append(token).append("\n");
  f.body = body;
  if (push(c, std::move(f)) && !c.subscriber.empty() && !c.cursor_frozen) {
    // Bounded like the queue: more ids than it can hold means frames were
    // dropped, and a frozen cursor needs no more of them.
    if (!c.pushed_tokens)
      c.pushed_tokens = std::make_unique<std::deque<std::string>>();
    if (c.pushed_tokens->size() > 2 * (size_t)guc::queue_max_events + 16) {
      c.cursor_frozen = true;
      c.pushed_tokens.reset();
    } else {
      c.pushed_tokens->push_back(std::move(token));
    }
  }
  return true;
}

// Queues one frame and counts the outcome; true when it was queued.
bool Hub::may_see(const Conn &c, const Row &row) const {
  if (row.exclude != 0 && row.exclude == c.id)
    return false;
  if (!row.visible_to || row.visible_to->empty())
    return true;
  return audiences_ && audiences_->visible(c.ctx, *row.visible_to);
}

bool Hub::push(Conn &c, OutFrame f) {
  const size_t bytes = f.size();
  if (server_.push(c.id, std::move(f)) == OutQueue::PushResult::Queued) {
    counters_.delivered++;
    batch_.delivered++;
    batch_.bytes += bytes;
    return true;
  }
  counters_.dropped++;
  batch_.dropped++;
  note_overflow(c);
  return false;
}

void Hub::note_overflow(Conn &c) {
  if (c.overflow_noted)
    return;
  c.overflow_noted = true;
  shmem::record_diagnostic(worker_index_, c.id, "overflow", c.subs[0].st->info.name.c_str(),
                           ("queue full, policy " + std::to_string(guc::overflow_policy)).c_str());
}

// True when the connection's queue was empty when this burst began (so it
// keeps up and only the burst's size would overflow it).
bool Hub::drained_at_burst_start(Conn &c) {
  if (c.burst_seen != burst_no_) {
    c.burst_seen = burst_no_;
    c.drained_at_burst = server_.queued_events(c.id) == 0;
  }
  return c.drained_at_burst;
}

// Stops live delivery of from_id and later ids to this subscription; a paged
// replay sends them. A live subscription had every visible id below from_id;
// a replaying one had every visible id up to page_after.
void Hub::defer(Conn &c, Sub &sub, int64_t from_id) {
  if (!sub.replaying) {
    sub.replaying = true;
    sub.page_after = from_id - 1;
  } else {
    sub.page_after = std::min(sub.page_after, from_id - 1);
  }
  if (std::find(replaying_.begin(), replaying_.end(), c.id) == replaying_.end())
    replaying_.push_back(c.id);
}

void Hub::hold(Conn &c, Sub &sub, int64_t from_id) {
  counters_.held_back++;
  defer(c, sub, from_id);
  sub.held_at_horizon = sub.st->pos.horizon; // paging resumes when the horizon moves
}

void Hub::record_history(const std::string &stream, const char *event, double duration_ms,
                         int64_t fanout) {
  if (!guc::stats_enabled)
    return;
  if (history_.size() >= 100000) { // bounded between two flushes
    history_lost_++;
    return;
  }
  history_.push_back(HistoryRow{stream, event, duration_ms, fanout});
}

void Hub::flush_history() {
  if (history_.empty())
    return;
  std::string json = "[";
  char num[64];
  for (const HistoryRow &h : history_) {
    if (json.size() > 1)
      json += ',';
    snprintf(num, sizeof(num), "%.3f", h.duration_ms);
    json += "{\"s\":\"" + sse::json_escape(h.stream) + "\",\"e\":\"" + h.event + "\",\"d\":" + num +
            ",\"f\":" + std::to_string(h.fanout) + "}";
  }
  json += "]";
  pg::SpiTx tx;
  tx.query(
      "INSERT INTO pgbus_stream.stream_stats (stream_name, event_type, duration_ms, fanout) "
      "SELECT s, e, d, f FROM jsonb_to_recordset($1::jsonb) AS r(s text, e text, d float8, f int)",
      {pg::Arg::txt(json)}, false);
  tx.commit();
  history_.clear();
}

void Hub::prune_history() {
  pg::SpiTx tx;
  tx.query(
      "DELETE FROM pgbus_stream.stream_stats WHERE id IN (SELECT id FROM pgbus_stream.stream_stats "
      "WHERE created_at < now() - make_interval(secs => $1) ORDER BY id LIMIT 10000)",
      {pg::Arg::int8(guc::stats_max_age_s)}, false);
  tx.commit();
}

void Hub::flush_stats(StreamState &st, int64_t commit_us) {
  if (guc::stats_enabled && commit_us > 0) {
    const double ms = (double)((int64_t)GetCurrentTimestamp() - commit_us) / 1000.0;
    record_history(st.info.name, "broadcast", ms, (int64_t)batch_.delivered);
  }
  if (st.entry) {
    shmem::StreamStats *ss = &st.entry->stats;
    if (batch_.delivered)
      pg_atomic_fetch_add_u64(&ss->delivered, batch_.delivered);
    if (batch_.dropped)
      pg_atomic_fetch_add_u64(&ss->overflow_dropped, batch_.dropped);
    if (batch_.bytes)
      pg_atomic_fetch_add_u64(&ss->bytes_queued, batch_.bytes);
    if (commit_us > 0 && batch_.delivered) {
      int64_t now = (int64_t)GetCurrentTimestamp();
      shmem::record_latency(&ss->latency, now, now - commit_us);
    }
  }
  batch_ = StatsBatch();
}

void Hub::dispatch(StreamState &st, const Row &row) {
  if (st.pos.covers(row.msg_id))
    return; // already delivered (catch-up and ring can both carry a row)
  counters_.events++;
  if (st.conns.empty()) {
    st.pos.add(row.msg_id);
    st.token_stale = true;     // encoded when someone needs it
    tail_drop(st, row.msg_id); // nobody to replay to: the tail starts above it
    return;
  }
  // Near the token bound, keep the position without this id for holds.
  const bool near_bound = token_of(st).size() + 48 > cursor::kMaxTokenBytes || burst_;
  cursor::StreamPosition before;
  if (near_bound)
    before = st.pos;
  st.pos.add(row.msg_id);
  st.token_stale = true;
  auto body = encode_body(row);
  if (!row.ephemeral) // ephemeral ones are retained apart (retain_ephemeral)
    tail_add(st, row, body);
  // The whole frame for connections in step with the stream, when the
  // stream's own token is short enough to send.
  std::shared_ptr<const std::string> frame;
  if (token_of(st).size() <= cursor::kMaxTokenBytes) {
    auto f = std::make_shared<std::string>();
    f->reserve(token_of(st).size() + 5 + body->size());
    f->append("id: ").append(token_of(st)).append("\n").append(*body);
    frame = std::move(f);
  }
  for (uint64_t cid : st.conns) {
    auto it = conns_.find(cid);
    if (it == conns_.end())
      continue;
    for (Sub &sub : it->second.subs)
      if (sub.st == &st)
        deliver_to(it->second, sub, row, body, near_bound ? &before : nullptr,
                   frame ? &frame : nullptr);
  }
  flush_stats(st, row.commit_us);
}

void Hub::tail_add(StreamState &st, const Row &row,
                   const std::shared_ptr<const std::string> &body) {
  const size_t max_rows = (size_t)guc::memory_retention;
  if (max_rows == 0 || row.msg_id <= st.tail_floor) {
    st.tail_floor = std::max(st.tail_floor, row.msg_id);
    return;
  }
  StreamState::TailRow t;
  t.row.msg_id = row.msg_id;
  t.row.event = row.event;
  t.row.visible_to = row.visible_to;
  t.row.exclude = row.exclude;
  t.row.enqueued_us = row.enqueued_us;
  t.body = body;
  st.tail_bytes += body->size();
  st.tail.emplace(row.msg_id, std::move(t));
  st.tail_order.push_back(row.msg_id);
  while (!st.tail_order.empty() &&
         (st.tail_order.size() > max_rows || st.tail_bytes > (size_t)guc::queue_max_bytes)) {
    auto it = st.tail.find(st.tail_order.front());
    if (it != st.tail.end()) {
      st.tail_bytes -= it->second.body->size();
      st.tail_floor = std::max(st.tail_floor, it->first);
      st.tail.erase(it);
    }
    st.tail_order.pop_front();
  }
}

// Empties the tail and moves its floor to at least `upto`: every row at or
// below it must come from the table.
void Hub::tail_drop(StreamState &st, int64_t upto) {
  st.tail_floor = std::max(st.tail_floor, upto);
  if (st.tail.empty())
    return;
  st.tail_floor = std::max(st.tail_floor, st.tail.rbegin()->first);
  st.tail.clear();
  st.tail_order.clear();
  st.tail_bytes = 0;
}

void Hub::advance_horizons(const HorizonBounds &b) {
  if (b.frozen)
    return;
  // b.max_committed is in the order of cycle_states_ (see cycle()), unless the
  // catalog was reloaded since: then look the streams up.
  const bool aligned = cycle_states_.size() == b.max_committed.size() && !catalog_reloaded_;
  for (size_t k = 0; k < b.max_committed.size(); ++k) {
    const auto &[id, max] = b.max_committed[k];
    StreamState *st = aligned ? cycle_states_[k] : nullptr;
    if (!aligned) {
      auto sit = streams_.find(id);
      if (sit == streams_.end())
        continue;
      st = sit->second.get();
    }
    int64_t h = max;
    if (const int64_t *f = b.floor_of(id))
      h = std::min(h, *f);
    if (st->entry && st->pos.horizon > st->published_horizon) { // for stats()
      st->published_horizon = st->pos.horizon;
      uint64 cur = pg_atomic_read_u64(&st->entry->stats.horizon);
      while ((int64_t)cur < st->pos.horizon &&
             !pg_atomic_compare_exchange_u64(&st->entry->stats.horizon, &cur,
                                             (uint64)st->pos.horizon)) {
      }
    }
    if (h <= st->pos.horizon)
      continue;
    st->pos.advance(h);
    st->token_stale = true;
    for (uint64_t cid : st->conns) {
      auto it = conns_.find(cid);
      if (it == conns_.end())
        continue;
      for (Sub &sub : it->second.subs) {
        if (sub.st != st || sub.synced)
          continue;
        if (sub.replaying) {
          // Every visible id up to page_after was sent (replayed, or live).
          sub.pos.advance(std::min(h, sub.page_after));
          continue;
        }
        sub.pos.advance(h);
        if (sub.pos == st->pos)
          sub.synced = true;
      }
    }
  }
}

// Ring events were lost (ring lapped, or a transaction too large for it):
// the tables are the truth. Each stream learns the ids it missed, and every
// subscription pages the missed rows itself, as a replay with flow control.
void Hub::catch_up_all() {
  counters_.overruns++;
  const int64_t page = guc::replay_page_size;
  for (auto &[id, st] : streams_) {
    for (uint64_t cid : st->conns) {
      auto it = conns_.find(cid);
      if (it == conns_.end())
        continue;
      for (Sub &sub : it->second.subs) {
        if (sub.st != st.get())
          continue;
        if (sub.synced) {
          sub.pos = st->pos;
          sub.synced = false;
        }
        if (!sub.replaying) {
          sub.replaying = true;
          sub.page_after = sub.pos.horizon;
        } else {
          sub.page_after = std::min(sub.page_after, sub.pos.horizon);
        }
        if (std::find(replaying_.begin(), replaying_.end(), cid) == replaying_.end())
          replaying_.push_back(cid);
      }
    }
    int64_t after = st->pos.horizon;
    for (;;) {
      std::vector<Row> rows =
          read_rows(st->info, "WHERE msg_id > $1 ORDER BY msg_id LIMIT $2", nullptr, after, page);
      for (const Row &r : rows)
        st->pos.add(r.msg_id);
      if ((int64_t)rows.size() < page)
        break;
      after = rows.back().msg_id;
    }
    // Rows the ring lost never reached the tail: below what the table holds
    // now, replays read the table.
    tail_drop(*st,
              std::max(after,
                       st->entry ? (int64_t)pg_atomic_read_u64(&st->entry->max_committed) : after));
    st->token_stale = true;
  }
}

void Hub::cycle(bool full) {
  if (reader_.catalog_version() != catalog_version_)
    reload_catalog();
  // Reused between wake-ups: no allocation per stream on this path.
  // Horizons matter where connections are; the other streams' positions
  // only have to stay compact (their ids above the horizon are folded at the
  // next full pass) and exact when someone subscribes (a full pass first).
  // So a wake-up costs O(streams with connections), not O(streams).
  const int64_t now_us = (int64_t)GetCurrentTimestamp();
  full = full || catalog_reloaded_ || now_us - last_full_us_ >= 100 * 1000;
  if (full)
    last_full_us_ = now_us;
  std::vector<int64_t> &ids = cycle_ids_;
  ids.clear();
  cycle_states_.clear();
  cycle_entries_.clear();
  auto include = [&](StreamState *st) {
    ids.push_back(st->info.id);
    cycle_states_.push_back(st);
    cycle_entries_.push_back(st->entry);
  };
  if (full)
    for (auto &[id, st] : streams_)
      include(st.get());
  else
    for (StreamState *st : watched_)
      include(st);
  catalog_reloaded_ = false;
  HorizonBounds &bounds = cycle_bounds_;
  read_horizon_bounds(dboid_, worker_index_, ids, &cycle_entries_, &bounds);
  for (size_t k = 0; k < cycle_states_.size(); ++k) // found now if shared memory had no room before
    if (!cycle_states_[k]->entry)
      cycle_states_[k]->entry = cycle_entries_[k];
  std::vector<RingEvent> events;
  bool complete = reader_.drain(&events);
  pg_atomic_write_u64(&shmem::shared()->worker_ring_pos[worker_index_], reader_.position());
  burst_ = events.size() * 2 > (size_t)guc::queue_max_events;
  if (burst_)
    burst_no_++;
  if (!events.empty()) {
    // A stream created in the same transaction as its first rows may be newer than our catalog.
    std::vector<int64_t> unknown;
    for (const RingEvent &e : events)
      if (!streams_.count(e.stream_id))
        unknown.push_back(e.stream_id);
    if (!unknown.empty())
      load_streams("s.id = ANY($1)", {pg::Arg::int8_array(std::move(unknown))});
    // Read the rows per stream in one query each, then dispatch in commit order.
    std::map<int64_t, std::vector<int64_t>> wanted;
    for (const RingEvent &e : events)
      if (!e.has_payload && streams_.count(e.stream_id))
        wanted[e.stream_id].push_back(e.msg_id);
    std::map<std::pair<int64_t, int64_t>, Row> found;
    for (auto &[sid, list] : wanted) {
      for (Row &r : read_rows(streams_[sid]->info, "WHERE msg_id = ANY($1)", &list, 0, 0))
        found.emplace(std::make_pair(sid, r.msg_id), std::move(r));
    }
    for (RingEvent &e : events) {
      if (e.has_payload) {
        auto st = streams_.find(e.stream_id);
        if (st == streams_.end())
          continue;
        Row row;
        row.msg_id = e.msg_id;
        row.commit_us = e.commit_us;
        row.ephemeral = e.ephemeral;
        row.data = std::move(e.data);
        if (!e.event.empty())
          row.event = std::move(e.event);
        if (!e.visible_to.empty())
          row.visible_to = std::move(e.visible_to);
        row.exclude = e.exclude;
        if (e.ephemeral && !st->second->pos.covers(row.msg_id))
          retain_ephemeral(*st->second, row);
        dispatch(*st->second, row);
        continue;
      }
      auto it = found.find({e.stream_id, e.msg_id});
      if (it == found.end()) {
        auto st = streams_.find(e.stream_id);
        if (st != streams_.end()) {
          st->second->pos.add(e.msg_id); // consumed before we read it: nothing to send
          st->second->token_stale = true;
          if (st->second->entry)
            pg_atomic_fetch_add_u64(&st->second->entry->stats.failed, 1);
        }
        continue;
      }
      it->second.commit_us = e.commit_us;
      dispatch(*streams_[e.stream_id], it->second);
    }
  }
  burst_ = false;
  if (!complete)
    catch_up_all();
  advance_horizons(bounds);
}

void Hub::reject(const http::Request &req, int status, const std::string &reason) {
  server_.reject(req.conn_id, status, reason);
  std::string detail = std::to_string(status) + " " + reason;
  if (!detail.empty() && detail.back() == '\n')
    detail.pop_back();
  shmem::record_diagnostic(worker_index_, req.conn_id, "rejected",
                           req.streams.empty() ? "" : req.streams[0].c_str(), detail.c_str());
}

void Hub::subscribe(const http::Request &req) {
  // Credentials first (auth::Gate): a refusal says nothing of whether a
  // private stream exists.
  auth::Identity who;
  std::string why;
  const int64_t now_s = (int64_t)time(nullptr);
  if (int status =
          gate_.authenticate(req.signed_name, req.token, req.cookie_token, now_s, &who, &why)) {
    reject(req, status, why + "\n");
    return;
  }
  std::vector<std::string> wanted = req.streams;
  if (!req.signed_name.empty()) {
    if (by_name_.count(who.signed_name) == 0)
      reload_catalog();
    wanted = {auth::Gate::signed_target(
        who, [&](const std::string &n) { return by_name_.count(n) > 0; })};
  }
  if (wanted.empty()) {
    reject(req, 400, "no stream named\n");
    return;
  }
  Conn c;
  c.id = req.conn_id;
  c.multi = wanted.size() > 1;
  c.subscriber = req.subscriber;
  c.ctx = who.ctx;
  bool any_private = false;
  for (const std::string &name : wanted) {
    StreamState *st = find_by_name(name);
    if (st == nullptr) {
      load_streams("s.name = $1", {pg::Arg::txt(name)});
      st = find_by_name(name);
    }
    if (int status =
            auth::Gate::authorize(who, name, st != nullptr, st && st->info.is_public, &why)) {
      reject(req, status, (status == 404 ? "unknown stream: " + name : why) + "\n");
      return;
    }
    // Hooked only for an authorised subscriber: no DDL on an anonymous request.
    if (!st->info.hooked)
      st = hook(st);
    if (st == nullptr) {
      reject(req, 404, "unknown stream: " + name + "\n");
      return;
    }
    any_private |= !st->info.is_public;
    for (const Sub &s : c.subs)
      if (s.st == st) {
        reject(req, 400, "stream named twice: " + name + "\n");
        return;
      }
    Sub sub;
    sub.st = st;
    c.subs.push_back(sub);
  }
  if (!req.subscriber.empty()) {
    if (int status = auth::Gate::authorize_subscriber(who, req.subscriber, any_private, &why)) {
      reject(req, status, why + "\n");
      return;
    }
  }
  // The cursor: Last-Event-ID wins over ?since / ?last_event_id.
  const std::string *text = req.has_last_event_id ? &req.last_event_id
                            : req.has_since       ? &req.since
                                                  : nullptr;
  cursor::Cursor cur;
  if (text) {
    std::string err;
    if (!cursor::parse(*text, &cur, &err)) {
      reject(req, 400, "invalid cursor: " + err + "\n");
      return;
    }
    if (c.multi && cur.streams.size() == 1 && cur.streams[0].first.empty()) {
      reject(req, 400, "invalid cursor: several streams need a name:position cursor\n");
      return;
    }
  }
  if (!text && !req.subscriber.empty()) {
    // A durable subscriber without an id of its own resumes from its stored cursors.
    std::vector<std::string> names;
    for (const Sub &s : c.subs)
      names.push_back(s.st->info.name);
    std::string list = "{";
    for (size_t i = 0; i < names.size(); i++)
      list += (i ? "," : "") + std::string("\"") + sse::json_escape(names[i]) + "\"";
    list += "}";
    pg::SpiTx tx;
    pg::Table t = tx.query("SELECT stream, cursor FROM pgbus_stream.subscribers WHERE id = $1 AND "
                           "stream = ANY($2::text[])",
                           {pg::Arg::txt(req.subscriber), pg::Arg::txt(list)});
    tx.commit();
    for (size_t r = 0; r < t.rows(); r++) {
      cursor::StreamPosition p;
      if (cursor::parse_stream(t.at(r, 1).value_or(""), &p, nullptr))
        cur.streams.emplace_back(t.at(r, 0).value_or(""), p);
    }
    if (!cur.streams.empty())
      text = &req.subscriber; // marks "a cursor was given"
  }
  int64_t replay_n = -1; // -1: none; INT64_MAX: all
  if (!text && !req.replay.empty()) {
    if (req.replay == "all")
      replay_n = INT64_MAX;
    else if (!cursor::parse_int64(req.replay, &replay_n)) {
      reject(req, 400, "invalid replay: use all or a number\n");
      return;
    }
  }
  std::string gaps;
  for (Sub &sub : c.subs) {
    StreamState &st = *sub.st;
    const cursor::StreamPosition *p = text ? cur.find(st.info.name) : nullptr;
    if (p) {
      sub.pos = *p;
      if (sub.pos.epoch != 0 && sub.pos.epoch != st.info.id) {
        // The stream was dropped and re-created: its ids restarted.
        gaps +=
            control_event("pgbus:gap-detected", "{\"stream\":\"" + sse::json_escape(st.info.name) +
                                                    "\",\"reason\":\"stream-recreated\"}");
        sub.pos = cursor::StreamPosition();
      } else if (sub.pos.horizon < st.info.retention_floor) {
        // Retention removed messages this client has not seen: say so, then
        // send what is still there.
        std::vector<Row> first = read_rows(st.info, "WHERE msg_id > $1 ORDER BY msg_id LIMIT $2",
                                           nullptr, st.info.retention_floor, 1);
        std::string oldest = first.empty() ? "null" : std::to_string(first[0].msg_id);
        gaps += control_event("pgbus:gap-detected",
                              "{\"stream\":\"" + sse::json_escape(st.info.name) +
                                  "\",\"reason\":\"retention\",\"oldest\":" + oldest + "}");
        sub.pos.advance(st.info.retention_floor);
      } else if (missed_ephemeral(st, sub.pos)) {
        gaps +=
            control_event("pgbus:gap-detected", "{\"stream\":\"" + sse::json_escape(st.info.name) +
                                                    "\",\"reason\":\"ephemeral-expired\"}");
      }
      sub.pos.epoch = st.info.id;
    } else if (replay_n > 0) {
      sub.pos = cursor::StreamPosition();
      sub.pos.epoch = st.info.id;
      if (replay_n != INT64_MAX) {
        std::vector<Row> last = read_rows(
            st.info, "WHERE msg_id > $1 ORDER BY msg_id DESC LIMIT $2", nullptr, 0, replay_n);
        if (!last.empty())
          sub.pos.advance(last.back().msg_id - 1);
        else
          sub.pos = st.pos;
      }
    } else {
      sub.pos = st.pos; // from now on
    }
    sub.synced = sub.pos == st.pos;
    sub.replaying = !sub.synced;
    sub.page_after = sub.pos.horizon;
  }
  std::string names;
  for (const Sub &s : c.subs)
    names += (names.empty() ? "" : ",") + s.st->info.name;
  std::string preamble;
  sse::append_retry(preamble, 2000);
  preamble.pop_back(); // one block: retry, comment and the connected event
  preamble += ": pgbus stream open since_id=" + conn_token(c) + " stream=" + names + "\n";
  sse::append_event(preamble, "", "pgbus:connected", "{\"connectionId\":\"" + hex_id(c.id) + "\"}");
  preamble += gaps;
  server_.open(c.id, std::move(preamble));
  shmem::record_diagnostic(worker_index_, c.id, "subscribed", names.c_str(),
                           ("since=" + conn_token(c) +
                            (c.subscriber.empty() ? "" : " subscriber=" + c.subscriber) +
                            " remote=" + req.remote_addr)
                               .c_str());
  bool needs_replay = false;
  for (Sub &s : c.subs) {
    if (s.st->conns.empty())
      note_watched(*s.st, true);
    s.st->conns.push_back(c.id);
    if (s.st->entry)
      pg_atomic_fetch_add_u64(&s.st->entry->stats.subscribers, 1);
    needs_replay |= s.replaying;
  }
  uint64_t cid = c.id;
  c.opened_us = (int64_t)GetCurrentTimestamp();
  for (const Sub &s : c.subs)
    record_history(s.st->info.name, "connect", 0, 0);
  if (!c.subscriber.empty())
    subscriber_conns_.push_back(cid);
  conns_.emplace(cid, std::move(c));
  if (needs_replay) {
    replaying_.push_back(cid);
    continue_replays();
  }
}

bool Hub::replay_page(Conn &c, Sub &sub, int64_t page) {
  // Above the tail's floor the tail holds every row this worker dispatched:
  // no table read (rows committed but not yet drained come live). A row
  // without a body (table, ephemeral) is encoded when it is sent.
  std::vector<StreamState::TailRow> items;
  if (sub.page_after >= sub.st->tail_floor) {
    for (auto it = sub.st->tail.upper_bound(sub.page_after);
         it != sub.st->tail.end() && (int64_t)items.size() < page; ++it)
      items.push_back(it->second);
  } else {
    for (Row &r : read_rows(sub.st->info, "WHERE msg_id > $1 ORDER BY msg_id LIMIT $2", nullptr,
                            sub.page_after, page))
      items.push_back({std::move(r), nullptr});
  }
  const bool last_page = (int64_t)items.size() < page;
  // Merge the ephemeral broadcasts this worker still holds into the page.
  const int64_t upto = last_page ? INT64_MAX : items.back().row.msg_id;
  const size_t durable = items.size();
  for (const Row &e : sub.st->ephemeral)
    if (e.msg_id > sub.page_after && e.msg_id <= upto)
      items.push_back({e, nullptr});
  if (items.size() != durable)
    std::sort(items.begin(), items.end(),
              [](const auto &a, const auto &b) { return a.row.msg_id < b.row.msg_id; });
  for (const StreamState::TailRow &item : items) {
    const Row &r = item.row;
    if (!has_room(c.id)) {
      flush_stats(*sub.st, 0);
      return false; // the rest of the page is read again when the queue drains
    }
    // Every visible id below this row has been sent; below the stream's
    // horizon the ones not returned will never be visible, so the token folds them.
    sub.pos.advance(std::min(r.msg_id - 1, sub.st->pos.horizon));
    sub.page_after = r.msg_id; // hold() moves it back below r if r is held
    if (!sub.pos.covers(r.msg_id) &&
        !deliver_to(c, sub, r, item.body ? item.body : encode_body(r))) {
      flush_stats(*sub.st, 0);
      return false; // held back: continue when the horizon moves
    }
  }
  flush_stats(*sub.st, 0);
  if (last_page) {
    // Caught up with everything visible: from here the live path feeds it.
    sub.replaying = false;
    sub.pos.advance(sub.st->pos.horizon);
    sub.synced = sub.pos == sub.st->pos;
    return true;
  }
  return false;
}

// Replays fill a connection's queue to half of its bounds (events and
// bytes), so live events still fit and the overflow policy never fires
// because of a backlog.
bool Hub::has_room(uint64_t cid) const {
  return server_.queued_events(cid) * 2 < (size_t)guc::queue_max_events &&
         server_.queued_bytes(cid) * 2 < (size_t)guc::queue_max_bytes;
}

bool Hub::continue_replays() {
  // Pages never larger than half a connection's queue, so a page always fits.
  const size_t page =
      std::max<size_t>(1, std::min<size_t>(guc::replay_page_size, guc::queue_max_events / 2));
  std::vector<uint64_t> still;
  for (uint64_t cid : replaying_) {
    auto it = conns_.find(cid);
    if (it == conns_.end())
      continue;
    Conn &c = it->second;
    bool pending = false;
    for (Sub &sub : c.subs) {
      if (!sub.replaying)
        continue;
      // Flow control: a page only when the connection's queue has room for it.
      // A held sub waits for its stream's horizon to move.
      if (sub.held_at_horizon >= 0 && sub.held_at_horizon == sub.st->pos.horizon) {
        pending = true;
        continue;
      }
      sub.held_at_horizon = -1;
      while (sub.replaying && sub.held_at_horizon < 0 && has_room(cid))
        if (!replay_page(c, sub, (int64_t)page) && !has_room(cid))
          break;
      pending |= sub.replaying;
    }
    if (pending)
      still.push_back(cid);
  }
  replaying_.swap(still);
  return !replaying_.empty();
}

void Hub::retain_ephemeral(StreamState &st, const Row &row) {
  const size_t keep = (size_t)guc::memory_retention;
  if (keep > 0)
    st.ephemeral.push_back(row);
  while (st.ephemeral.size() > keep) {
    st.evicted.push_back(st.ephemeral.front().msg_id);
    st.ephemeral.pop_front();
  }
  while (st.evicted.size() > 10000) {
    st.evicted_floor = std::max(st.evicted_floor, st.evicted.front());
    st.evicted.pop_front();
  }
  if (keep == 0)
    st.evicted.push_back(row.msg_id);
}

// True when a client at position p may have missed an ephemeral broadcast
// that this worker no longer holds.
bool Hub::missed_ephemeral(const StreamState &st, const cursor::StreamPosition &p) {
  if (p.horizon < st.evicted_floor)
    return true;
  for (int64_t id : st.evicted)
    if (!p.covers(id))
      return true;
  return false;
}

void Hub::apply_retention() {
  // Streams with their own retention are visited every run; those under
  // default_retention (the gem's, possibly many thousands, most of them
  // never loaded by this worker) come from the catalog, at most
  // kDefaultPerRun per run, round-robin by id, so one run stays bounded.
  constexpr int64_t kDefaultPerRun = 100;
  std::vector<int64_t> ids;
  for (auto &[id, st] : streams_)
    if (st->info.has_retention)
      ids.push_back(id);
  if (guc::default_retention_s > 0) {
    const std::string sql =
        "SELECT id FROM pgbus_stream.streams s "
        "WHERE NOT coalesce((to_jsonb(s) ->> 'retention_set')::boolean, true) "
        "AND retention IS NULL AND retention_max IS NULL AND id > $1 ORDER BY id LIMIT $2";
    pg::SpiTx tx;
    pg::Table t =
        tx.query(sql, {pg::Arg::int8(default_retention_after_), pg::Arg::int8(kDefaultPerRun)});
    if (t.rows() < (size_t)kDefaultPerRun && default_retention_after_ > 0) { // wrap around
      default_retention_after_ = 0;
      pg::Table more =
          tx.query(sql, {pg::Arg::int8(0), pg::Arg::int8(kDefaultPerRun - (int64_t)t.rows())});
      t.cells.insert(t.cells.end(), more.cells.begin(), more.cells.end());
    }
    tx.commit();
    for (size_t r = 0; r < t.rows(); r++)
      ids.push_back(to_i64(t.at(r, 0)));
    if (t.rows() > 0)
      default_retention_after_ = ids.back(); // the next run goes on from here
  }
  const int batch = 1000;
  for (int64_t id : ids) {
    auto found = streams_.find(id);
    StreamState *st = found == streams_.end() ? nullptr : found->second.get();
    for (int round = 0; round < 10; round++) { // at most 10 batches per stream per run
      pg::SpiTx tx;
      pg::Table t =
          tx.query("SELECT removed, floor FROM pgbus_stream._apply_retention($1, $2::int)",
                   {pg::Arg::int8(id), pg::Arg::int8(batch)}, false);
      tx.commit();
      int64_t removed = t.rows() ? to_i64(t.at(0, 0)) : 0;
      if (t.rows() && st)
        st->info.retention_floor = std::max(st->info.retention_floor, to_i64(t.at(0, 1)));
      if (removed > 0 && st && st->entry)
        pg_atomic_fetch_add_u64(&st->entry->stats.retention_dropped, (uint64)removed);
      if (removed < batch)
        break;
    }
  }
}

void Hub::fill_snapshot(metrics::Snapshot *out, bool include_private) const {
  const int64_t now_pg = (int64_t)GetCurrentTimestamp();
  static_assert(metrics::kLatencyBuckets == shmem::kLatencyBuckets, "same latency buckets");
  out->streams.clear();
  for (const auto &[id, st] : streams_) {
    if (!include_private && !st->info.is_public)
      continue;
    metrics::StreamFigures f;
    f.name = st->info.name;
    f.horizon = st->pos.horizon;
    if (shmem::StreamEntry *e = st->entry) {
      shmem::StreamStats *ss = &e->stats;
      f.subscribers = (int64_t)pg_atomic_read_u64(&ss->subscribers);
      f.emitted = (int64_t)pg_atomic_read_u64(&e->events);
      f.delivered = (int64_t)pg_atomic_read_u64(&ss->delivered);
      f.overflow_dropped = (int64_t)pg_atomic_read_u64(&ss->overflow_dropped);
      f.failed = (int64_t)pg_atomic_read_u64(&ss->failed);
      f.bytes_sent = (int64_t)pg_atomic_read_u64(&ss->bytes_queued);
      f.newest_id = (int64_t)pg_atomic_read_u64(&e->max_committed);
      f.has_latency =
          shmem::latency_percentiles(&ss->latency, now_pg, &f.latency_p50_ms, &f.latency_p99_ms);
      uint64 buckets[shmem::kLatencyBuckets];
      shmem::latency_totals(&ss->latency, buckets);
      for (int b = 0; b < metrics::kLatencyBuckets; b++)
        f.latency_buckets[b] = buckets[b];
    }
    out->streams.push_back(std::move(f));
  }
  std::sort(out->streams.begin(), out->streams.end(),
            [](const metrics::StreamFigures &a, const metrics::StreamFigures &b) {
              return a.name < b.name;
            });
}

void Hub::track_written() {
  for (uint64_t cid : subscriber_conns_) {
    auto it = conns_.find(cid);
    if (it == conns_.end())
      continue;
    Conn &c = it->second;
    uint64_t written = 0, dropped = 0;
    if (c.cursor_frozen || !server_.progress(cid, &written, &dropped))
      continue;
    if (dropped > 0) {
      // A dropped frame sits before later written ones: the stored cursor
      // stays at the last id before it; the client was told (gap-detected).
      c.cursor_frozen = true;
      c.pushed_tokens.reset();
      continue;
    }
    if (written <= c.tokens_base)
      continue;
    if (!c.pushed_tokens)
      continue;
    while (c.tokens_base + 1 < written && !c.pushed_tokens->empty()) {
      c.pushed_tokens->pop_front();
      c.tokens_base++;
    }
    if (c.pushed_tokens->empty())
      continue;
    if (c.written_token != c.pushed_tokens->front()) {
      c.written_token = c.pushed_tokens->front();
      note_written_token(c);
    }
  }
}

// Splits the connection's last written id into per-stream positions.
void Hub::note_written_token(const Conn &c) {
  if (c.written_token.empty())
    return;
  cursor::Cursor cur;
  std::string err;
  if (!cursor::parse(c.written_token, &cur, &err))
    return;
  for (auto &[name, pos] : cur.streams) {
    std::string text;
    pos.encode(text);
    const std::string &stream = name.empty() ? c.subs[0].st->info.name : name;
    // Bounded even if flushes keep failing: a cursor left unstored only lags.
    if (dirty_cursors_.size() < 100000 || dirty_cursors_.count({c.subscriber, stream}))
      dirty_cursors_[{c.subscriber, stream}] = text;
  }
}

void Hub::flush_cursors() {
  if (dirty_cursors_.empty())
    return;
  std::string json = "[";
  for (auto &[key, token] : dirty_cursors_) {
    if (json.size() > 1)
      json += ',';
    json += "{\"id\":\"" + sse::json_escape(key.first) + "\",\"stream\":\"" +
            sse::json_escape(key.second) + "\",\"cursor\":\"" + sse::json_escape(token) + "\"}";
  }
  json += "]";
  pg::SpiTx tx;
  tx.query("INSERT INTO pgbus_stream.subscribers AS s (id, stream, cursor, updated_at) "
           "SELECT id, stream, cursor, now() FROM jsonb_to_recordset($1::jsonb) "
           "AS r(id text, stream text, cursor text) "
           "ON CONFLICT (id, stream) DO UPDATE SET cursor = excluded.cursor, updated_at = "
           "excluded.updated_at",
           {pg::Arg::txt(json)}, false);
  tx.commit();
  dirty_cursors_.clear();
}

bool Hub::describe(uint64_t conn_id, std::string *streams, std::string *cursor,
                   std::string *subscriber, std::string *state) const {
  auto it = conns_.find(conn_id);
  if (it == conns_.end())
    return false;
  const Conn &c = it->second;
  streams->clear();
  bool replaying = false;
  for (const Sub &s : c.subs) {
    *streams += (streams->empty() ? "" : ",") + s.st->info.name;
    replaying |= s.replaying;
  }
  *cursor = conn_token(c);
  *subscriber = c.subscriber;
  *state = replaying ? "replaying" : "live";
  return true;
}

void Hub::closed(uint64_t conn_id) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end())
    return;
  if (!it->second.subscriber.empty()) {
    note_written_token(it->second);
    subscriber_conns_.erase(
        std::remove(subscriber_conns_.begin(), subscriber_conns_.end(), conn_id),
        subscriber_conns_.end());
  }
  const double lived_ms = (double)((int64_t)GetCurrentTimestamp() - it->second.opened_us) / 1000.0;
  for (Sub &s : it->second.subs) {
    record_history(s.st->info.name, "disconnect", lived_ms, 0);
    if (s.st->entry)
      pg_atomic_fetch_sub_u64(&s.st->entry->stats.subscribers, 1);
    auto &v = s.st->conns;
    v.erase(std::remove(v.begin(), v.end(), conn_id), v.end());
    if (v.empty())
      note_watched(*s.st, false);
  }
  conns_.erase(it);
}

} // namespace pgbs::worker
