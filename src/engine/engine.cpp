// Engine: the catalog, ring rounds (dispatch in commit order), horizons and
// what happens when rows cannot be read. docs/ARCHITECTURE.md, "The engine".
#include "engine/engine.hpp"
#include "core/sse.hpp"
#include "engine/state.hpp"

#include <algorithm>
#include <unordered_set>

namespace pgbs::engine {

namespace {

// The row a ring event carries (its payload moved out of the event).
Row take_row(ring::Event &e) {
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
  return row;
}

} // namespace

void HorizonBounds::lower_floor(int64_t stream_id, int64_t floor) {
  for (auto &f : min_floor)
    if (f.first == stream_id) {
      f.second = std::min(f.second, floor);
      return;
    }
  min_floor.emplace_back(stream_id, floor);
}

const int64_t *HorizonBounds::floor_of(int64_t stream_id) const {
  for (const auto &f : min_floor)
    if (f.first == stream_id)
      return &f.second;
  return nullptr;
}

Engine::Engine(const Config &cfg, RowSource &rows, FrameSink &sink, Observer &obs)
    : cfg_(cfg), rows_(rows), sink_(sink), obs_(obs) {}

Engine::~Engine() {
  std::vector<uint64_t> ids;
  for (auto &[id, c] : conns_)
    ids.push_back(id);
  for (uint64_t id : ids)
    closed(id);
  for (Stream *st : awake_)
    obs_.release_stream(st->handle);
}

// A new overflow policy applies to open connections too (from their next frame).
void Engine::configure(const Config &cfg) {
  cfg_ = cfg;
  for (auto &[id, c] : conns_)
    c->live_only = cfg_.overflow_policy != OverflowPolicy::Lag && c->subscriber.empty();
}

bool Engine::knows(int64_t stream_id) const { return streams_.count(stream_id) != 0; }

// A failed read is retried after a backoff; true when `ok`.
bool Engine::read_ok(bool ok) {
  if (!ok)
    counters_.read_failures++;
  return ok;
}

bool Engine::reload_catalog() {
  if (!load_streams(CatalogFilter()))
    return false;
  full_ok_ = true;
  return true;
}

bool Engine::load_streams(const CatalogFilter &which) {
  std::vector<StreamInfo> infos;
  counters_.catalog_reads++;
  if (!read_ok(rows_.load_catalog(which, &infos)))
    return false;
  std::unordered_set<int64_t> present;
  for (StreamInfo &si : infos) {
    present.insert(si.id);
    auto it = streams_.find(si.id);
    if (it != streams_.end()) {
      const int64_t floor = std::max(it->second->info.retention_floor, si.retention_floor);
      it->second->info = si;
      it->second->info.retention_floor = floor;
      continue;
    }
    // Loaded dormant (no shared-memory entry): a subscription wakes it
    // (lifetime.cpp), which reads the tables' maximum again.
    auto st = std::make_unique<Stream>();
    st->pos.epoch = si.id;
    st->tail_floor = si.max_committed;
    st->info = std::move(si);
    by_name_[st->info.name] = st->info.id;
    streams_[st->info.id] = std::move(st);
  }
  if (which.all()) {
    std::vector<int64_t> gone;
    for (auto &[id, st] : streams_)
      if (!present.count(id))
        gone.push_back(id);
    for (int64_t id : gone)
      drop_stream(id, "stream dropped");
  }
  eph_checks_.clear(); // pointers may be gone; a missed check only delays a notice
  for (auto &[id, st] : streams_)
    if (st->ephemeral_check)
      eph_checks_.push_back(st.get());
  last_full_us_ = -1; // the next round bounds every stream
  return true;
}

void Engine::drop_stream(int64_t id, const char *reason) {
  auto it = streams_.find(id);
  if (it == streams_.end())
    return;
  for (Connection *c : std::vector<Connection *>(it->second->conns)) {
    sink_.close(c->ref, reason);
    closed(c->id);
  }
  auto bn = by_name_.find(it->second->info.name);
  if (bn != by_name_.end() && bn->second == id)
    by_name_.erase(bn);
  Stream *st = it->second.get();
  if (stats_batch_.st == st)
    end_stats_batch();
  watched_.erase(std::remove(watched_.begin(), watched_.end(), st), watched_.end());
  hot_.erase(std::remove(hot_.begin(), hot_.end(), st), hot_.end());
  eph_checks_.erase(std::remove(eph_checks_.begin(), eph_checks_.end(), st), eph_checks_.end());
  if (st->idle_listed)
    idle_.erase(std::remove(idle_.begin(), idle_.end(), st), idle_.end());
  unsettled_.erase(std::remove(unsettled_.begin(), unsettled_.end(), st), unsettled_.end());
  sleep(*st);
  streams_.erase(it);
}

Stream *Engine::find_by_name(const std::string &name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    return nullptr;
  auto st = streams_.find(it->second);
  return st == streams_.end() ? nullptr : st->second.get();
}

void Engine::heat(Stream &st) {
  if (!st.hot) {
    st.hot = true;
    hot_.push_back(&st);
  }
}

// Horizons matter where connections are; the other streams' positions only
// have to stay compact and exact when someone subscribes (a full pass
// first). So a wake-up costs O(streams with connections), not O(streams).
const std::vector<int64_t> &Engine::round_streams(bool full) {
  full = full || last_full_us_ < 0 || now_us_ - last_full_us_ >= 100 * 1000;
  if (full)
    last_full_us_ = now_us_;
  round_ids_.clear();
  round_handles_.clear();
  round_bounded_.clear();
  auto include = [&](Stream &st) {
    round_ids_.push_back(st.info.id);
    round_handles_.push_back(st.handle);
    round_bounded_.push_back(&st);
  };
  hot_.erase(std::remove_if(hot_.begin(), hot_.end(), [](const Stream *st) { return !st->hot; }),
             hot_.end());
  if (full) {
    for (Stream *st : awake_) { // a dormant stream needs no horizon (lifetime.cpp)
      include(*st);
      if (st->tail.size() > cfg_.memory_retention)
        tail_trim(*st); // rows kept by memory_retention_time whose time is up
    }
    return round_ids_;
  }
  // Between full rounds, only the watched streams whose horizon may move:
  // with thousands of watched streams and a few written per round, a visit
  // to each every round took a third of the worker's time. One left out
  // here waits at most for the next full round (100 ms) with its horizon
  // lower meanwhile, which only makes tokens name a few more ids.
  for (Stream *st : hot_)
    if (st->awake && !st->conns.empty())
      include(*st);
  return round_ids_;
}

std::shared_ptr<const std::string> Engine::encode_body(const Row &row) const {
  auto body = std::make_shared<std::string>();
  body->reserve(row.data.size() + 48);
  // An event name from a row written straight into the queue may be anything:
  // one the SSE framing cannot carry falls back to the default.
  const bool named = row.event && !row.event->empty() && wire::valid_event_name(*row.event);
  sse::append_event(*body, "", named ? *row.event : cfg_.default_event, row.data);
  return body;
}

// Dispatches events[begin, end) where the slice holds at most
// replay_page_size rows that must be read from the tables; returns end.
size_t Engine::dispatch_slice(std::vector<ring::Event> &events, size_t begin) {
  // Read the rows without payload per stream in one call each, then
  // dispatch in commit order. A stream whose read failed gets those ids
  // paged from the table later, once the read works again. A stream with
  // no connection here needs only the ids (dispatch keeps no row for it):
  // its rows are not read, so a queue nobody watches costs no reads.
  std::map<int64_t, std::vector<int64_t>> wanted;
  // A drain's events mostly come in runs of one stream: one lookup per run.
  // (No stream is added or dropped while a slice is dispatched.)
  int64_t memo_id = 0;
  Stream *memo = nullptr;
  auto stream_of = [&](int64_t id) {
    if (memo == nullptr || id != memo_id) {
      auto it = streams_.find(id);
      memo = it == streams_.end() ? nullptr : it->second.get();
      memo_id = id;
    }
    return memo;
  };
  auto wants = [&](const ring::Event &e) {
    if (e.has_payload || e.aborted)
      return false;
    const Stream *rs = stream_of(e.stream_id);
    if (rs == nullptr || rs->conns.empty())
      return false;
    return !(e.late && rs->pos.covers(e.msg_id)); // not read: announced (late())
  };
  size_t end = begin, to_read = 0;
  for (; end < events.size(); end++) {
    const ring::Event &e = events[end];
    if (!wants(e))
      continue;
    if (to_read == std::max<size_t>(cfg_.replay_page_size, 1))
      break;
    wanted[e.stream_id].push_back(e.msg_id);
    to_read++;
  }
  // The slice holds about replay_page_bytes of payload (one row per stream
  // at least): a read that stopped there ends the slice at the first event
  // it did not reach, and the next slice reads from that one.
  std::map<std::pair<int64_t, int64_t>, Row> found;
  std::unordered_set<int64_t> failed;
  std::unordered_map<int64_t, int64_t> cut; // stream -> highest id its read looked at
  std::vector<Row> rows;
  size_t bytes = 0;
  for (auto &[sid, list] : wanted) {
    rows.clear();
    int64_t upto = INT64_MAX;
    const size_t budget = cfg_.replay_page_bytes > bytes ? cfg_.replay_page_bytes - bytes : 1;
    if (!read_ok(rows_.rows_by_id(streams_[sid]->info, list, budget, &rows, &upto))) {
      failed.insert(sid);
      continue;
    }
    counters_.rows_read += rows.size();
    if (upto != INT64_MAX)
      cut[sid] = upto;
    for (Row &r : rows) {
      bytes += r.data.size();
      found.emplace(std::make_pair(sid, r.msg_id), std::move(r));
    }
  }
  if (!cut.empty())
    for (size_t i = begin; i < end; i++) {
      auto c = cut.find(events[i].stream_id);
      if (c != cut.end() && events[i].msg_id > c->second && wants(events[i])) {
        end = i; // (not the slice's first wanted event: each read covers its first id)
        break;
      }
    }
  for (size_t i = begin; i < end; i++) {
    ring::Event &e = events[i];
    Stream *sp = stream_of(e.stream_id);
    if (sp == nullptr)
      continue;
    Stream &st = *sp;
    if (st.awake)
      heat(st); // its committed maximum moved: the next round bounds it
    if (!st.awake) {
      // Dormant: its position restarts from the table when it wakes; its
      // ephemeral broadcasts exist nowhere else, so they are retained.
      if (e.has_payload && e.ephemeral) {
        st.ephemeral_seq = std::max(st.ephemeral_seq, e.ephemeral_seq);
        retain_ephemeral(st, take_row(e));
      }
      continue;
    }
    if (e.aborted) {
      flush_batch();
      aborted(st, e.msg_id, e.aborted_to);
      continue;
    }
    if (e.late && st.pos.covers(e.msg_id)) {
      flush_batch();
      late(st, e.msg_id);
      continue;
    }
    if (!st.aborted.empty() && st.pos.covers(e.msg_id)) {
      // An id rolled back earlier, committed after all (an explicit id
      // inserted again by a transaction that published its floor before the
      // rollback raised the committed maximum): tokens already cover it.
      auto it = st.aborted.upper_bound(e.msg_id);
      if (it != st.aborted.begin() && std::prev(it)->second >= e.msg_id) {
        flush_batch();
        late(st, e.msg_id);
        continue;
      }
    }
    if (e.has_payload) {
      if (e.ephemeral && e.ephemeral_seq > 0) {
        if (e.ephemeral_seq > st.ephemeral_seq + 1) {
          flush_batch();
          ephemeral_lost(st, e.ephemeral_seq - st.ephemeral_seq - 1);
        }
        st.ephemeral_seq = std::max(st.ephemeral_seq, e.ephemeral_seq);
      }
      Row row = take_row(e);
      if (row.ephemeral && !st.pos.covers(row.msg_id))
        retain_ephemeral(st, row);
      dispatch(st, row);
      continue;
    }
    if (st.conns.empty()) {
      Row row;
      row.msg_id = e.msg_id;
      row.commit_us = e.commit_us;
      dispatch(st, row);
      continue;
    }
    if (failed.count(e.stream_id)) {
      flush_batch();
      unread(st, e.msg_id);
      continue;
    }
    auto it = found.find({e.stream_id, e.msg_id});
    if (it == found.end()) {
      flush_batch();
      deleted(st, e.msg_id);
      continue;
    }
    if (it->second.unreadable) {
      flush_batch();
      deleted(st, e.msg_id, wire::GapReason::Unreadable);
      continue;
    }
    it->second.commit_us = e.commit_us;
    dispatch(st, it->second);
    std::string().swap(it->second.data); // the encoded body carries it from here
  }
  flush_batch(); // nothing batched outlives the slice
  return end;
}

void Engine::round(std::vector<ring::Event> &events, bool complete, const HorizonBounds &bounds) {
  round_no_++;
  live_events_ = 0;
  // The streams bounded now are visited now: each is hot again only if its
  // rows come in this round's drain (bounded before it) or a floor or a loss
  // needs another visit (advance_horizons). While frozen nothing moves, so
  // they stay hot.
  if (!bounds.frozen)
    for (Stream *st : round_bounded_) // (none dropped since round_streams())
      st->hot = false;
  round_bounded_.clear();
  release_idle();
  for (Stream *st : unsettled_) // (see Engine::wake)
    if (!complete) {
      st->ephemeral_floor_rounds = 2;
      heat(*st);
    }
  unsettled_.clear();
  // Ring events were lost: they came before some of these in commit order,
  // so nothing of this round goes live; every subscription pages instead.
  if (!complete)
    catch_up_all();
  else if (tails_unknown_)
    settle_tails();
  if (!events.empty()) {
    // A stream created in the same transaction as its first rows may be newer than our catalog.
    // (One lookup per run of a stream's events: a drain mostly comes in runs.)
    CatalogFilter unknown;
    const ring::Event *last_known = nullptr;
    for (const ring::Event &e : events) {
      if (last_known && e.stream_id == last_known->stream_id)
        continue;
      if (streams_.count(e.stream_id)) {
        last_known = &e;
        continue;
      }
      if (std::find(unknown.ids.begin(), unknown.ids.end(), e.stream_id) == unknown.ids.end())
        unknown.ids.push_back(e.stream_id);
    }
    if (!unknown.ids.empty())
      load_streams(unknown);
    // Events are taken in slices of at most replay_page_size rows to read,
    // so a round over a full ring of large rows holds one page of them at a
    // time, in commit order.
    size_t begin = 0;
    while (begin < events.size())
      begin = dispatch_slice(events, begin);
    end_stats_batch();
  }
  // Ephemeral broadcasts lost with the ring events: every one committed
  // before the last incomplete drain is in the ring by this drain, so what
  // the producers counted then and was not read is gone.
  for (Stream *st : eph_checks_) {
    if (st->ephemeral_check_at > st->ephemeral_seq) {
      ephemeral_lost(*st, st->ephemeral_check_at - st->ephemeral_seq);
      st->ephemeral_seq = st->ephemeral_check_at;
    }
    st->ephemeral_check = false;
  }
  eph_checks_.clear();
  if (!complete) // compared after the next drain, which holds every record counted by now
    for (Stream *st : awake_) {
      st->ephemeral_check = true;
      st->ephemeral_check_at = obs_.ephemeral_seq(st->handle);
      eph_checks_.push_back(st);
    }
  advance_horizons(bounds);
}

void Engine::dispatch(Stream &st, const Row &row) {
  if (st.pos.covers(row.msg_id))
    return; // already dispatched (catch-up and ring can both carry a row)
  counters_.events++;
  if (st.conns.empty()) {
    st.pos.add(row.msg_id);
    st.token_stale = true;    // encoded when someone needs it
    st.tail_drop(row.msg_id); // nobody to replay to: the tail starts above it
    return;
  }
  // Only a subscription in step with the stream uses the position before
  // this row (when the row waits) and the shared frame: with none (every
  // connection pages, e.g. it stopped reading) neither is built. The scan
  // stops once it has found such a subscription and one that takes rows
  // live (not paging; most often the same one), and without them the loop
  // below visits every connection anyway.
  bool synced = st.riders > 0, wants_frame = synced, live = synced;
  for (size_t i = 0; !(wants_frame && live) && i < st.conns.size(); ++i) {
    const Connection &c = *st.conns[i];
    for (const Sub &s : c.subs) {
      if (s.st != &st)
        continue;
      live |= !s.paging;
      if (s.synced) {
        synced = true;
        wants_frame |= !c.multi && c.subscriber.empty(); // deliver()'s fast path, rides()
      }
    }
  }
  // Every subscription here pages: this stream's commits need not wake the
  // worker (paging reads them when the sockets drain). A live one without
  // the wake (a path that missed set_wake) gets it back with this row.
  set_wake(st, live);
  if (live)
    live_events_++;
  if (synced)
    st.pos_before = st.pos; // what a synced subscription falls back to when this row waits
  st.pos.add(row.msg_id);
  st.token_stale = true;
  Body body{encode_body(row), nullptr};
  const bool one_line = st.one_line_conns > 0;
  if (one_line)
    body.get(true);   // once for every connection in the gem's framing (and the tail)
  if (!row.ephemeral) // ephemeral ones are retained apart (retain_ephemeral)
    tail_add(st, row, body);
  // The whole frame for connections in step with the stream, when the
  // stream's own token is short enough to send: one per framing in use.
  // Not for a large body: copying it to put the id line in front would
  // hold it twice; each connection gets the id line as its own head in
  // front of the one shared body instead (and such rows are not batched).
  std::shared_ptr<const std::string> frame, frame1;
  if (wants_frame && body.lines->size() <= kJoinedFrameMax) {
    const std::string &token = st.token_of();
    if (token.size() <= cfg_.max_token_bytes) {
      auto with_id = [&](const std::string &b) {
        auto f = std::make_shared<std::string>();
        f->reserve(token.size() + 5 + b.size());
        f->append("id: ").append(token).append("\n").append(b);
        return std::shared_ptr<const std::string>(std::move(f));
      };
      frame = with_id(*body.lines);
      if (one_line)
        frame1 = body.one_line == body.lines ? frame : with_id(*body.one_line);
    }
  }
  // A run of rows that everyone may see is batched for the connections in
  // step with the stream (Engine::rides): each gets the run as one frame
  // when it ends (flush_batch), instead of one push per row.
  const bool batchable = frame && row.exclude == 0 && (!row.visible_to || row.visible_to->empty());
  if (!batchable || (batching_ && batching_ != &st))
    flush_batch();
  const size_t at = st.batch.size();
  if (st.riders < st.conns.size())
    for (Connection *c : st.conns) { // deliver() never changes st.conns
      if (c->riding)
        continue;
      for (size_t k = 0; k < c->subs.size(); ++k) {
        if (c->subs[k].st != &st)
          continue;
        if (batchable && rides(*c, c->subs[k])) {
          c->riding = true;
          c->ride_from = at;
          st.riders++;
        } else {
          const auto &f = c->one_line ? frame1 : frame;
          deliver(*c, k, row, body, f ? &f : nullptr);
        }
      }
    }
  if (st.riders == 0) {
    flush_stats(st, row.commit_us);
    return;
  }
  st.batch.push_back(
      Stream::Batched{row.msg_id, row.commit_us, body, frame, frame1, st.pos_before, batch_});
  st.batch_bytes += frame->size();
  batch_ = StreamDelta();
  batching_ = &st;
  if (st.batch.size() >= kBatchRows || st.batch_bytes >= cfg_.queue_max_bytes)
    flush_batch();
}

// Producers wake this process for the stream's commits only while one of
// its subscriptions takes them live (is not paging). While every one pages
// (behind a full socket, say) the commits wait in the ring until the worker
// wakes for its sockets, its timers, another stream or a ring filling up;
// paging reads what they added. On again as soon as one stops paging.
void Engine::set_wake(Stream &st, bool on) {
  if (st.wake_on == on)
    return;
  st.wake_on = on;
  obs_.wake(st.handle, on);
}

std::vector<void *> Engine::live_handles() const {
  std::vector<void *> out;
  for (const auto &[id, st] : streams_) {
    bool live = st->riders > 0;
    for (const Connection *c : st->conns)
      for (const Sub &s : c->subs)
        live |= s.st == st.get() && !s.paging;
    if (live)
      out.push_back(st->handle);
  }
  return out;
}

// A committed row the source could not read now (the read failed): the
// stream counts it as dispatched, and every subscription pages it from the
// table once reads work again; nothing is counted as delivered.
void Engine::unread(Stream &st, int64_t id) {
  if (st.pos.covers(id))
    return;
  for (Connection *c : st.conns)
    for (size_t k = 0; k < c->subs.size(); ++k)
      if (c->subs[k].st == &st && !c->subs[k].position().covers(id))
        demote(*c, k, id);
  st.pos.add(id);
  st.token_stale = true;
  st.tail_drop(id);
  remember_unread(st, id);
}

void Engine::remember_unread(Stream &st, int64_t id) {
  st.unread.insert(id);
  if (st.unread.size() > 10000)
    st.unread.erase(st.unread.begin());
}

// The ring says the row was committed, the table no longer has it (deleted
// or archived away before the worker read it) or has it unreadable:
// announced, never skipped silently. The tail never held it, so a replay
// across it pages the table, whose pages name it (take_page).
void Engine::deleted(Stream &st, int64_t id, wire::GapReason reason) {
  if (st.pos.covers(id))
    return;
  st.tail_drop(id);
  batch_.failed++;
  for (Connection *c : std::vector<Connection *>(st.conns))
    for (size_t k = 0; k < c->subs.size(); ++k)
      if (c->subs[k].st == &st && !c->subs[k].position().covers(id))
        notice(*c, k, wire::Gap::ids_gone(reason, {id}));
  remember_unread(st, id); // for those that page past it later
  st.pos.add(id);
  st.token_stale = true;
  flush_stats(st, 0);
}

// A row logical replication applied at or below what the stream's cursors
// may cover (later than logical_hold, capture/applied.cpp), and this stream
// did: a subscription whose position covers it can no longer get it and is
// told which id; one below it pages it from the table (the tail, which
// never held it, is dropped). A late row above the stream's position is
// dispatched as any row.
void Engine::late(Stream &st, int64_t id) {
  batch_.failed++;
  st.tail_drop(id);
  for (Connection *c : std::vector<Connection *>(st.conns))
    for (size_t k = 0; k < c->subs.size(); ++k)
      if (c->subs[k].st == &st && c->subs[k].position().covers(id))
        notice(*c, k, wire::Gap::ids_gone(wire::GapReason::Late, {id}));
  flush_stats(st, 0);
}

// Ephemeral broadcasts of this stream never reached this process (ring
// lapped, or a transaction too large for it): they exist nowhere else.
void Engine::ephemeral_lost(Stream &st, uint64_t lost) {
  // Their ids are unknown, but not above the committed maximum of this
  // round and the next: a cursor below it hears of them, and a new
  // subscription pages (and hears) instead of trusting the stream's position.
  st.ephemeral_floor_rounds = 2;
  heat(st);
  for (Connection *c : std::vector<Connection *>(st.conns))
    for (size_t k = 0; k < c->subs.size(); ++k)
      if (c->subs[k].st == &st)
        notice(*c, k, wire::Gap::lost(lost));
}

// Ids a transaction inserted and rolled back (an Aborted ring record): they
// will never become visible, so every position may cover them at once
// instead of keeping them as holes until the horizon passes (which an open
// transaction holds below its own ids for as long as it stays open). The
// stream's position and every live subscription's cover them now; one that
// pages covers them as it pages past (cover_aborted), so a rolled-back id
// never lengthens a token. docs/ARCHITECTURE.md, "The horizon".
void Engine::aborted(Stream &st, int64_t lo, int64_t hi) {
  lo = std::max(lo, st.pos.horizon + 1);
  if (lo > hi)
    return;
  st.pos.add_range(lo, hi);
  st.token_stale = true;
  int64_t &to = st.aborted[lo];
  to = std::max(to, hi);
  if (st.aborted.size() > kMaxAborted)
    st.aborted.erase(st.aborted.begin()); // stays covered in pos; pages keep it as a hole
  for (Connection *c : st.conns)
    for (Sub &sub : c->subs) {
      if (sub.st != &st || sub.synced)
        continue;
      if (sub.paging) { // what it paged past already; the rest as it pages
        if (lo <= sub.page_after)
          sub.pos.add_range(lo, std::min(hi, sub.page_after));
        continue;
      }
      sub.pos.add_range(lo, hi);
      if (sub.pos == st.pos)
        sub.synced = true;
    }
}

// Covers in sub's position the rolled-back ids of its stream in (after, upto].
void Engine::cover_aborted(const Stream &st, Sub &sub, int64_t after, int64_t upto) {
  if (st.aborted.empty() || upto <= after)
    return;
  auto it = st.aborted.upper_bound(after);
  if (it != st.aborted.begin() && std::prev(it)->second > after)
    --it; // a range that starts at or below `after` and reaches above it
  for (; it != st.aborted.end() && it->first <= upto; ++it)
    sub.pos.add_range(std::max(it->first, after + 1), std::min(it->second, upto));
}

void Engine::advance_horizons(const HorizonBounds &b) {
  if (b.frozen)
    return;
  for (const auto &[id, max] : b.max_committed) {
    auto sit = streams_.find(id);
    if (sit == streams_.end() || !sit->second->awake)
      continue; // gone, or released at the start of this round
    Stream *st = sit->second.get();
    int64_t h = max;
    const int64_t *f = b.floor_of(id);
    if (f)
      h = std::min(h, *f);
    if (f != nullptr || st->ephemeral_floor_rounds > 1 || st->first_bounds)
      heat(*st); // a floor holds it, or a loss still raises its floors: again next round
    if (st->ephemeral_floor_rounds > 0) {
      st->ephemeral_floor_rounds--;
      const int64_t upto = std::max(max, st->pos.highest());
      st->evicted_floor = std::max(st->evicted_floor, upto);
      st->lost_upto = std::max(st->lost_upto, upto);
    }
    if (st->first_bounds) {
      // Ephemeral broadcasts from before this process (no table row, not
      // in its memory) are below the first committed maximum it reads.
      st->first_bounds = false;
      st->lost_upto = std::max(st->lost_upto, max);
      if (st->eph_unknown && (obs_.ephemeral_seq(st->handle) > 0 || obs_.ephemeral_forgotten()))
        st->evicted_floor = std::max(st->evicted_floor, max);
      st->eph_unknown = false;
    }
    if (st->pos.horizon > st->published_horizon) {
      st->published_horizon = st->pos.horizon;
      obs_.horizon(st->handle, st->pos.horizon);
    }
    if (h <= st->pos.horizon)
      continue;
    st->pos.advance(h);
    st->token_stale = true;
    while (!st->aborted.empty() && st->aborted.begin()->second <= h)
      st->aborted.erase(st->aborted.begin());
    for (Connection *c : st->conns)
      for (Sub &sub : c->subs) {
        if (sub.st != st || sub.synced)
          continue;
        if (sub.paging) {
          // Every visible id up to page_after was sent (paged, or live).
          sub.pos.advance(std::min(h, sub.page_after));
          continue;
        }
        sub.pos.advance(h);
        if (sub.pos == st->pos)
          sub.synced = true;
      }
  }
}

// Ring events were lost (ring lapped, or a transaction too large for it):
// the tables are the truth. Every subscription pages what it has not seen
// from the table (bounded pages, with flow control); the stream's own
// position is completed by the horizon.
void Engine::catch_up_all() {
  counters_.catch_ups++;
  for (auto &[id, st] : streams_) {
    if (!st->awake) {
      st->lossy = true; // its ephemeral broadcasts may be gone: said at the wake
      continue;
    }
    for (Connection *c : st->conns)
      for (size_t k = 0; k < c->subs.size(); ++k)
        if (c->subs[k].st == st.get())
          demote(*c, k, c->subs[k].position().horizon + 1);
    st->tail_drop(st->pos.highest());
    st->tail_unknown = true;
    st->token_stale = true;
  }
  tails_unknown_ = true;
  settle_tails();
}

// A lost ring record's row was visible in its table before the record was
// written, so the table's maximum read now bounds every lost id: above it,
// the tail is complete again.
void Engine::settle_tails() {
  for (auto &[id, st] : streams_) {
    if (!st->tail_unknown || now_us_ < st->retry_at_us)
      continue;
    int64_t max = 0;
    if (!read_ok(rows_.max_id(st->info, &max))) {
      st->retry_at_us = now_us_ + 10000;
      continue;
    }
    st->tail_drop(max);
    st->lost_upto = std::max(st->lost_upto, max);
    st->tail_unknown = false;
  }
  tails_unknown_ = false;
  for (auto &[id, st] : streams_)
    tails_unknown_ |= st->tail_unknown;
}

void Engine::tail_add(Stream &st, const Row &row, const Body &body) {
  if (cfg_.memory_retention == 0 || row.msg_id <= st.tail_floor) {
    st.tail_floor = std::max(st.tail_floor, row.msg_id);
    return;
  }
  // Rows mostly come in id order; one committed out of order usually
  // belongs a few places from the end: looked for there first (recent,
  // cached rows), then by a binary search (a long transaction's rows).
  auto &tail = st.tail;
  auto at = tail.end();
  for (int steps = 0; at != tail.begin() && std::prev(at)->row.msg_id >= row.msg_id; ++steps) {
    if (steps == 8) {
      at = std::lower_bound(tail.begin(), at, row.msg_id,
                            [](const Stream::TailRow &r, int64_t id) { return r.row.msg_id < id; });
      break;
    }
    --at;
  }
  if (at != tail.end() && at->row.msg_id == row.msg_id)
    return; // held already
  Stream::TailRow t;
  t.row.msg_id = row.msg_id;
  t.row.event = row.event;
  t.row.visible_to = row.visible_to;
  t.row.exclude = row.exclude;
  t.row.enqueued_us = row.enqueued_us;
  t.body = body;
  t.at_us = now_us_;
  tail.insert(at, std::move(t)); // at the end unless out of order
  st.tail_bytes += body.bytes();
  tail_trim(st);
}

// The lowest ids go first: every row above the floor stays held. Beyond
// memory_retention rows a row stays while it is recent, so a connection
// that lags a fast stream for a moment pages from here, not from the
// table; the bytes bound holds regardless. (The lowest id is the oldest
// but for a row committed out of order: close enough for a time bound.)
// Run on every row added, and on every awake stream in the full rounds
// (round_streams), so a burst's extra rows leave within a second plus a
// full round also when no row follows.
void Engine::tail_trim(Stream &st) {
  auto &tail = st.tail;
  while (!tail.empty() && (st.tail_bytes > cfg_.queue_max_bytes ||
                           (tail.size() > cfg_.memory_retention &&
                            now_us_ - tail.front().at_us >= cfg_.memory_retention_us))) {
    st.tail_bytes -= tail.front().body.bytes();
    st.tail_floor = std::max(st.tail_floor, tail.front().row.msg_id);
    tail.pop_front();
  }
}

void Engine::retain_ephemeral(Stream &st, const Row &row) {
  const size_t keep = cfg_.memory_retention;
  if (keep > 0) {
    st.ephemeral.push_back(row);
    st.ephemeral_bytes += row.data.size();
  } else {
    st.evicted.push_back(row.msg_id);
  }
  while (st.ephemeral.size() > keep ||
         (st.ephemeral.size() > 1 && st.ephemeral_bytes > cfg_.queue_max_bytes)) {
    st.evicted.push_back(st.ephemeral.front().msg_id);
    st.ephemeral_bytes -= st.ephemeral.front().data.size();
    st.ephemeral.pop_front();
  }
  while (st.evicted.size() > 10000) {
    st.evicted_floor = std::max(st.evicted_floor, st.evicted.front());
    st.evicted.pop_front();
  }
}

void Engine::flush_stats(Stream &st, int64_t commit_us) {
  if (cfg_.stats_enabled && commit_us > 0 && cfg_.stats_per_batch) {
    if (stats_batch_.st != &st) {
      end_stats_batch();
      stats_batch_.st = &st;
      stats_batch_.first_commit_us = commit_us;
    }
    stats_batch_.first_commit_us = std::min(stats_batch_.first_commit_us, commit_us);
    stats_batch_.fanout = std::max(stats_batch_.fanout, (int64_t)batch_.queued);
  } else if (cfg_.stats_enabled && commit_us > 0) {
    record_history(st.info.name, "broadcast", (double)(now_us_ - commit_us) / 1000.0,
                   (int64_t)batch_.queued);
  }
  if (commit_us > 0 && batch_.queued)
    batch_.latency_us = now_us_ - commit_us;
  if (batch_.queued || batch_.overflow_dropped || batch_.bytes_queued || batch_.failed)
    obs_.stream_figures(st.handle, batch_);
  batch_ = StreamDelta();
}

// A stream's run of rows ends when another stream's row comes or the round
// ends: one broadcast row for it, from its first commit, with the most
// connections one of its rows reached.
void Engine::end_stats_batch() {
  if (stats_batch_.st == nullptr)
    return;
  record_history(stats_batch_.st->info.name, "broadcast",
                 (double)(now_us_ - stats_batch_.first_commit_us) / 1000.0, stats_batch_.fanout);
  stats_batch_ = StatsBatch();
}

size_t Engine::retained_bytes() const {
  size_t n = 0;
  for (const auto &[id, st] : streams_)
    n += st->tail_bytes + st->ephemeral_bytes;
  return n;
}

size_t Engine::tail_rows() const {
  size_t n = 0;
  for (const auto &[id, st] : streams_)
    n += st->tail.size();
  return n;
}

std::vector<Engine::StreamView> Engine::streams() const {
  std::vector<StreamView> out;
  for (const auto &[id, st] : streams_)
    out.push_back(StreamView{st->info.name, id, st->pos.horizon, st->info.max_committed,
                             st->info.is_public, st->handle});
  return out;
}

} // namespace pgbs::engine
