// Hub: the engine wired to the ring, SPI, the HTTP layer and shared memory.
#include "worker/hub.hpp"
#include "settings/configs.hpp"
#include "shmem/awaited.hpp"
#include "shmem/conns.hpp"
#include "shmem/disconnect.hpp"
#include "shmem/figures.hpp"
#include "shmem/ring.hpp"
#include "shmem/shared.hpp"
#include "worker/standby.hpp"

#include <algorithm>
#include <ctime>

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
}

namespace pgbs::worker {

engine::Config engine_config() {
  return settings::engine_config(settings::current(), in_recovery());
}

// ---- the sink: http::Server connection handles -----------------------------

namespace {
http::Conn *conn(engine::SinkRef ref) { return static_cast<http::Conn *>(ref); }
} // namespace

void HttpSink::reject(uint64_t conn_id, int status, const std::string &reason) {
  server_.reject(conn_id, status, reason);
}
void HttpSink::retry_later(uint64_t conn_id, const std::string &reason) {
  server_.retry_later(conn_id, reason);
}
engine::SinkRef HttpSink::open(uint64_t conn_id, std::string preamble,
                               const std::string &start_id) {
  return server_.open(conn_id, std::move(preamble), start_id);
}
size_t HttpSink::queued_events(engine::SinkRef ref) const {
  return server_.queued_events(conn(ref));
}
size_t HttpSink::queued_bytes(engine::SinkRef ref) const { return server_.queued_bytes(conn(ref)); }
bool HttpSink::backed_up(engine::SinkRef ref) const { return server_.backed_up(conn(ref)); }
OutQueue::PushResult HttpSink::push(engine::SinkRef ref, OutFrame frame) {
  return server_.push(conn(ref), std::move(frame));
}
uint64_t HttpSink::written(engine::SinkRef ref) const { return server_.written(conn(ref)); }
void HttpSink::close(engine::SinkRef ref, const std::string &reason) {
  server_.close(conn(ref), reason);
}
void HttpSink::release(engine::SinkRef ref) { server_.release(conn(ref)); }

// ---- the observer: shared memory -------------------------------------------

namespace {
shmem::StreamEntry *entry(void *h) { return static_cast<shmem::StreamEntry *>(h); }
} // namespace

// Held by this worker while the engine's stream is awake (entries are reused
// once nobody holds them); a new entry starts at 0, so it is raised to the
// tables' maximum.
void *ShmemObserver::stream_handle(int64_t stream_id, int64_t table_max) {
  shmem::StreamEntry *e = shmem::acquire_stream(dboid_, stream_id, worker_index_);
  if (e)
    shmem::advance_max_committed(e, table_max);
  return e;
}

void ShmemObserver::release_stream(void *stream) {
  if (stream)
    shmem::release_stream(entry(stream), worker_index_);
}

bool ShmemObserver::streams_short() { return shmem::streams_short(); }

bool ShmemObserver::ephemeral_forgotten() { return shmem::ephemeral_forgotten(); }

uint64_t ShmemObserver::ephemeral_seq(void *stream) {
  shmem::StreamEntry *e = entry(stream);
  return e ? shmem::ephemeral_seq(e) : 0;
}

void ShmemObserver::stream_figures(void *stream, const engine::StreamDelta &d) {
  shmem::StreamEntry *e = entry(stream);
  if (!e)
    return;
  shmem::StreamAdds a;
  a.queued = d.queued;
  a.overflow_dropped = d.overflow_dropped;
  a.bytes_queued = d.bytes_queued;
  a.failed = d.failed;
  a.latency_us = d.latency_us;
  shmem::add_stream_figures(e, a, d.latency_us >= 0 ? (int64)GetCurrentTimestamp() : 0);
}

void ShmemObserver::subscribers(void *stream, int delta) {
  if (shmem::StreamEntry *e = entry(stream))
    shmem::add_subscribers(e, delta);
}

// Producers copy payloads into the ring for a stream only while some
// worker's subscriber bit is set (shmem::watched_by_workers).
void ShmemObserver::watched(void *stream, bool on) {
  if (shmem::StreamEntry *e = entry(stream))
    shmem::set_subscriber_bit(e, worker_index_, on);
}

// Producers wake this worker for a stream only while its wake bit is set
// (shmem::wake_mask). Setting it is a full barrier, and the latch makes the
// worker drain the ring after it, so a commit that missed the bit is still
// picked up at once.
void ShmemObserver::wake(void *stream, bool on) {
  shmem::StreamEntry *e = entry(stream);
  if (!e)
    return;
  shmem::set_wake_bit(e, worker_index_, on);
  if (on)
    SetLatch(MyLatch);
}

void ShmemObserver::horizon(void *stream, int64_t horizon) {
  if (shmem::StreamEntry *e = entry(stream))
    shmem::raise_stream_horizon(e, horizon);
}

// Counted on the stream's entry also when this worker holds none (a stream
// nobody here watches, or dormant): by key, if the entry exists.
void ShmemObserver::retention_removed(int64_t stream_id, void *stream, int64_t rows) {
  auto add = [](shmem::StreamEntry *e, void *n) {
    shmem::add_retention_removed(e, *static_cast<uint64 *>(n));
  };
  uint64 n = (uint64)rows;
  if (shmem::StreamEntry *e = entry(stream))
    add(e, &n);
  else
    shmem::read_stream(dboid_, stream_id, add, &n);
}

void ShmemObserver::diagnostic(uint64_t conn_id, const char *event, const std::string &stream,
                               const std::string &detail) {
  shmem::record_diagnostic(worker_index_, conn_id, event, stream.c_str(), detail.c_str());
}

bool ShmemObserver::awaited(const std::string &name, bool on) {
  return shmem::await_stream(dboid_, name.c_str(), worker_index_, on);
}

// ---- the hub -----------------------------------------------------------------

Hub::Hub(http::Server &server, uint32_t dboid, int worker_index)
    : server_(server), dboid_(dboid), worker_index_(worker_index), sink_(server),
      obs_(dboid, worker_index), engine_(engine_config(), rows_, sink_, obs_), reader_(dboid) {
  changed_max_ = (size_t)std::max(shmem::conn_rows_capacity(worker_index_), 64);
  shmem::clear_subscriber_bits(worker_index_); // left by a previous process in this slot
  shmem::clear_awaited(worker_index_);
  shmem::disconnect_worker_start(worker_index_); // nothing posted before concerns it
  reader_.start();
  shmem::publish_ring_position(worker_index_, reader_.position());
  rows_.set_stats_table(settings::current().stats_table);
}

void Hub::configure() {
  engine_.configure(engine_config());
  rows_.set_stats_table(settings::current().stats_table);
}

Hub::~Hub() = default; // the engine releases every connection still open

void Hub::changed(uint64_t conn_id) {
  if (changed_.size() < changed_max_)
    changed_.push_back(conn_id);
  else
    changed_overflow_ = true;
}

bool Hub::take_changed(std::vector<uint64_t> *out) {
  out->clear();
  out->swap(changed_); // both keep their room: no allocation per turn
  const bool complete = !changed_overflow_;
  changed_overflow_ = false;
  return complete;
}

void Hub::reload_catalog() {
  const uint64_t version = reader_.catalog_version();
  engine_.set_now((int64_t)GetCurrentTimestamp());
  if (!engine_.reload_catalog())
    return; // tried again next round
  catalog_version_ = version;
  catalog_loaded_ = true;
}

// Read before any lookup that depends on it: a stream created after the
// lookup's snapshot moves a counter after it (at its commit), so a name
// remembered as unknown is forgotten at the next decision.
void Hub::catalog_state() {
  const uint64_t version = reader_.catalog_version();
  engine_.catalog_state(version, shmem::stream_births(),
                        catalog_loaded_ && version == catalog_version_);
}

void Hub::publish_lookup_figures() {
  shmem::publish_lookup_figures(worker_index_, engine_.counters().catalog_reads,
                                engine_.pending_count());
}

void Hub::cycle(bool full) {
  if (!catalog_loaded_ || reader_.catalog_version() != catalog_version_)
    reload_catalog();
  const int64_t now_us = (int64_t)GetCurrentTimestamp();
  engine_.set_now(now_us);
  catalog_state();
  if (engine_.pending_lookup_due())
    engine_.load_pending();
  const std::vector<int64_t> &ids = engine_.round_streams(full);
  entries_.clear();
  for (void *h : engine_.round_handles())
    entries_.push_back(static_cast<shmem::StreamEntry *>(h));
  read_horizon_bounds(dboid_, worker_index_, ids, &entries_, &bounds_);
  // An entry acquired there (shared memory had no room when the engine
  // loaded the stream) is not the engine's: let it go again.
  const std::vector<void *> &held = engine_.round_handles();
  for (size_t k = 0; k < entries_.size() && k < held.size(); ++k)
    if (held[k] == nullptr && entries_[k] != nullptr)
      shmem::release_stream(entries_[k], worker_index_);
  events_.clear();
  const bool complete = reader_.drain(&events_);
  shmem::publish_ring_position(worker_index_, reader_.position());
  engine_.round(events_, complete, bounds_);
  // Only rows a live subscription took keep the ring on a timer: a worker
  // whose connections all page is woken for its sockets, not polled.
  ring_poll_ms_ = reader_.after_drain(worker_index_, engine_.live_events(), now_us);
  shmem::streams_relieved(); // the round released what it could
  if (engine_.pending_count() > 0) {
    const size_t waiting = engine_.pending_count();
    // Another round at once: to bound a stream just loaded, and to drain
    // what its producers committed before this worker watched it.
    if (engine_.settle_pending() || engine_.pending_count() != waiting)
      SetLatch(MyLatch);
    // Their streams were born: presence counts them there from now on, and
    // a ?presence=1 connection gets that stream's snapshot and changes.
    for (uint64_t id : engine_.take_born()) {
      std::vector<std::pair<int64_t, std::string>> streams;
      std::optional<std::string> sub;
      bool wants = false;
      if (!engine_.presence_of(id, &streams, &sub, &wants))
        continue;
      changed(id);
      if (wants) {
        presence_.remove(id);
        presence_.add(id, streams);
      }
    }
  }
  publish_lookup_figures();
}

void Hub::subscribe(const http::Request &req) {
  changed(req.conn_id); // first: its row follows what the engine decided, even on an error
  engine::Subscribe s;
  s.creds = req.creds;
  s.now_unix_s = (int64_t)time(nullptr);
  s.conn_id = req.conn_id;
  s.streams = req.streams;
  // The cursor: Last-Event-ID wins over ?since / ?last_event_id.
  s.cursor = req.has_last_event_id ? &req.last_event_id : req.has_since ? &req.since : nullptr;
  s.replay = req.replay;
  s.subscriber = req.subscriber;
  s.remote_addr = req.remote_addr;
  s.presence = req.presence;
  s.gem = req.gem_route;
  s.connected = req.connected;
  engine_.set_now((int64_t)GetCurrentTimestamp());
  catalog_state();
  if (!engine_.subscribe(s, false, batch_bounded_)) {
    cycle(true); // every stream up to date (and a stream just loaded bounded) first
    batch_bounded_ = true;
    engine_.subscribe(s, true);
  }
  std::vector<std::pair<int64_t, std::string>> streams;
  std::optional<std::string> sub;
  bool wants = false;
  if (engine_.presence_of(req.conn_id, &streams, &sub, &wants) && wants)
    presence_.add(req.conn_id, streams);
  publish_lookup_figures();
}

void Hub::end_connections() {
  engine_.set_now((int64_t)GetCurrentTimestamp());
  engine_.end_expired((int64_t)time(nullptr));
  shmem::DisconnectWanted wanted[shmem::kDisconnectSlots];
  const int n = shmem::disconnect_pending(worker_index_, wanted);
  for (int i = 0; i < n; i++) {
    const size_t ended = engine_.end_connections(wanted[i].conn_id, wanted[i].sub, "disconnected");
    shmem::disconnect_done(worker_index_, wanted[i].seq, (int64)ended);
  }
}

void Hub::presence_round() {
  if (presence_.empty()) {
    if (presence_bit_)
      shmem::watch_presence(worker_index_, false);
    presence_bit_ = false;
    return;
  }
  bool force = false;
  if (!presence_bit_) {
    shmem::watch_presence(worker_index_, true); // full barrier: before gen is read
    presence_bit_ = true;
    force = true;
  }
  const uint64 gen = shmem::presence_generation();
  if (!force && gen == presence_seen_ && !presence_.pending())
    return;
  presence_seen_ = gen;
  count_presence(presence_.streams(), &presence_counts_, &presence_scratch_);
  presence_.update(presence_counts_, [this](uint64_t conn_id, const std::string &frame) {
    return engine_.push_control(conn_id, frame);
  });
}

void Hub::prune_history() {
  if (settings::current().stats_enabled)
    engine_.prune_history(settings::current().stats_max_age_s);
}

namespace {

struct FigureRead {
  metrics::StreamFigures *f;
  int64_t now_pg;
};

// The figures every worker adds to, from the stream's shared entry.
void read_figures(shmem::StreamEntry *e, void *arg) {
  const FigureRead *r = static_cast<const FigureRead *>(arg);
  metrics::StreamFigures *f = r->f;
  shmem::StreamFigures g;
  shmem::read_stream_figures(e, r->now_pg, &g);
  f->subscribers = g.subscribers;
  f->emitted = g.events;
  f->queued = g.queued;
  f->overflow_dropped = g.overflow_dropped;
  f->failed = g.failed;
  f->bytes_queued = g.bytes_queued;
  f->newest_id = g.max_committed;
  f->has_latency = g.has_latency;
  f->latency_p50_ms = g.latency_p50_ms;
  f->latency_p99_ms = g.latency_p99_ms;
  for (int b = 0; b < metrics::kLatencyBuckets; b++)
    f->latency_buckets[b] = g.latency_totals[b];
}

} // namespace

void Hub::fill_snapshot(metrics::Snapshot *out, bool include_private) const {
  const int64_t now_pg = (int64_t)GetCurrentTimestamp();
  static_assert(metrics::kLatencyBuckets == shmem::kLatencyBuckets, "same latency buckets");
  out->streams.clear();
  for (const engine::Engine::StreamView &v : engine_.streams()) {
    if (!include_private && !v.is_public)
      continue;
    metrics::StreamFigures f;
    f.name = v.name;
    f.horizon = v.horizon;
    FigureRead r{&f, now_pg};
    // A stream this worker has no connection on (and so holds no entry for)
    // still has the figures the other workers wrote: the scrape may be
    // answered by any worker.
    if (shmem::StreamEntry *e = static_cast<shmem::StreamEntry *>(v.handle))
      read_figures(e, &r);
    else
      shmem::read_stream(dboid_, v.id, read_figures, &r);
    out->streams.push_back(std::move(f));
  }
  std::sort(out->streams.begin(), out->streams.end(),
            [](const metrics::StreamFigures &a, const metrics::StreamFigures &b) {
              return a.name < b.name;
            });
}

} // namespace pgbs::worker
