// Engine: one row to one connection, paging (replays and lag) and
// subscribing. docs/ARCHITECTURE.md, "Delivery: live, lag and replay".
#include "core/wire.hpp"
#include "engine/engine.hpp"
#include "engine/state.hpp"

#include <algorithm>
#include <climits>

namespace pgbs::engine {
namespace {

constexpr size_t kIdLine = 64; // an id line, for a first room check (deliver() checks exactly)
constexpr int kPagesPerCall = 4;

void backoff(Stream &st, int64_t now_us) {
  st.backoff_us = st.backoff_us == 0 ? 10000 : std::min<int64_t>(st.backoff_us * 2, 1000000);
  st.retry_at_us = now_us + st.backoff_us;
}

} // namespace

// The one place every path (live, tail, table) decides who gets a row: not
// excluded, and in the row's audience (no rules: labelled rows reach no one).
// A hidden row stays in the position, so later ones are not held up.
bool Engine::may_see(const Connection &c, const Row &row) const {
  if (row.exclude != 0 && row.exclude == c.id)
    return false;
  if (!row.visible_to || row.visible_to->empty())
    return true;
  return audiences_ && audiences_->visible(c.ctx, *row.visible_to);
}

bool Engine::lags(const Connection &c) const { return !c.live_only; }

// Room for one more data frame of `bytes`; an empty queue always takes one
// frame, however large, so no message is too large to be delivered.
bool Engine::room(const Connection &c, size_t bytes) const {
  const size_t ev = sink_.queued_events(c.ref);
  if (ev == 0)
    return true;
  const size_t by = sink_.queued_bytes(c.ref);
  return ev < cfg_.queue_max_events && by + bytes <= cfg_.queue_max_bytes &&
         !sink_.backed_up(c.ref);
}

std::string Engine::conn_token(const Connection &c) const {
  std::string out;
  if (c.subs.empty() && !c.multi)
    return "0"; // waiting for its stream: every row of it is still to come
  for (const Sub &s : c.subs) {
    if (!out.empty())
      out += ',';
    if (s.synced && !c.multi)
      return s.st->token_of();
    s.position().encode(out); // with its epoch: names the stream in a multi-stream token
  }
  return out;
}

// Stops live delivery of from_id and later ids to this subscription: paging
// sends them (from the tail or the table). A live subscription had every
// visible id below from_id; a paging one had every visible id up to page_after.
void Engine::demote(Connection &c, size_t k, int64_t from_id) {
  Sub &sub = c.subs[k];
  if (sub.synced) {
    sub.pos = sub.st->pos;
    sub.synced = false;
  }
  if (!sub.paging) {
    sub.paging = true;
    sub.page_after = from_id - 1;
  } else {
    sub.page_after = std::min(sub.page_after, from_id - 1);
  }
  if (!c.paging_listed) {
    c.paging_listed = true;
    paging_.push_back(&c);
  }
}

bool Engine::push(Connection &c, OutFrame f, bool data) {
  const size_t bytes = f.size(), n = f.events; // a batch: several events
  if (c.riding) // (cannot happen: a batch ends before anything else reaches a rider)
    flush_batch();
  if (!data) {
    f.control = true;
    sink_.push(c.ref, std::move(f));
    return true;
  }
  if (sink_.push(c.ref, std::move(f)) == OutQueue::PushResult::Queued) {
    counters_.queued += n;
    batch_.queued += n;
    batch_.bytes_queued += bytes;
    c.pushed += n;
    return true;
  }
  counters_.overflow_dropped += n;
  batch_.overflow_dropped += n;
  if (!c.overflow_noted) {
    c.overflow_noted = true;
    obs_.diagnostic(c.id, "overflow", c.subs[0].st->info.name,
                    std::string("queue full, policy ") +
                        overflow_policy_name(cfg_.overflow_policy));
  }
  return false;
}

// A gap notice for one subscription: what is gone, and the cursor this
// connection has reached (reconnecting with it loses nothing more).
void Engine::notice(Connection &c, size_t k, wire::Gap gap) {
  counters_.gaps++;
  const std::string resume = conn_token(c);
  gap.stream = c.subs[k].st->info.name;
  gap.resume = wire::Gap::Resume::Cursor;
  gap.cursor = resume;
  OutFrame f;
  f.body = std::make_shared<const std::string>(wire::gap_frame(gap));
  push(c, std::move(f), false);
}

// Queues one row on one subscription; false when it was deferred or held.
bool Engine::deliver(Connection &c, size_t k, const Row &row, const Body &encoded,
                     const std::shared_ptr<const std::string> *shared_frame) {
  Sub &sub = c.subs[k];
  Stream &st = *sub.st;
  if (!sub.synced) {
    if (sub.paging && row.msg_id > sub.page_after)
      return true; // paging reads it
    if (sub.pos.covers(row.msg_id))
      return true;
  }
  if (!may_see(c, row)) {
    if (!sub.synced)
      sub.pos.add(row.msg_id);
    return true;
  }
  const std::shared_ptr<const std::string> &body = encoded.get(c.one_line);
  // Lag: a frame that does not fit waits; paging sends it when the socket
  // drained. The subscription's position is as before this row.
  auto wait = [&](cursor::StreamPosition *before) {
    if (sub.synced)
      sub.pos = st.pos_before;
    else if (before)
      sub.pos = std::move(*before);
    sub.synced = false;
    counters_.deferred++;
    demote(c, k, row.msg_id);
    return false;
  };
  // Fast path: a single-stream subscription in step with its stream shares
  // one encoded frame (id line included) with every such connection.
  if (sub.synced && !c.multi && shared_frame && c.subscriber.empty()) {
    if (lags(c) && !room(c, (*shared_frame)->size()))
      return wait(nullptr);
    OutFrame f;
    f.body = *shared_frame;
    push(c, std::move(f), true);
    return true;
  }
  cursor::StreamPosition before;
  if (sub.synced) {
    before = st.pos_before;
  } else {
    before = sub.pos;
    sub.pos.add(row.msg_id);
  }
  if (sub.position().encoded_size() > cfg_.max_token_bytes) {
    // Too many ids above the horizon to name in a token: hold this id (and
    // what follows) back until the horizon moves, rather than send an id the
    // client could not resume from.
    sub.pos = std::move(before);
    sub.synced = false;
    counters_.held_back++;
    demote(c, k, row.msg_id);
    sub.held_at_horizon = st.pos.horizon;
    return false;
  }
  std::string token = conn_token(c);
  if (lags(c) && !room(c, token.size() + 5 + body->size()))
    return wait(&before);
  OutFrame f;
  f.head.reserve(token.size() + 5);
  f.head.append("id: ").append(token).append("\n");
  f.body = body;
  if (!push(c, std::move(f), true)) {
    if (lags(c)) // (cannot happen: room was checked) never counted as sent
      return wait(&before);
    return true;
  }
  if (!c.subscriber.empty()) {
    if (c.pushed_tokens.size() >= 2 * cfg_.queue_max_events + 16)
      c.pushed_tokens.pop_front(); // the stored cursor lags a little; it never runs ahead
    c.pushed_tokens.emplace_back(c.pushed, std::move(token));
  }
  return true;
}

// One page of a paging subscription, from the tail above its floor (every
// row this process dispatched is there) or else from the table. A page takes
// about as many payload bytes as the connection's queue has room for (within
// replay_page_bytes, one row at least): only the row that crossed the room
// is read again, so a catch-up costs in proportion to the bytes it sends.
bool Engine::page(Connection &c, size_t k) {
  Sub &sub = c.subs[k];
  Stream &st = *sub.st;
  if (st.ephemeral_check)
    return false; // ephemeral broadcasts may be lost: known after the next drain, announced first
  if (!room(c, need(sub)))
    return false; // the row that did not fit last time still does not: not read again yet
  sub.wait_bytes = 0;
  std::vector<Stream::TailRow> items;
  bool last_page = false;
  if (!take_page(c, k, &items, &last_page))
    return false;
  for (size_t i = 0; i < items.size(); ++i) {
    const Row &r = items[i].row;
    const Body &body = items[i].body;
    const size_t bytes = (body ? body.lines->size() : r.data.size() + 64) + kIdLine;
    if (!room(c, bytes)) {
      sub.wait_bytes = bytes; // the next page waits until this fits
      sub.wait_after = sub.page_after;
      flush_stats(st, 0);
      return false; // the rest (about one row: the page took what had room) is read again
    }
    // Every visible id below this row has been sent; below the stream's
    // horizon the ones not returned will never be visible, so the token folds
    // them, and so do the ones rolled back above it.
    sub.pos.advance(std::min(r.msg_id - 1, st.pos.horizon));
    cover_aborted(st, sub, sub.page_after, r.msg_id - 1);
    sub.page_after = r.msg_id; // demote() moves it back below r if r waits
    if (r.unreadable) {
      // A row the source cannot turn into a frame: skipped and announced.
      if (!sub.pos.covers(r.msg_id)) {
        sub.pos.add(r.msg_id);
        batch_.failed++;
        notice(c, k, wire::Gap::ids_gone(wire::GapReason::Unreadable, {r.msg_id}));
      }
      continue;
    }
    if (!sub.pos.covers(r.msg_id) &&
        !deliver(c, k, r, body ? body : Body{encode_body(r), nullptr})) {
      flush_stats(st, 0);
      return false;
    }
  }
  flush_stats(st, 0);
  if (!last_page)
    return false;
  // Caught up with everything visible: from here the live path feeds it.
  sub.paging = false;
  sub.pos.advance(st.pos.horizon);
  cover_aborted(st, sub, sub.page_after, st.pos.highest());
  sub.synced = sub.pos == st.pos;
  set_wake(st, true); // live from here: producers wake the worker for it again
  return true;
}

// Reads the next page's rows into *items (tail or table, ephemeral
// broadcasts merged in, notices sent); false when nothing can be read now.
bool Engine::take_page(Connection &c, size_t k, std::vector<Stream::TailRow> *out, bool *last) {
  Sub &sub = c.subs[k];
  Stream &st = *sub.st;
  std::vector<Stream::TailRow> &items = *out;
  const size_t page = std::max<size_t>(1, std::min(cfg_.replay_page_size, cfg_.queue_max_events));
  const size_t queued = sink_.queued_bytes(c.ref);
  const size_t budget = std::max<size_t>(
      1, std::min(cfg_.replay_page_bytes,
                  cfg_.queue_max_bytes > queued ? cfg_.queue_max_bytes - queued : 0));
  bool wait = false; // the table holds a row that must come later
  bool full = false; // the page stopped at its row or byte bound
  if (sub.page_after >= st.tail_floor && !st.tail_unknown) {
    auto it =
        std::upper_bound(st.tail.begin(), st.tail.end(), sub.page_after,
                         [](int64_t id, const Stream::TailRow &r) { return id < r.row.msg_id; });
    size_t bytes = 0;
    for (; it != st.tail.end() && !full; ++it) {
      if (c.one_line && !it->body.one_line) { // made once, kept with the row for the next ones
        it->body.get(true);
        st.tail_bytes += it->body.bytes() - it->body.lines->size();
      }
      items.push_back(*it);
      bytes += it->body.lines->size();
      full = items.size() >= page || bytes >= budget;
    }
  } else {
    if (now_us_ < st.retry_at_us)
      return false;
    std::vector<Row> rows;
    bool ok = true;
    if (st.info.has_retention) {
      int64_t floor = 0;
      ok = read_ok(rows_.retention_floor(st.info, &floor));
      st.info.retention_floor = std::max(st.info.retention_floor, floor);
    }
    ok = ok && read_ok(rows_.rows_after(st.info, std::max(sub.page_after, st.info.retention_floor),
                                        (int64_t)page, budget, &rows));
    if (!ok) {
      backoff(st, now_us_);
      return false;
    }
    st.backoff_us = 0;
    counters_.rows_read += rows.size();
    size_t bytes = 0;
    for (const Row &r : rows)
      bytes += r.data.size();
    full = rows.size() >= page || bytes >= budget;
    if (sub.page_after < st.info.retention_floor && sub.pos.horizon < st.info.retention_floor) {
      // Retention removed rows this client has not seen: say so, then send what is left.
      sub.pos.advance(st.info.retention_floor);
      sub.page_after = st.info.retention_floor;
      notice(c, k,
             wire::Gap::retention(rows.empty() ? std::nullopt
                                               : std::optional<int64_t>(rows[0].msg_id)));
    }
    // Committed ids the table no longer has in the span this page covers.
    const int64_t span_end =
        !full ? std::max(st.pos.highest(), st.pos.horizon) : rows.back().msg_id;
    // Named in one notice of at most about 2000 characters of ids.
    std::vector<int64_t> gone;
    size_t gone_chars = 0;
    for (auto it = st.unread.upper_bound(sub.page_after);
         it != st.unread.end() && *it <= span_end && gone_chars < 2000; ++it) {
      bool found = false;
      for (const Row &r : rows)
        found |= r.msg_id == *it;
      if (!found && !sub.pos.covers(*it)) {
        gone_chars += (gone.empty() ? 0 : 1) + std::to_string(*it).size();
        gone.push_back(*it);
      }
    }
    if (!gone.empty())
      notice(c, k, wire::Gap::ids_gone(wire::GapReason::Deleted, std::move(gone)));
    // A row the ring has not brought yet (committed after rows still in the
    // ring, or lost with ring events and not yet passed by the horizon) is
    // not sent from the table: it waits, so that it never comes before a row
    // committed earlier. Below the horizon every row is settled.
    for (Row &r : rows) {
      if (r.msg_id <= st.pos.horizon || st.pos.covers(r.msg_id)) {
        // (a small row is encoded when it is sent, if it fits)
        Body body = r.data.size() > kJoinedFrameMax ? paged_body(st, r, c.one_line) : Body();
        items.push_back({std::move(r), std::move(body)});
        continue;
      }
      wait = true;
      break;
    }
  }
  *last = !full && !wait;
  const int64_t upto = wait && items.empty() ? sub.page_after
                       : wait || !*last      ? items.back().row.msg_id
                                             : INT64_MAX;
  // Ephemeral broadcasts: merged in while held, announced when gone.
  const size_t durable = items.size();
  for (const Row &e : st.ephemeral)
    if (e.msg_id > sub.page_after && e.msg_id <= upto)
      items.push_back({e, Body()});
  const int64_t from = std::max(sub.page_after, sub.ephemeral_noticed);
  bool expired = from < st.evicted_floor && sub.pos.horizon < st.evicted_floor;
  int64_t noticed = std::min(st.evicted_floor, upto);
  for (int64_t id : st.evicted)
    if (id > from && id <= upto && !sub.pos.covers(id)) {
      expired = true;
      noticed = std::max(noticed, id);
    }
  if (expired) {
    sub.ephemeral_noticed = std::max(sub.ephemeral_noticed, noticed);
    notice(c, k, wire::Gap(wire::GapReason::EphemeralExpired));
  }
  if (items.size() != durable)
    std::sort(items.begin(), items.end(),
              [](const auto &a, const auto &b) { return a.row.msg_id < b.row.msg_id; });
  return true;
}

// The body of a large row read from the table for a page: the one another
// connection still holds, else encoded here and offered to the next (see
// Stream::paged_bodies). The row's data goes: the body carries it.
Body Engine::paged_body(Stream &st, Row &row, bool one_line) {
  if (row.unreadable)
    return Body();
  Stream::PagedBody &held = st.paged_bodies[row.msg_id];
  Body body{held.lines.lock(), held.one_line.lock()};
  if (!body)
    body = Body{encode_body(row), nullptr};
  row.data = std::string();
  if (one_line)
    body.get(true); // once, for every connection in the gem's framing
  held.lines = body.lines;
  held.one_line = body.one_line;
  if (st.paged_bodies.size() >= st.paged_sweep_at) {
    for (auto it = st.paged_bodies.begin(); it != st.paged_bodies.end();)
      it = it->second.lines.expired() ? st.paged_bodies.erase(it) : std::next(it);
    st.paged_sweep_at = std::max<size_t>(16, 2 * st.paged_bodies.size());
  }
  return body;
}

// The room a paging subscription's next page needs: that of the row that
// did not fit last time (while it pages from the same place), else any.
size_t Engine::need(const Sub &sub) const {
  return sub.wait_bytes && sub.wait_after == sub.page_after ? sub.wait_bytes : 0;
}

size_t Engine::need(const Connection &c) const {
  size_t n = SIZE_MAX;
  for (const Sub &s : c.subs)
    if (s.paging)
      n = std::min(n, need(s));
  return n == SIZE_MAX ? 0 : n;
}

bool Engine::paging_pending() const {
  for (const Connection *c : paging_)
    if (room(*c, need(*c)))
      return true;
  return false;
}

bool Engine::continue_paging() {
  bool movable = false;
  std::vector<Connection *> still;
  for (Connection *c : paging_) {
    bool pending = false;
    for (size_t k = 0; k < c->subs.size(); ++k) {
      Sub &sub = c->subs[k];
      if (!sub.paging)
        continue;
      // A held subscription waits for its stream's horizon to move.
      if (sub.held_at_horizon >= 0 && sub.held_at_horizon == sub.st->pos.horizon) {
        pending = true;
        continue;
      }
      sub.held_at_horizon = -1;
      // Bounded work per call: a few pages, only while the queue has room.
      for (int n = 0;
           n < kPagesPerCall && sub.paging && sub.held_at_horizon < 0 && room(*c, need(sub)); ++n) {
        const size_t before = sink_.queued_events(c->ref);
        const int64_t after = sub.page_after;
        if (page(*c, k))
          break;
        if (sink_.queued_events(c->ref) == before && sub.page_after == after)
          break; // waiting for a retry or for room
      }
      pending |= sub.paging;
    }
    c->paging_listed = pending;
    if (pending) {
      still.push_back(c);
      movable = movable || room(*c, need(*c));
    }
  }
  paging_.swap(still);
  return movable;
}

} // namespace pgbs::engine
