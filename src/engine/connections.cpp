// Engine: subscribing, closing, what connections() shows, durable
// subscriber cursors, retention and history. docs/ARCHITECTURE.md,
// "The engine".
#include "core/names.hpp"
#include "core/sse.hpp"
#include "core/wire.hpp"
#include "engine/engine.hpp"
#include "engine/state.hpp"

#include <algorithm>
#include <climits>

namespace pgbs::engine {
namespace {

long spread_retry_ms(uint64_t id) {
  uint64_t x = (id + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  return 1000 + static_cast<long>(x % 2001);
}

// A gap notice among a connection's first bytes: before its first id line,
// so without a cursor to resume from.
std::string gap_at_start(const Stream &st, wire::GapReason reason) {
  wire::Gap g(reason);
  g.stream = st.info.name;
  return wire::gap_frame(g);
}

// The position a cursor gives for one stream: by name, else by epoch (the
// entries of a multi-stream token), else the one unnamed entry of a
// single-stream cursor.
const cursor::StreamPosition *position_for(const cursor::Cursor &cur, const StreamInfo &si,
                                           bool multi) {
  for (const auto &[name, pos] : cur.streams)
    if (!name.empty() && name == si.name)
      return &pos;
  for (const auto &[name, pos] : cur.streams)
    if (name.empty() && pos.epoch == si.id)
      return &pos;
  if (!multi && cur.streams.size() == 1 && cur.streams[0].first.empty())
    return &cur.streams[0].second;
  return nullptr;
}

// True when a client at position p may have missed an ephemeral broadcast
// that this process no longer holds.
bool missed_ephemeral(const Stream &st, const cursor::StreamPosition &p) {
  if (p.horizon < st.evicted_floor)
    return true;
  for (int64_t id : st.evicted)
    if (!p.covers(id))
      return true;
  return false;
}

} // namespace

// The stream a signed name opens: the one whose queue is the gem's queue for
// that name (names::gem_stream, the rule SQL's find_stream applies too),
// under whichever of its names the catalog holds it. A stream holding one of
// those names with another queue is not it. None yet: the name auto_attach
// will give the gem's queue, which the subscription waits for. No when the
// gem refuses the name, or when both names auto_attach could give its queue
// are held by other queues' streams (it could never be attached).
auth::Catalog::Found Engine::find_signed_stream(const std::string &logical, std::string *name) {
  names::GemStream gs;
  if (!names::gem_stream(logical, &gs))
    return Found::No;
  for (const std::string &n : gs.names) {
    bool failed = false;
    Stream *st = lookup(n, &failed);
    if (failed)
      return Found::Unreadable;
    if (st && names::is_gem_queue(gs, st->info.queue_schema, st->info.queue_table)) {
      *name = n;
      return Found::Yes;
    }
  }
  if (!find_by_name(gs.short_name))
    *name = gs.short_name;
  else if (!find_by_name(gs.queue))
    *name = gs.queue;
  else
    return Found::No;
  return Found::Yes;
}

// Every way to make a stream public moves the catalog version: with the
// catalog of this version loaded whole, an anonymous request for a name it
// lacks is refused without reading it (a flood of made-up names costs no
// SQL). Other unknown names are read once, then remembered.
auth::Catalog::Found Engine::find_stream(const std::string &name, bool may_read, bool *is_public) {
  Stream *st = find_by_name(name);
  if (st == nullptr && (may_read || !catalog_complete_)) {
    bool failed = false;
    st = lookup(name, &failed);
    if (failed)
      return Found::Unreadable;
  }
  if (st == nullptr)
    return Found::No;
  *is_public = st->info.is_public;
  return Found::Yes;
}

// Admission (auth::admit) decides; then the streams are hooked and woken, the
// starting positions taken, the awaited names registered and the preamble
// sent.
bool Engine::subscribe(const Subscribe &req, bool again, bool bounded) {
  const auth::Admission adm = auth::admit(
      gate_, {req.creds, req.now_unix_s, req.streams, req.presence, req.subscriber}, *this);
  if (adm.verdict == auth::Admission::Verdict::Refuse ||
      adm.verdict == auth::Admission::Verdict::Retry) {
    turn_away(req, adm.verdict == auth::Admission::Verdict::Refuse ? adm.status : 0, adm.reason);
    return true;
  }
  std::unique_ptr<Connection> c = new_connection(req, adm);
  if (!attach(req, *c, adm.open))
    return true;
  if (!again && !c->subs.empty() && !bounded)
    return false; // positions are taken from the streams: bring them up to date first
  if (!again)
    for (const Sub &s : c->subs)
      if (s.st->first_bounds)
        return false; // loaded just now: a round bounds it first
  cursor::Cursor cur;
  bool have_cursor = false;
  if (!start_cursor(req, *c, &cur, &have_cursor))
    return true;
  int64_t replay_n = -1; // -1: none; INT64_MAX: all
  if (!have_cursor && !req.replay.empty()) {
    if (req.replay == "all")
      replay_n = INT64_MAX;
    else if (!cursor::parse_int64(req.replay, &replay_n)) {
      turn_away(req, 400, "invalid replay: use all or a number\n");
      return true;
    }
  }
  std::string gaps;
  for (Sub &sub : c->subs)
    if (!place(*c, sub, have_cursor ? &cur : nullptr, replay_n, &gaps)) {
      turn_away(req, 0, "stream unavailable: cannot read the backlog, retry\n");
      return true;
    }
  std::vector<std::string> awaited_now;
  if (!await(req, *c, &awaited_now))
    return true;
  std::string names;
  for (const Sub &s : c->subs)
    names += (names.empty() ? "" : ",") + s.st->info.name;
  for (const PendingSub &p : c->pending)
    names += (names.empty() ? "" : ",") + p.name;
  const std::string since = conn_token(*c);
  c->ref = sink_.open(c->id, preamble(req, *c, since, names, gaps), since);
  if (c->ref == nullptr) {
    for (const std::string &n : awaited_now)
      obs_.awaited(n, false);
    return true;
  }
  enter(req, std::move(c), names, since);
  return true;
}

// Answers a request that does not open: refused with `status`, or (0) told
// to come back soon, when a read failed (a lock, a cancelled statement).
// False, as the steps return once they answered.
bool Engine::turn_away(const Subscribe &req, int status, const std::string &reason) {
  if (status)
    sink_.reject(req.conn_id, status, reason);
  else
    sink_.retry_later(req.conn_id, reason);
  std::string detail = (status ? std::to_string(status) : std::string("retry")) + " " + reason;
  if (detail.back() == '\n')
    detail.pop_back();
  obs_.diagnostic(req.conn_id, "rejected", req.streams.empty() ? "" : req.streams[0], detail);
  return false;
}

std::unique_ptr<Connection> Engine::new_connection(const Subscribe &req,
                                                   const auth::Admission &adm) {
  auto c = std::make_unique<Connection>();
  c->id = req.conn_id;
  c->multi = adm.open.size() + adm.awaited.size() > 1;
  c->subscriber = req.subscriber;
  c->ctx = adm.who.ctx;
  c->sub = adm.who.sub;
  c->presence = req.presence;
  c->expires_at_s = adm.who.expires_at;
  c->one_line = req.gem;
  for (const std::string &name : adm.awaited) {
    PendingSub p;
    p.name = name;
    c->pending.push_back(std::move(p));
  }
  return c;
}

// The admitted streams that exist: hooked (only for an admitted request: no
// DDL on an anonymous one), then woken (their shared-memory entry, and a
// position from the table).
bool Engine::attach(const Subscribe &req, Connection &c, const std::vector<std::string> &open) {
  for (const std::string &name : open) {
    Stream *st = find_by_name(name);
    if (st == nullptr) // admission found it: nothing between can drop it
      return turn_away(req, 0, "stream unavailable: cannot read the catalog, retry\n");
    if (!st->info.hooked && (st = hook(st)) == nullptr)
      return turn_away(req, 503, "stream unavailable: cannot hook its queue, retry\n");
    Sub sub;
    sub.st = st;
    c.subs.push_back(sub);
  }
  for (const Sub &s : c.subs)
    switch (wake(*s.st)) {
    case Wake::Ok:
      break;
    case Wake::ReadFailed:
      return turn_away(req, 0, "stream unavailable: cannot read its queue, retry\n");
    case Wake::NoRoom:
      return turn_away(req, 503,
                       "stream unavailable: shared memory tracks too many streams at once "
                       "(pgbus_stream.max_streams), retry\n");
    }
  return true;
}

// The cursor the connection starts from: the one given, else a durable
// subscriber's stored ones (*have false when neither). Awaited streams keep
// theirs for when they are born.
bool Engine::start_cursor(const Subscribe &req, Connection &c, cursor::Cursor *cur, bool *have) {
  if (req.cursor) {
    std::string err;
    if (!cursor::parse(*req.cursor, cur, &err))
      return turn_away(req, 400, "invalid cursor: " + err + "\n");
    if (c.multi && cur->streams.size() == 1 && cur->streams[0].first.empty() &&
        cur->streams[0].second.epoch == 0)
      return turn_away(req, 400, "invalid cursor: several streams need a name:position cursor\n");
    *have = true;
  } else if (!req.subscriber.empty()) {
    // A durable subscriber without an id of its own resumes from its stored cursors.
    std::vector<std::string> names;
    for (const Sub &s : c.subs)
      names.push_back(s.st->info.name);
    std::vector<StoredCursor> stored;
    if (!read_ok(rows_.stored_cursors(req.subscriber, names, &stored)))
      return turn_away(req, 0, "stream unavailable: cannot read the subscriber's cursor, retry\n");
    for (const StoredCursor &sc : stored) {
      cursor::StreamPosition p;
      if (cursor::parse_stream(sc.cursor, &p, nullptr))
        cur->streams.emplace_back(sc.stream, p);
    }
    *have = !cur->streams.empty();
  }
  if (*have)
    for (PendingSub &p : c.pending)
      for (const auto &[name, pos] : cur->streams)
        if (name == p.name || (!c.multi && cur->streams.size() == 1 && name.empty())) {
          p.has_pos = true;
          p.pos = pos;
        }
  return true;
}

// Where one subscription starts: its cursor's position (with a gap notice
// when the stream was re-created or an ephemeral message it may have missed
// is gone), else the replay asked for, else now. False when the backlog
// could not be read.
bool Engine::place(const Connection &c, Sub &sub, const cursor::Cursor *cur, int64_t replay_n,
                   std::string *gaps) {
  Stream &st = *sub.st;
  const cursor::StreamPosition *p = cur ? position_for(*cur, st.info, c.multi) : nullptr;
  if (p) {
    sub.pos = *p;
    if (sub.pos.epoch != 0 && sub.pos.epoch != st.info.id) {
      // The stream was dropped and re-created: its ids restarted.
      *gaps += gap_at_start(st, wire::GapReason::StreamRecreated);
      sub.pos = cursor::StreamPosition();
    } else if (missed_ephemeral(st, sub.pos)) {
      *gaps += gap_at_start(st, wire::GapReason::EphemeralExpired);
      sub.ephemeral_noticed = st.evicted_floor; // paging announces only later losses
      for (int64_t id : st.evicted)
        sub.ephemeral_noticed = std::max(sub.ephemeral_noticed, id);
    }
    sub.pos.epoch = st.info.id;
  } else if (replay_n > 0) {
    sub.pos = cursor::StreamPosition();
    sub.pos.epoch = st.info.id;
    if (replay_n != INT64_MAX) {
      int64_t nth = 0;
      if (!read_ok(rows_.nth_newest(st.info, replay_n, &nth)))
        return false;
      if (nth > 0)
        sub.pos.advance(nth - 1);
      else
        sub.pos = st.pos;
    }
  } else {
    sub.pos = st.pos; // from now on
    if (sub.pos.encoded_size() > cfg_.max_token_bytes) {
      // The stream's own position names more ids above its horizon than a
      // token may: start at the horizon and page the rest (recent rows).
      sub.pos = cursor::StreamPosition();
      sub.pos.epoch = st.info.id;
      sub.pos.advance(st.pos.horizon);
    }
  }
  // Retention is checked on the first page read from the table (with the
  // floor as stored in the catalog, whichever worker moved it).
  sub.synced = sub.pos == st.pos && !st.tail_unknown && st.pos.horizon >= st.lost_upto;
  sub.paging = !sub.synced;
  sub.page_after = sub.pos.horizon;
  return true;
}

// Waiting for streams: bounded per process and in shared memory (where their
// creators look). *awaited_now: the names this connection is the first here
// to await.
bool Engine::await(const Subscribe &req, const Connection &c,
                   std::vector<std::string> *awaited_now) {
  for (const PendingSub &p : c.pending) {
    if (pending_.count(p.name))
      continue;
    if (pending_.size() + awaited_now->size() >= cfg_.max_pending_streams ||
        !obs_.awaited(p.name, true)) {
      for (const std::string &n : *awaited_now)
        obs_.awaited(n, false);
      return turn_away(req, 503,
                       "too many streams awaited (pgbus_stream.max_pending_streams), retry\n");
    }
    awaited_now->push_back(p.name);
  }
  return true;
}

std::string Engine::preamble(const Subscribe &req, const Connection &c, const std::string &since,
                             const std::string &names, const std::string &gaps) const {
  std::string out;
  // Each connection's retry is 1-3 s (2 s on average), spread by its id, so
  // that browsers dropped together (a restart) do not all come back in the
  // same instant. The gem's routes keep the gem's 2000.
  sse::append_retry(out, req.gem || !req.creds.signed_name.empty() ? 2000 : spread_retry_ms(c.id));
  if (req.gem) {
    // The gem's own bytes: retry and the open comment as two blocks, naming
    // the cursor given (its integer, or a token of ours) and the stream.
    sse::append_comment(out, "pgbus stream open since_id=" + (req.cursor ? *req.cursor : since) +
                                 " stream=" + names);
  } else {
    out.pop_back(); // one block: retry, comment and the connected event
    out += ": pgbus stream open since_id=" + since + " stream=" + names + "\n";
    if (!req.connected)
      out += "\n";
  }
  if (req.connected)
    out += wire::connected_frame(c.id);
  out += gaps;
  // The starting cursor as the stream's first id: a frame with an id and no
  // data dispatches nothing but sets an EventSource's last event id, so a
  // client that drops before its first message resumes from here
  // (Last-Event-ID) instead of from "now", losing what came between. Not on
  // the gem's routes: its element always sends since=, and its client counts
  // every block with an id.
  if (!req.gem)
    out += "id: " + since + "\n\n";
  return out;
}

// The connection, opened at the sink, joins its streams and the awaited
// names; its replays start paging.
void Engine::enter(const Subscribe &req, std::unique_ptr<Connection> c, const std::string &names,
                   const std::string &since) {
  c->live_only =
      cfg_.overflow_policy != OverflowPolicy::Lag && c->subscriber.empty(); // see configure()
  c->opened_us = now_us_;
  obs_.diagnostic(c->id, "subscribed", names,
                  "since=" + since + (c->subscriber.empty() ? "" : " subscriber=" + c->subscriber) +
                      (c->pending.empty() ? "" : " waiting") + " remote=" + req.remote_addr);
  Connection *conn = c.get();
  conns_.emplace(conn->id, std::move(c));
  if (conn->expires_at_s > 0)
    expiries_.emplace(conn->expires_at_s, conn->id);
  for (const PendingSub &p : conn->pending) {
    pending_[p.name].push_back(conn);
    pending_subs_++;
  }
  bool needs_paging = false;
  for (size_t k = 0; k < conn->subs.size(); ++k) {
    Sub &s = conn->subs[k];
    if (s.st->conns.empty()) {
      watched_.push_back(s.st);
      obs_.watched(s.st->handle, true);
    }
    set_wake(*s.st, true); // until its rows show that every subscription here pages
    s.st->conns.push_back(conn);
    s.st->one_line_conns += conn->one_line;
    obs_.subscribers(s.st->handle, 1);
    heat(*s.st); // a new subscription syncs when the horizon next moves
    record_history(s.st->info.name, "connect", 0, 0);
    if (s.paging) {
      s.paging = false;
      demote(*conn, k, s.page_after + 1);
      needs_paging = true;
    }
  }
  if (!conn->subscriber.empty())
    subscriber_conns_.push_back(conn);
  if (needs_paging)
    continue_paging();
}

void Engine::closed(uint64_t conn_id) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end())
    return;
  Connection *c = it->second.get();
  if (c->expires_at_s > 0)
    forget_expiry(*c);
  if (!c->subscriber.empty()) {
    note_written_token(*c);
    subscriber_conns_.erase(std::remove(subscriber_conns_.begin(), subscriber_conns_.end(), c),
                            subscriber_conns_.end());
  }
  paging_.erase(std::remove(paging_.begin(), paging_.end(), c), paging_.end());
  for (const PendingSub &p : c->pending)
    unpend(p.name, c);
  const double lived_ms = (double)(now_us_ - c->opened_us) / 1000.0;
  for (Sub &s : c->subs) {
    record_history(s.st->info.name, "disconnect", lived_ms, 0);
    obs_.subscribers(s.st->handle, -1);
    auto &v = s.st->conns;
    v.erase(std::remove(v.begin(), v.end(), c), v.end());
    s.st->one_line_conns -= c->one_line;
    if (v.empty()) {
      watched_.erase(std::remove(watched_.begin(), watched_.end(), s.st), watched_.end());
      obs_.watched(s.st->handle, false);
      set_wake(*s.st, false);
      idle(*s.st); // released after the linger (lifetime.cpp)
    }
  }
  sink_.release(c->ref);
  conns_.erase(it);
}

bool Engine::describe(uint64_t conn_id, std::string *streams, std::string *cursor,
                      std::string *subscriber, std::string *state) const {
  auto it = conns_.find(conn_id);
  if (it == conns_.end())
    return false;
  const Connection &c = *it->second;
  streams->clear();
  bool paging = false;
  auto add = [&](const std::string &name) { // no temporary per name
    if (!streams->empty())
      streams->push_back(',');
    streams->append(name);
  };
  for (const Sub &s : c.subs) {
    add(s.st->info.name);
    paging |= s.paging;
  }
  for (const PendingSub &p : c.pending)
    add(p.name);
  *cursor = conn_token(c);
  *subscriber = c.subscriber;
  *state = paging ? "replaying" : c.subs.empty() ? "waiting" : "live";
  return true;
}

bool Engine::presence_of(uint64_t conn_id, std::vector<std::pair<int64_t, std::string>> *streams,
                         std::optional<std::string> *sub, bool *wants) const {
  auto it = conns_.find(conn_id);
  if (it == conns_.end())
    return false;
  const Connection &c = *it->second;
  streams->clear();
  for (const Sub &s : c.subs)
    streams->emplace_back(s.st->info.id, s.st->info.name);
  *sub = c.sub;
  *wants = c.presence;
  return true;
}

bool Engine::push_control(uint64_t conn_id, const std::string &frame) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end() || !room(*it->second, frame.size()))
    return false;
  OutFrame f;
  f.body = std::make_shared<const std::string>(frame);
  return push(*it->second, std::move(f), false);
}

// Durable subscribers: the token of the last data frame that reached the socket.
void Engine::track_written() {
  for (Connection *c : subscriber_conns_) {
    const uint64_t written = sink_.written(c->ref);
    while (!c->pushed_tokens.empty() && c->pushed_tokens.front().first < written)
      c->pushed_tokens.pop_front();
    if (c->pushed_tokens.empty() || c->pushed_tokens.front().first != written)
      continue;
    if (c->written_token != c->pushed_tokens.front().second) {
      c->written_token = c->pushed_tokens.front().second;
      note_written_token(*c);
    }
  }
}

// Splits the connection's last written id into per-stream positions.
void Engine::note_written_token(Connection &c) {
  if (c.written_token.empty())
    return;
  cursor::Cursor cur;
  if (!cursor::parse(c.written_token, &cur, nullptr))
    return;
  for (const Sub &s : c.subs) {
    const cursor::StreamPosition *p = position_for(cur, s.st->info, c.multi);
    if (!p)
      continue;
    std::string text;
    p->encode(text);
    const auto key = std::make_pair(c.subscriber, s.st->info.name);
    // Bounded even if flushes keep failing: a cursor left unstored only lags.
    if (dirty_cursors_.size() < 100000 || dirty_cursors_.count(key))
      dirty_cursors_[key] = text;
  }
}

bool Engine::flush_cursors() {
  if (dirty_cursors_.empty())
    return true;
  std::vector<StoredCursor> batch;
  for (auto &[key, token] : dirty_cursors_)
    batch.push_back(StoredCursor{key.first, key.second, token});
  if (!read_ok(rows_.store_cursors(batch)))
    return false; // kept: stored at the next flush
  dirty_cursors_.clear();
  return true;
}

// Streams with their own retention are visited every run; those under the
// default retention (possibly many thousands, most never loaded here) come
// from the catalog, at most kDefaultPerRun per run, round-robin by id, so
// one run stays bounded.
void Engine::apply_retention() {
  constexpr int64_t kDefaultPerRun = 100;
  const int batch = 1000;
  std::vector<StreamInfo> due; // streams this run trims
  for (auto &[id, st] : streams_)
    if (st->info.has_retention)
      due.push_back(st->info);
  if (cfg_.default_retention) {
    std::vector<int64_t> ids;
    if (read_ok(rows_.default_retention_streams(default_retention_after_, kDefaultPerRun, &ids))) {
      if ((int64_t)ids.size() < kDefaultPerRun && default_retention_after_ > 0) { // wrap around
        default_retention_after_ = 0;
        read_ok(rows_.default_retention_streams(0, kDefaultPerRun - (int64_t)ids.size(), &ids));
      }
      for (int64_t id : ids) {
        auto it = streams_.find(id);
        StreamInfo si;
        si.id = id;
        due.push_back(it == streams_.end() ? si : it->second->info);
      }
      if (!ids.empty())
        default_retention_after_ = ids.back(); // the next run goes on from here
    }
  }
  for (const StreamInfo &si : due) {
    auto it = streams_.find(si.id);
    Stream *st = it == streams_.end() ? nullptr : it->second.get();
    for (int round = 0; round < 10; round++) { // at most 10 batches per stream per run
      int64_t removed = 0, floor = 0;
      if (!read_ok(rows_.apply_retention(si, batch, &removed, &floor)))
        break;
      if (st)
        st->info.retention_floor = std::max(st->info.retention_floor, floor);
      if (removed > 0)
        obs_.retention_removed(si.id, st ? st->handle : nullptr, removed);
      if (removed < batch)
        break;
    }
  }
}

// An auto-attached stream gets its capture triggers at its first
// subscription (until then its producers pay nothing). The rows committed
// before are all in the table (CREATE TRIGGER waits for inserts in flight),
// so the stream is loaded afresh: its position starts from the table and
// replays read the rest from it. Nobody was subscribed to it.
Stream *Engine::hook(Stream *st) {
  const int64_t id = st->info.id;
  if (!st->conns.empty()) { // another worker hooked it; this catalog row is older
    st->info.hooked = true;
    return st;
  }
  if (!read_ok(rows_.hook(st->info)))
    return nullptr;
  drop_stream(id, "stream hooked");
  CatalogFilter one;
  one.ids.push_back(id);
  load_streams(one);
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    full_ok_ = false; // a stream of the catalog is missing here until the next full load
    return nullptr;
  }
  return it->second.get();
}

void Engine::record_history(const std::string &stream, const char *event, double ms,
                            int64_t fanout) {
  if (!cfg_.stats_enabled)
    return;
  if (history_.size() >= 100000) { // bounded between two flushes
    history_lost_++;
    return;
  }
  history_.push_back(HistoryRow{stream, event, ms, fanout});
}

bool Engine::flush_history() {
  end_stats_batch();
  if (history_.empty())
    return true;
  if (!read_ok(rows_.store_history(history_)))
    return false;
  history_.clear();
  return true;
}

bool Engine::prune_history(int64_t max_age_s) { return read_ok(rows_.prune_history(max_age_s)); }

} // namespace pgbs::engine
