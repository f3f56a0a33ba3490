// Figures of one worker as the HTTP routes show them (/metrics in Prometheus
// text format, /stats.json for the status page). Filled by the worker from
// shared memory; rendered here without PostgreSQL. The names are the README's
// "Glossary of figures".
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace pgbs::metrics {

constexpr int kLatencyBuckets = 26; // bucket b counts latencies in [2^b, 2^(b+1)) microseconds

struct StreamFigures {
  std::string name;
  int64_t subscribers = 0;      // all workers
  int64_t emitted = 0;          // committed events
  int64_t queued = 0;           // frames put on connections' queues
  int64_t overflow_dropped = 0; // frames dropped by the overflow policy
  int64_t failed = 0;
  int64_t bytes_queued = 0; // bytes of the queued frames
  int64_t newest_id = 0;
  int64_t horizon = 0; // this worker's horizon for the stream
  bool has_latency = false;
  double latency_p50_ms = 0, latency_p99_ms = 0;
  uint64_t latency_buckets[kLatencyBuckets] = {}; // since start (only grows), commit -> queued
};

struct Snapshot {
  int64_t now_us = 0; // Unix epoch microseconds
  int worker = 0;
  int64_t connections = 0; // all workers
  uint64_t queued = 0, overflow_dropped = 0, catch_ups = 0, ring_overflows = 0; // this worker
  uint64_t rows_read = 0;  // rows this worker read from the queue tables
  bool database_ok = true; // the worker's last catalog read worked
  std::vector<StreamFigures> streams;
};

// Prometheus text exposition format 0.0.4: pgbus_stream_* counters, gauges
// and a latency histogram (seconds, cumulative le buckets), labels escaped;
// 0.2.0's names of renamed counters follow as deprecated aliases (one version).
std::string render_prometheus(const Snapshot &s);
// A small JSON document for the status page.
std::string render_json(const Snapshot &s);

} // namespace pgbs::metrics
