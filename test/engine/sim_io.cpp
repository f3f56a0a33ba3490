// The simulated world's row source, sink and observer: the engine's three
// interfaces over the world's tables, sockets and counters (sim_world.hpp).
#include "sim_world.hpp"

#include <algorithm>

namespace sim {

// ---- row source --------------------------------------------------------------

bool Source::ok(int64_t stream_id) {
  if (stream_id >= 0 && w_.locked.count(stream_id))
    return false;
  return !w_.ch.chance(w_.fail_percent);
}

bool Source::load_catalog(const engine::CatalogFilter &which,
                          std::vector<engine::StreamInfo> *out) {
  if (!ok(-1))
    return false;
  for (const SimStream &s : w_.streams) {
    if (!which.name.empty() && which.name != s.name)
      continue;
    if (!which.names.empty() &&
        std::find(which.names.begin(), which.names.end(), s.name) == which.names.end())
      continue;
    if (!which.ids.empty() &&
        std::find(which.ids.begin(), which.ids.end(), s.id) == which.ids.end())
      continue;
    engine::StreamInfo si;
    si.id = s.id;
    si.name = s.name;
    si.has_retention = true;
    si.retention_floor = s.retention_floor;
    si.max_committed = s.table.empty() ? 0 : s.table.rbegin()->first;
    out->push_back(si);
  }
  return true;
}

SimStream *by_id(World &w, int64_t id) {
  for (SimStream &s : w.streams)
    if (s.id == id)
      return &s;
  return nullptr;
}

// As the SQL source: ascending, stopping after the row that brings the
// payload bytes to max_bytes (not before ids.front()).
bool Source::rows_by_id(const engine::StreamInfo &si, const std::vector<int64_t> &ids,
                        size_t max_bytes, std::vector<engine::Row> *out, int64_t *read_upto) {
  if (!ok(si.id))
    return false;
  SimStream *s = by_id(w_, si.id);
  std::vector<int64_t> sorted(ids);
  std::sort(sorted.begin(), sorted.end());
  *read_upto = INT64_MAX;
  size_t bytes = 0;
  for (int64_t id : sorted) {
    auto it = s->table.find(id);
    if (it == s->table.end())
      continue;
    out->push_back(it->second);
    bytes += it->second.data.size();
    if (bytes >= max_bytes && id >= ids.front() && id != sorted.back()) {
      *read_upto = id;
      break;
    }
  }
  return true;
}

bool Source::rows_after(const engine::StreamInfo &si, int64_t after, int64_t limit,
                        size_t max_bytes, std::vector<engine::Row> *out) {
  if (!ok(si.id))
    return false;
  SimStream *s = by_id(w_, si.id);
  size_t bytes = 0;
  for (auto it = s->table.upper_bound(after);
       it != s->table.end() && (int64_t)out->size() < limit && bytes < max_bytes; ++it) {
    out->push_back(it->second);
    bytes += it->second.data.size();
  }
  return true;
}

bool Source::max_id(const engine::StreamInfo &si, int64_t *id) {
  if (!ok(si.id))
    return false;
  SimStream *s = by_id(w_, si.id);
  *id = s->table.empty() ? 0 : s->table.rbegin()->first;
  return true;
}

bool Source::nth_newest(const engine::StreamInfo &si, int64_t n, int64_t *id) {
  if (!ok(si.id))
    return false;
  SimStream *s = by_id(w_, si.id);
  *id = 0;
  int64_t k = 0;
  for (auto it = s->table.rbegin(); it != s->table.rend() && k < n; ++it, ++k)
    *id = it->first;
  return true;
}

bool Source::retention_floor(const engine::StreamInfo &si, int64_t *floor) {
  if (!ok(si.id))
    return false;
  *floor = by_id(w_, si.id)->retention_floor;
  return true;
}

bool Source::stored_cursors(const std::string &subscriber, const std::vector<std::string> &names,
                            std::vector<engine::StoredCursor> *out) {
  if (!ok(-1))
    return false;
  for (const std::string &n : names) {
    auto it = w_.stored.find({subscriber, n});
    if (it != w_.stored.end())
      out->push_back({subscriber, n, it->second});
  }
  return true;
}

bool Source::store_cursors(const std::vector<engine::StoredCursor> &cursors) {
  if (!ok(-1))
    return false;
  for (const engine::StoredCursor &c : cursors)
    w_.stored[{c.subscriber, c.stream}] = c.cursor;
  return true;
}

bool Source::apply_retention(const engine::StreamInfo &si, int batch, int64_t *removed,
                             int64_t *floor) {
  if (!ok(si.id))
    return false;
  SimStream *s = by_id(w_, si.id);
  // Keeps the newest 6 rows.
  *removed = 0;
  while ((int64_t)s->table.size() > 6 && *removed < batch) {
    const int64_t id = s->table.begin()->first;
    s->table.erase(s->table.begin());
    s->retained_away.insert(id);
    s->retention_floor = std::max(s->retention_floor, id);
    ++*removed;
  }
  *floor = s->retention_floor;
  return true;
}

void *Obs::stream_handle(int64_t id, int64_t table_max) {
  if (held_.count(id))
    w_.fail("stream " + std::to_string(id) + " held twice");
  held_.insert(id);
  if (SimStream *s = by_id(w_, id))
    s->max_committed = std::max(s->max_committed, table_max);
  return reinterpret_cast<void *>(id);
}

void Obs::release_stream(void *stream) {
  const int64_t id = (int64_t) reinterpret_cast<intptr_t>(stream);
  if (!held_.erase(id))
    w_.fail("stream " + std::to_string(id) + " released but not held");
  if (woken_.count(stream)) // the worker's bit would stay on the reused entry
    w_.fail("stream " + std::to_string(id) + " released while producers wake for it");
}

void Obs::wake(void *stream, bool on) {
  const int64_t id = (int64_t) reinterpret_cast<intptr_t>(stream);
  if (!held_.count(id))
    w_.fail("wake " + std::string(on ? "on" : "off") + " for stream " + std::to_string(id) +
            ", which is not held");
  if (on)
    woken_.insert(stream);
  else
    woken_.erase(stream);
}

uint64_t Obs::ephemeral_seq(void *stream) {
  SimStream *s = by_id(w_, (int64_t) reinterpret_cast<intptr_t>(stream));
  return s ? s->ephemeral_seq : 0;
}

// ---- sink ----------------------------------------------------------------------

void Sink::reject(uint64_t, int status, const std::string &reason) {
  if (status != 503)
    w_.fail("rejected " + std::to_string(status) + " " + reason);
  w_.rejected++;
}

engine::SinkRef Sink::open(uint64_t conn_id, std::string preamble, const std::string &start_id) {
  auto it = w_.conns.find(conn_id);
  if (it == w_.conns.end())
    return nullptr;
  SimConn *c = it->second.get();
  c->queue.set_start_id(start_id);
  OutFrame f;
  f.head = std::move(preamble);
  f.control = true;
  c->queue.push(std::move(f));
  return c;
}

size_t Sink::queued_events(engine::SinkRef ref) const {
  return static_cast<SimConn *>(ref)->queue.events();
}
size_t Sink::queued_bytes(engine::SinkRef ref) const {
  return static_cast<SimConn *>(ref)->queue.bytes();
}
OutQueue::PushResult Sink::push(engine::SinkRef ref, OutFrame frame) {
  SimConn *c = static_cast<SimConn *>(ref);
  if (c->closed)
    return OutQueue::PushResult::DroppedNewest;
  if (w_.trace && !frame.control)
    w_.log("push to " + std::to_string(c->id) + ": " +
           (frame.head.empty() ? frame.body->substr(0, frame.body->find('\n')) : frame.head) + " " +
           frame.body->substr(frame.body->find("data: ") + 6, 8));
  return c->queue.push(std::move(frame));
}
uint64_t Sink::written(engine::SinkRef ref) const { return static_cast<SimConn *>(ref)->written; }
// A slow or stalled client's socket is taken to be full once a few frames
// wait: the engine then treats its queue as having no room.
bool Sink::backed_up(engine::SinkRef ref) const {
  const SimConn *c = static_cast<SimConn *>(ref);
  return c->client && c->client->mode != 0 && c->queue.events() >= 3;
}
void Sink::close(engine::SinkRef ref, const std::string &) {
  static_cast<SimConn *>(ref)->closed = true;
}
void Sink::release(engine::SinkRef ref) {
  SimConn *c = static_cast<SimConn *>(ref);
  if (c->client && c->client->conn == c)
    c->client->conn = nullptr;
  w_.conns.erase(c->id);
}

} // namespace sim
