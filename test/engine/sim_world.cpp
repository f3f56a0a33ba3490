// The simulated world (see sim_world.hpp). Invariants, checked after every step:
//  - no durable id reaches a client twice (across its reconnects);
//  - a client never gets a row after one committed and numbered after it
//    (live delivery is in commit order; pages from the tail or the table in
//    msg_id order);
//  - every id a frame's token or a notice's resume cursor claims was received
//    by the client, rolled back, or announced as gone (deleted, retention,
//    ephemeral notices) or covered by where the client started;
//  - gap notices only where data is gone: "deleted" names deleted rows,
//    "retention" only after retention removed rows, "ephemeral-overrun" only
//    after ephemeral events were lost in the ring;
//  - per-connection queues within their bounds (one lone frame may be
//    larger), the engine's retained bytes within memory_retention/queue bounds.
// At the end every producer finishes, faults stop, clients read and
// reconnect, and every committed durable row must have reached every client
// (after where it started) unless it was announced as gone.
#include "sim_world.hpp"

#include "core/auth.hpp"

#include <algorithm>
#include <cstdio>

namespace sim {

// ---- the world -------------------------------------------------------------------

namespace {
constexpr const char *kSimJwtSecret = "sim-jwt-secret";
constexpr int64_t kSimTokenExp = int64_t(1) << 40; // never, for the simulation's clock
auth::Secrets sim_secrets() {
  auth::Secrets s;
  s.jwt_secret = kSimJwtSecret;
  return s;
}
} // namespace

World::World(Choices &c) : ch(c) {
  cfg.queue_max_events = 2 + ch.below(6);
  cfg.queue_max_bytes = 200 + ch.below(600);
  cfg.memory_retention = ch.below(8);
  // rounds are 3 ms apart: rows kept for up to a few rounds beyond the count
  cfg.memory_retention_us = ch.chance(50) ? 0 : ch.below(12000);
  cfg.replay_page_size = 1 + ch.below(5);
  // Byte-bounded reads: often small enough to cut a page after a row or two.
  cfg.replay_page_bytes = ch.chance(50) ? 1 + ch.below(300) : 1 << 20;
  cfg.max_token_bytes = 40 + ch.below(200);
  cfg.overflow_policy = OverflowPolicy::Lag;
  cfg.stream_linger_us = ch.chance(50) ? 0 : ch.below(30000); // rounds are 3 ms apart
  fail_percent = ch.chance(50) ? ch.below(30) : 0;
  ring_cap_ = 3 + ch.below(20);
  const int n = 1 + (int)ch.below(3);
  for (int i = 0; i < n; ++i) {
    SimStream s;
    s.id = 100 + i * 7 + ch.below(5);
    s.name = "s" + std::to_string(i);
    streams.push_back(std::move(s));
  }
  source_ = std::make_unique<Source>(*this);
  sink_ = std::make_unique<Sink>(*this);
  engine_ = std::make_unique<engine::Engine>(cfg, *source_, *sink_, obs_);
  engine_->configure_auth(sim_secrets());
  engine_->set_now(1);
  while (!engine_->reload_catalog() && !error.size())
    fail_percent /= 2; // the first load needs to work once
  clients_.resize(1 + ch.below(4));
  for (size_t i = 0; i < clients_.size(); ++i) {
    Client &c = clients_[i];
    c.index = (int)i;
    for (int k = 0; k < n; ++k)
      if (k == 0 ? true : ch.chance(40))
        c.streams.push_back((k + (int)i) % n);
    std::sort(c.streams.begin(), c.streams.end());
    c.streams.erase(std::unique(c.streams.begin(), c.streams.end()), c.streams.end());
    if (ch.chance(30))
      c.subscriber = "sub" + std::to_string(i);
    c.gem = c.streams.size() == 1 && ch.chance(40);
    c.mode = (int)ch.below(3);
    c.before.resize(n);
    c.got.resize(n);
    c.got_set.resize(n);
    c.noticed_deleted.resize(n);
    c.retention_notice.assign(n, false);
    c.ephemeral_notice.assign(n, false);
    c.retention_upto.assign(n, 0);
    c.ephemeral_claimed.resize(n);
  }
}

World::~World() {
  engine_.reset(); // releases every connection
}

void World::fail(const std::string &what) {
  if (error.empty())
    error = "step " + std::to_string(steps_) + ": " + what;
}

int World::stream_by_epoch(int64_t epoch) const {
  for (size_t i = 0; i < streams.size(); ++i)
    if (streams[i].id == epoch)
      return (int)i;
  return -1;
}

void World::begin_tx() {
  Tx tx;
  const int rows = 1 + (int)ch.below(3);
  for (int r = 0; r < rows; ++r) {
    const int s = (int)ch.below((uint32_t)streams.size());
    if (!tx.floors.count(s))
      tx.floors[s] = streams[s].max_committed; // the BEFORE trigger's floor
    tx.rows.push_back({s, ++streams[s].next_id, ch.chance(20)});
  }
  tx.too_large = ch.chance(5);
  std::string d = "begin tx:";
  for (const Pending &p : tx.rows)
    d += " " + streams[p.stream].name + ":" + std::to_string(p.id) + (p.ephemeral ? "e" : "");
  for (const auto &[s, f] : tx.floors)
    d += " floor(" + streams[s].name + ")=" + std::to_string(f);
  log(d + (tx.too_large ? " (too large for the ring)" : ""));
  inflight_.push_back(std::move(tx));
}

void World::end_tx(bool commit) {
  if (inflight_.empty())
    return;
  const size_t i = ch.below((uint32_t)inflight_.size());
  Tx tx = std::move(inflight_[i]);
  inflight_.erase(inflight_.begin() + (long)i);
  {
    std::string d = commit ? "commit:" : "abort:";
    for (const Pending &p : tx.rows)
      d += " " + streams[p.stream].name + ":" + std::to_string(p.id);
    log(d);
  }
  for (const Pending &p : tx.rows) {
    SimStream &s = streams[p.stream];
    // A rollback (or, in a committing transaction, a savepoint's) is
    // mostly announced in the ring; the committed maximum covers its ids.
    if (!commit || ch.chance(5)) {
      s.aborted.insert(p.id);
      s.max_committed = std::max(s.max_committed, p.id);
      if (!tx.too_large && ch.chance(80))
        ring_.push_back({p.stream, p.id, false, 0, true});
      continue;
    }
    uint64_t seq = 0;
    s.commit_no[p.id] = commits_ + 1; // one commit point per transaction
    if (p.ephemeral) {
      seq = ++s.ephemeral_seq;
      s.ephemeral.insert(p.id);
      if (tx.too_large)
        s.ephemeral_lost.insert(p.id);
    } else {
      engine::Row row;
      row.msg_id = p.id;
      // Some payloads have line breaks: split into data lines, or one line
      // without them on the gem's route; either way "  " joins them.
      row.data = s.name + ":" + std::to_string(p.id) + (ch.chance(30) ? "\r\n  " : "") +
                 std::string(ch.below(3) == 0 ? 300 : 5, 'x');
      max_row_ = std::max(max_row_, row.data.size());
      s.table[p.id] = row;
      s.committed.insert(p.id);
    }
    if (!tx.too_large)
      ring_.push_back({p.stream, p.id, p.ephemeral, seq});
  }
  if (commit)
    ++commits_;
  if (commit && tx.too_large)
    overrun_ = true;
  if (commit)
    for (const Pending &p : tx.rows)
      streams[p.stream].max_committed = std::max(streams[p.stream].max_committed, p.id);
}

void World::worker_round(bool full) {
  now_us_ += 3000;
  engine_->set_now(now_us_);
  const std::vector<int64_t> &ids = engine_->round_streams(full);
  engine::HorizonBounds b;
  for (int64_t id : ids)
    b.max_committed.emplace_back(id, by_id(*this, id)->max_committed);
  for (const Tx &tx : inflight_)
    for (const auto &[s, floor] : tx.floors)
      b.lower_floor(streams[s].id, floor);
  bool complete = !overrun_;
  overrun_ = false;
  if (ring_.size() - ring_read_ > ring_cap_) { // lapped
    for (size_t k = ring_read_; k < ring_.size(); ++k)
      if (ring_[k].ephemeral)
        streams[ring_[k].stream].ephemeral_lost.insert(ring_[k].id);
    ring_read_ = ring_.size();
    complete = false;
  }
  std::vector<ring::Event> events;
  for (; ring_read_ < ring_.size(); ++ring_read_) {
    const Event &e = ring_[ring_read_];
    ring::Event ev;
    ev.stream_id = streams[e.stream].id;
    ev.msg_id = e.id;
    ev.commit_us = 1;
    if (e.aborted) {
      ev.aborted = true;
      ev.aborted_to = e.id;
    } else if (e.ephemeral) {
      ev.has_payload = ev.ephemeral = true;
      ev.ephemeral_seq = e.seq;
      ev.data = streams[e.stream].name + ":" + std::to_string(e.id) + "e";
    } else if (ch.chance(50)) { // small rows travel in the ring
      auto it = streams[e.stream].table.find(e.id);
      if (it != streams[e.stream].table.end()) {
        ev.has_payload = true;
        ev.data = it->second.data;
      }
    }
    events.push_back(std::move(ev));
  }
  {
    std::string d =
        std::string("round") + (full ? " full" : "") + (complete ? "" : " INCOMPLETE") + ":";
    for (const ring::Event &e : events)
      d += " " + std::to_string(e.stream_id) + "/" + std::to_string(e.msg_id) +
           (e.has_payload ? "p" : "");
    for (const auto &[id, m] : b.max_committed)
      d += " max(" + std::to_string(id) + ")=" + std::to_string(m);
    for (const auto &[id, f] : b.min_floor)
      d += " floor(" + std::to_string(id) + ")=" + std::to_string(f);
    log(d);
  }
  engine_->round(events, complete, b);
  engine_->continue_paging();
  engine_->track_written();
  // A subscription that is not paging takes its stream's rows live:
  // producers must wake the worker for them (else they wait for another
  // wake-up).
  for (void *h : engine_->live_handles())
    if (!obs_.wakes(h))
      return fail("stream " + std::to_string((int64_t) reinterpret_cast<intptr_t>(h)) +
                  " has a live subscription, but producers do not wake the worker for it");
}

void World::connect(Client &c, bool fresh) {
  if (c.conn)
    return;
  worker_round(true); // the worker brings every stream up to date first
  const uint64_t id = next_conn_++;
  conns[id] = std::make_unique<SimConn>(id, cfg, &c);
  SimConn *sc = conns[id].get();
  c.conn = sc;
  engine::Subscribe req;
  req.conn_id = id;
  for (int s : c.streams)
    req.streams.push_back(streams[s].name);
  req.subscriber = c.subscriber;
  if (!c.subscriber.empty()) // a stored cursor needs a credential whose sub names it
    req.creds.token = auth::sign_jwt({"*"}, 0, kSimTokenExp, c.subscriber, "", kSimJwtSecret);
  req.gem = c.gem;
  std::string cursor = c.last_token;
  bool all_stored = !c.subscriber.empty();
  for (int s : c.streams)
    all_stored &= stored.count({c.subscriber, streams[s].name}) > 0;
  if (c.started && !cursor.empty() && (!all_stored || ch.chance(50)))
    req.cursor = &cursor;
  // Once resumed from a stored cursor, the client's own tokens may lag what
  // it got: at least once from then on.
  if (!req.cursor && !c.subscriber.empty() && c.started) {
    // Resuming from the stored cursor: never past what reached the socket,
    // possibly behind it (what came after is sent again).
    for (int s : c.streams) {
      auto it = stored.find({c.subscriber, streams[s].name});
      if (it != stored.end())
        check_token(c, it->second, "a stored subscriber cursor");
    }
    c.dupes_ok = true;
  }
  if (!c.started && fresh && ch.chance(30))
    req.replay = ch.chance(50) ? "all" : std::to_string(1 + ch.below(5));
  c.buf.clear();
  log("client " + std::to_string(c.index) + " connects as " + std::to_string(id) +
      (req.cursor ? " cursor " + *req.cursor : "") +
      (req.replay.empty() ? "" : " replay=" + req.replay) +
      (c.subscriber.empty() ? "" : " subscriber"));
  if (!engine_->subscribe(req)) {
    worker_round(true);
    engine_->subscribe(req, true);
  }
  if (trace) {
    std::string a, b, d, e;
    if (engine_->describe(id, &a, &b, &d, &e))
      log("  -> " + e + " at " + b);
  }
  if (conns.count(id) && !sc->queue.empty() && c.conn == sc)
    return;
  // Rejected (503 after a failed read): the request is gone.
  if (conns.count(id)) {
    conns.erase(id);
    c.conn = nullptr;
  }
}

void World::check_token(Client &c, const std::string &token, const char *what) {
  cursor::Cursor cur;
  std::string err;
  if (!cursor::parse(token, &cur, &err))
    return fail(std::string(what) + " does not parse: " + token + " (" + err + ")");
  for (const auto &[name, pos] : cur.streams) {
    int s = name.empty() ? (c.streams.size() == 1 ? c.streams[0] : stream_by_epoch(pos.epoch)) : -1;
    if (s < 0)
      return fail(std::string(what) + " names no stream of the client: " + token);
    const SimStream &st = streams[s];
    for (int64_t id = 1; id <= st.next_id; ++id) {
      if (!pos.covers(id))
        continue;
      if (c.got_set[s].count(id) || st.aborted.count(id) || c.before[s].covers(id))
        continue;
      if (st.deleted.count(id) || c.noticed_deleted[s].count(id))
        continue;
      if (st.retained_away.count(id) && c.retention_notice[s])
        continue;
      if (id <= c.retention_upto[s])
        continue; // announced as older than what retention keeps
      if (st.ephemeral.count(id)) {
        if (!c.ephemeral_notice[s])
          c.ephemeral_claimed[s].insert(id);
        continue;
      }
      if (!st.committed.count(id) && !st.ephemeral.count(id))
        return fail(std::string(what) + " " + token + " covers id " + std::to_string(id) + " of " +
                    st.name + " that is not committed yet");
      return fail(std::string(what) + " " + token + " covers id " + std::to_string(id) + " of " +
                  st.name + " that client " + std::to_string(c.index) + " never got");
    }
  }
}

void World::frame(Client &c, const std::string &text) {
  log("client " + std::to_string(c.index) + " reads: " + text);
  std::string id, event, data;
  int data_lines = 0;
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos)
      e = text.size();
    const std::string line = text.substr(p, e - p);
    p = e + 1;
    if (line.rfind("id: ", 0) == 0)
      id = line.substr(4);
    else if (line.rfind("event: ", 0) == 0)
      event = line.substr(7);
    else if (line.rfind("data: ", 0) == 0) {
      data += line.substr(6);
      data_lines++;
    }
    else if (line.rfind(": pgbus stream open since_id=", 0) == 0) {
      const std::string since = line.substr(29, line.find(" ", 29) - 29);
      if (!c.started) {
        c.started = true;
        cursor::Cursor cur;
        if (!cursor::parse(since, &cur, nullptr))
          return fail("since_id does not parse: " + since);
        for (const auto &[name, pos] : cur.streams) {
          const int s = c.streams.size() == 1 ? c.streams[0] : stream_by_epoch(pos.epoch);
          if (s >= 0)
            c.before[s] = pos;
        }
      }
      if (c.last_token.empty())
        c.last_token = since;
    }
  }
  if (event == "pgbus:gap-detected") {
    int s = -1;
    for (int k : c.streams)
      if (data.find("\"stream\":\"" + streams[k].name + "\"") != std::string::npos)
        s = k;
    if (s < 0)
      return fail("gap notice without a stream: " + data);
    if (data.find("\"reason\":\"deleted\"") != std::string::npos) {
      const size_t a = data.find("\"ids\":[") + 7;
      const int64_t did = std::stoll(data.substr(a));
      if (!streams[s].deleted.count(did) && !streams[s].retained_away.count(did))
        return fail("deleted notice for a row that was not deleted: " + data);
      c.noticed_deleted[s].insert(did);
    } else if (data.find("\"reason\":\"retention\"") != std::string::npos) {
      if (streams[s].retained_away.empty())
        return fail("retention notice without retention: " + data);
      c.retention_notice[s] = true;
      const size_t r = data.find("\"resume\":\"");
      cursor::Cursor cur;
      if (r != std::string::npos &&
          cursor::parse(data.substr(r + 10, data.find('"', r + 10) - r - 10), &cur, nullptr))
        for (const auto &[name, pos] : cur.streams)
          if (c.streams.size() == 1 || pos.epoch == streams[s].id)
            c.retention_upto[s] = std::max(c.retention_upto[s], pos.horizon);
    } else if (data.find("\"reason\":\"ephemeral-overrun\"") != std::string::npos) {
      if (streams[s].ephemeral_lost.empty())
        return fail("ephemeral-overrun notice without a loss: " + data);
      c.ephemeral_notice[s] = true;
    } else if (data.find("ephemeral-expired") != std::string::npos) {
      c.ephemeral_notice[s] = true;
    } else if (data.find("stream-recreated") == std::string::npos) {
      return fail("unexpected gap notice: " + data);
    }
    const size_t r = data.find("\"resume\":\"");
    if (r != std::string::npos) {
      const std::string resume = data.substr(r + 10, data.find('"', r + 10) - r - 10);
      check_token(c, resume, "a notice's resume cursor");
      c.last_token = resume;
    }
    return;
  }
  if (!event.empty() && event != "turbo-stream")
    return;
  if (id.empty())
    return; // preamble
  if (event.empty() && data.empty()) {
    // The opening frame's id with no data: an EventSource takes it as its
    // last event id and dispatches nothing. It names where the connection
    // starts, as the open comment does (taken there).
    if (c.last_token.empty())
      c.last_token = id;
    return;
  }
  // The framing of the connection's route, whichever path the row took.
  if (c.gem && data_lines != 1)
    return fail("a frame with " + std::to_string(data_lines) + " data lines on the gem's route");
  if (!c.gem && data.find("  ") != std::string::npos && data_lines < 2)
    return fail("a payload with a line break in one data line off the gem's route: " + data);
  // data is "<stream name>:<id>..."
  const size_t colon = data.find(':');
  int s = -1;
  for (int k : c.streams)
    if (data.compare(0, colon, streams[k].name) == 0)
      s = k;
  if (s < 0)
    return fail("frame of a stream the client did not ask for: " + data);
  const int64_t msg = std::stoll(data.substr(colon + 1));
  if (c.conn)
    c.conn->written++;
  if (c.got_set[s].count(msg)) {
    if (c.dupes_ok)
      return;
    return fail("client " + std::to_string(c.index) + " got " + streams[s].name + ":" +
                std::to_string(msg) + " twice");
  }
  // Never after a row both committed and numbered after it.
  // (A row deleted or removed by retention may still come from memory after
  // the table skipped it: no order between it and others.)
  const uint64_t mine = streams[s].commit_no[msg];
  for (int64_t x : c.got[s])
    if (x > msg && streams[s].commit_no[x] > mine && !streams[s].deleted.count(msg) &&
        !streams[s].deleted.count(x) && !streams[s].retained_away.count(msg) &&
        !streams[s].retained_away.count(x))
      return fail("client " + std::to_string(c.index) + " got " + streams[s].name + ":" +
                  std::to_string(msg) + " after " + std::to_string(x) +
                  ", which was committed and numbered after it");
  c.got[s].push_back(msg);
  c.got_set[s].insert(msg);
  c.last_token = id;
  check_token(c, id, "a frame's id");
}

void World::read(Client &c, size_t budget) {
  SimConn *sc = c.conn;
  if (!sc)
    return;
  std::vector<char> buf(budget);
  const size_t n = sc->queue.read_into(buf.data(), budget);
  c.buf.append(buf.data(), n);
  for (size_t e; (e = c.buf.find("\n\n")) != std::string::npos;) {
    const std::string text = c.buf.substr(0, e + 1);
    c.buf.erase(0, e + 2);
    frame(c, text);
    if (!error.empty())
      return;
  }
}

void World::check_bounds() {
  for (auto &[id, c] : conns) {
    const OutQueue &q = c->queue;
    if (q.events() > cfg.queue_max_events || (q.events() > 1 && q.bytes() > cfg.queue_max_bytes))
      return fail("queue over its bounds: " + std::to_string(q.events()) + " events, " +
                  std::to_string(q.bytes()) + " bytes");
  }
  const size_t bound = streams.size() * 2 * (cfg.queue_max_bytes + max_row_ + 64);
  if (engine_->retained_bytes() > bound)
    fail("engine retains " + std::to_string(engine_->retained_bytes()) + " bytes");
}

void World::restart() {
  engine_.reset(); // every connection released: clients see their socket close
  for (Client &c : clients_)
    c.conn = nullptr;
  conns.clear();
  ring_read_ = ring_.size(); // a new worker starts at the ring's head
  engine_ = std::make_unique<engine::Engine>(cfg, *source_, *sink_, obs_);
  engine_->configure_auth(sim_secrets());
  engine_->set_now(now_us_);
  engine_->reload_catalog();
}

// Shared memory reuses the entries nobody holds (no awake stream of the
// engine, no producer in flight): their committed maximum and ephemeral
// count start again from 0, as a new entry's do. Only entries that never
// counted an ephemeral broadcast are reused here: shared memory takes those
// first, and a worker started after one with a count was reused cannot
// know the ephemeral ids above the stream's last row it missed (a known
// limit, docs/ARCHITECTURE.md, "Stream entries").
void World::evict_entries() {
  for (size_t i = 0; i < streams.size(); ++i) {
    SimStream &s = streams[i];
    bool written = false;
    for (const Tx &tx : inflight_)
      written |= tx.floors.count((int)i) != 0;
    if (obs_.holds(s.id) || written || s.max_committed == 0 || s.ephemeral_seq > 0)
      continue;
    log("entry of " + s.name + " reused");
    s.max_committed = 0;
    s.ephemeral_seq = 0;
  }
}

void World::step() {
  const uint32_t r = ch.below(100);
  if (trace && r >= 76)
    log("action " + std::to_string(r));
  if (r < 18)
    begin_tx();
  else if (r < 36)
    end_tx(!ch.chance(15));
  else if (r < 56)
    worker_round(ch.chance(20));
  else if (r < 76) {
    Client &c = clients_[ch.below((uint32_t)clients_.size())];
    if (!c.conn)
      connect(c, !c.started);
    else
      read(c, c.mode == 0 ? 4096 : c.mode == 1 ? 40 : 0);
  } else if (r < 80) {
    clients_[ch.below((uint32_t)clients_.size())].mode = (int)ch.below(3);
  } else if (r < 83) {
    Client &c = clients_[ch.below((uint32_t)clients_.size())];
    if (c.conn) { // the client goes away
      SimConn *sc = c.conn;
      c.conn = nullptr;
      sc->client = nullptr;
      engine_->closed(sc->id);
    }
  } else if (r < 86) {
    const int64_t s = streams[ch.below((uint32_t)streams.size())].id;
    if (locked.count(s))
      locked.erase(s);
    else
      locked.insert(s);
  } else if (r < 88) {
    SimStream &s = streams[ch.below((uint32_t)streams.size())];
    if (!s.table.empty()) { // a consumer deletes a row (pgmq.delete)
      auto it = s.table.begin();
      std::advance(it, ch.below((uint32_t)s.table.size()));
      s.deleted.insert(it->first);
      s.table.erase(it);
    }
  } else if (r < 90) {
    engine_->apply_retention();
  } else if (r < 92) {
    engine_->flush_cursors();
  } else if (r < 93) {
    restart();
  } else if (r < 95) {
    ring_cap_ = ch.chance(50) ? 1 : 3 + ch.below(20); // laps come and go
  } else if (r < 96) {
    evict_entries();
  } else {
    engine_->continue_paging();
  }
}

void World::settle() {
  while (!inflight_.empty())
    end_tx(true);
  locked.clear();
  fail_percent = 0;
  ring_cap_ = 1000000;
  for (int round = 0; round < 400 && error.empty(); ++round) {
    worker_round(round % 7 == 0);
    bool busy = engine_->paging_pending();
    for (Client &c : clients_) {
      c.mode = 0;
      if (!c.conn) {
        connect(c, false);
        busy = true;
      }
      if (c.conn && !c.conn->queue.empty()) {
        read(c, 1 << 16);
        busy = true;
      }
    }
    if (!busy && round > 3)
      break;
  }
}

void World::check_complete() {
  for (Client &c : clients_) {
    if (!c.started)
      continue;
    for (int s : c.streams) {
      const SimStream &st = streams[s];
      if (!c.ephemeral_claimed[s].empty() && !c.ephemeral_notice[s])
        return fail("client " + std::to_string(c.index) + " was told it had ephemeral " + st.name +
                    ":" + std::to_string(*c.ephemeral_claimed[s].begin()) +
                    " but never got it nor a notice");
      auto missing = [&](int64_t id) {
        return !c.got_set[s].count(id) && !c.before[s].covers(id) && !st.deleted.count(id) &&
               !c.noticed_deleted[s].count(id) &&
               !(st.retained_away.count(id) && c.retention_notice[s]) && id > c.retention_upto[s];
      };
      for (int64_t id : st.committed)
        if (missing(id)) {
          std::string a, b, d, e;
          if (c.conn)
            engine_->describe(c.conn->id, &a, &b, &d, &e);
          return fail("client " + std::to_string(c.index) + " never got " + st.name + ":" +
                      std::to_string(id) + " (cursor " + c.last_token + "; connection " + e +
                      " at " + b + ")");
        }
      for (int64_t id : st.ephemeral)
        if (missing(id) && !c.ephemeral_notice[s] && id > c.retention_upto[s])
          return fail("client " + std::to_string(c.index) + " never got ephemeral " + st.name +
                      ":" + std::to_string(id) + " and no notice");
    }
  }
}

std::string World::run(int steps) {
  for (steps_ = 0; steps_ < steps && error.empty() && !ch.exhausted(); ++steps_) {
    step();
    if (error.empty())
      check_bounds();
  }
  if (error.empty())
    settle();
  if (error.empty())
    check_complete();
  if (error.empty()) {
    // Quiet from here: once memory_retention_time has passed, full rounds
    // leave each tail at most memory_retention rows, with no row added.
    for (int round = 0; round < 8; ++round)
      worker_round(true);
    if (engine_->tail_rows() > streams.size() * cfg.memory_retention)
      fail("tails hold " + std::to_string(engine_->tail_rows()) + " rows after " +
           std::to_string(cfg.memory_retention_us) + " us quiet");
  }
  return error;
}

} // namespace sim
