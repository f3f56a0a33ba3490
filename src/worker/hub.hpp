// The worker's adapter around the delivery engine: the engine's three
// interfaces implemented over SPI (SqlRowSource), the HTTP layer (a sink on
// http::Server's connection handles) and shared memory (an observer), plus
// the ring reader that feeds it. docs/ARCHITECTURE.md, "The engine".
// Runs on the worker's main thread only.
#pragma once
#include "core/metrics.hpp"
#include "engine/engine.hpp"
#include "http/server.hpp"
#include "worker/presence_rows.hpp"
#include "worker/sql_source.hpp"
#include "worker/ring_reader.hpp" // after the PostgreSQL-free headers

#include <cstdint>
#include <string>
#include <vector>

namespace pgbs::shmem {
struct StreamEntry;
}

namespace pgbs::worker {

// The engine's configuration from the settings the worker read last
// (settings::current(), at start and on SIGHUP).
engine::Config engine_config();

class HttpSink : public engine::FrameSink {
public:
  explicit HttpSink(http::Server &s) : server_(s) {}
  void reject(uint64_t conn_id, int status, const std::string &reason) override;
  void retry_later(uint64_t conn_id, const std::string &reason) override;
  engine::SinkRef open(uint64_t conn_id, std::string preamble,
                       const std::string &start_id) override;
  size_t queued_events(engine::SinkRef ref) const override;
  size_t queued_bytes(engine::SinkRef ref) const override;
  bool backed_up(engine::SinkRef ref) const override;
  OutQueue::PushResult push(engine::SinkRef ref, OutFrame frame) override;
  uint64_t written(engine::SinkRef ref) const override;
  void close(engine::SinkRef ref, const std::string &reason) override;
  void release(engine::SinkRef ref) override;

private:
  http::Server &server_;
};

class ShmemObserver : public engine::Observer {
public:
  ShmemObserver(uint32_t dboid, int worker_index) : dboid_(dboid), worker_index_(worker_index) {}
  void *stream_handle(int64_t stream_id, int64_t table_max) override;
  void release_stream(void *stream) override;
  bool streams_short() override;
  uint64_t ephemeral_seq(void *stream) override;
  bool ephemeral_forgotten() override;
  void stream_figures(void *stream, const engine::StreamDelta &d) override;
  void subscribers(void *stream, int delta) override;
  void watched(void *stream, bool on) override;
  void wake(void *stream, bool on) override;
  void horizon(void *stream, int64_t horizon) override;
  void retention_removed(int64_t stream_id, void *stream, int64_t rows) override;
  void diagnostic(uint64_t conn_id, const char *event, const std::string &stream,
                  const std::string &detail) override;
  bool awaited(const std::string &name, bool on) override;

private:
  uint32_t dboid_;
  int worker_index_;
};

class Hub {
public:
  Hub(http::Server &server, uint32_t dboid, int worker_index);
  ~Hub();

  void configure(); // after SIGHUP
  // The engine, for what the hub adds nothing to: credentials' keys
  // (configure_auth), audience rules, paging, written-position tracking,
  // cursor and history flushes, retention, the counters, and what a
  // connection row shows (describe, presence_of). What the hub wraps
  // (subscribe, closed, cycle, prune_history, ...) goes through it.
  engine::Engine &engine() { return engine_; }
  const engine::Engine &engine() const { return engine_; }
  // Loads the stream catalog; call at start and when the catalog version moves.
  void reload_catalog();
  // One wake-up: horizon bounds, ring drain, dispatch, horizon advance.
  // full: every stream's horizon (subscribing needs a full one first).
  void cycle(bool full = false);
  // A batch of requests begins: the first one that opens a stream runs a
  // full round first.
  void new_batch() { batch_bounded_ = false; }
  void subscribe(const http::Request &req);
  void closed(uint64_t conn_id) {
    changed(conn_id);
    presence_.remove(conn_id);
    engine_.closed(conn_id);
  }
  // The connections whose rows in connections() may have moved since the
  // last call (subscribed, closed, a waiting stream born; in any order, an id
  // possibly more than once), swapped into *out. False when more were named
  // than a worker has rows (the list is bounded): then every row is rewritten.
  bool take_changed(std::vector<uint64_t> *out);
  // Presence events for this worker's ?presence=1 connections, when any
  // worker's connections changed (presence_gen) or snapshots are owed.
  void presence_round();
  // Connections whose credential expired end (pgbus:shutdown, reason
  // credential_expired); then those pgbus_stream.disconnect() asked for.
  void end_connections();
  // Longest wait before the next cycle (-1: until woken; RingReader::after_drain).
  long ring_poll_ms() const { return ring_poll_ms_; }
  // History older than stats_max_age, when the stats table is on.
  void prune_history();
  // Whether the catalog can be read (/healthz): a query of the row source.
  bool probe() { return rows_.probe(); }
  // Per-stream figures for /metrics and /stats.json (no PostgreSQL calls);
  // private streams only with include_private.
  void fill_snapshot(metrics::Snapshot *out, bool include_private) const;

private:
  http::Server &server_;
  uint32_t dboid_;
  int worker_index_;
  HttpSink sink_;
  ShmemObserver obs_;
  SqlRowSource rows_;
  engine::Engine engine_;
  RingReader reader_;
  long ring_poll_ms_ = -1;
  uint64_t catalog_version_ = 0;
  bool catalog_loaded_ = false;
  bool batch_bounded_ = false;
  // The catalog counters as the engine last heard them (see catalog_state).
  void catalog_state();
  void publish_lookup_figures();
  std::vector<shmem::StreamEntry *> entries_; // for the round's streams, in order
  engine::HorizonBounds bounds_;
  std::vector<ring::Event> events_;
  engine::PresenceFeed presence_;
  void changed(uint64_t conn_id);
  std::vector<uint64_t> changed_;
  size_t changed_max_;
  bool changed_overflow_ = false;
  uint64_t presence_seen_ = 0;
  bool presence_bit_ = false; // this worker's bit in shmem presence_workers
  std::map<int64_t, engine::PresenceCounts> presence_counts_;
  std::vector<PresenceRow> presence_scratch_;
};

} // namespace pgbs::worker
