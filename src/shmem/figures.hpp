// The figures in shared memory: per stream (summed over the workers), per
// worker, and the ring of recent connection events (diagnostics()). The
// workers write them; any backend reads them as plain values. The names are
// the README's "Glossary of figures".
#pragma once

#include "shmem/shared.hpp"

namespace pgbs::shmem {

// ---- per stream ----

// What one delivery round adds to a stream's figures (latency_us < 0: no
// latency sample).
struct StreamAdds {
  uint64 queued = 0;
  uint64 overflow_dropped = 0;
  uint64 bytes_queued = 0;
  uint64 failed = 0;
  int64 latency_us = -1;
};
// Atomics, and for the latency a spinlock over a few integer stores: never
// errors. now_us: GetCurrentTimestamp().
void add_stream_figures(StreamEntry *e, const StreamAdds &d, int64 now_us);
void add_subscribers(StreamEntry *e, int delta);
void add_retention_removed(StreamEntry *e, uint64 rows);
// Raises the highest horizon any worker reached to at least horizon.
void raise_stream_horizon(StreamEntry *e, int64 horizon);

// A stream's figures as read at one moment.
struct StreamFigures {
  int64 stream_id = 0;
  int64 subscribers = 0, events = 0, queued = 0, overflow_dropped = 0, failed = 0;
  int64 bytes_queued = 0, max_committed = 0, retention_removed = 0, horizon = 0;
  bool has_latency = false; // p50/p99 (ms) over the last minute
  double latency_p50_ms = 0, latency_p99_ms = 0;
  uint64 latency_totals[kLatencyBuckets] = {}; // since start (only grows)
};
// Reads e's figures (atomics, and the latency under its spinlock).
void read_stream_figures(StreamEntry *e, int64 now_us, StreamFigures *out);
// stats(): the entries of dboid, by place in the table (0 .. stream_places()),
// without the index lock (an entry being reused may show a mix of figures,
// as before: monitoring only). False for an unused place or another database.
int stream_places();
bool stream_figures_at(int place, Oid dboid, int64 now_us, StreamFigures *out);

// ---- per worker ----

// What worker w publishes of itself (written by it only, read by stats()).
struct WorkerFigures {
  uint64 connections = 0, queued = 0, overflow_dropped = 0, catch_ups = 0;
  uint64 events_read = 0, held_back = 0;
};
void publish_worker_figures(int w, const WorkerFigures &f);
// Worker w's figures; false when no process runs in its place.
// streams_held counts the entries of dboid it holds (a scan of max_streams
// entries: a monitoring call, not a hot path).
struct WorkerRow {
  int pid = 0;
  WorkerFigures figures;
  int64 streams_held = 0;
};
bool read_worker_figures(int w, Oid dboid, WorkerRow *out);
// Connections of every running worker (the /metrics gauge).
int64 node_connections();

// ---- diagnostics ----

// One recent lifecycle event of a connection (diagnostics()).
struct DiagEntry {
  int64 at_us; // Unix epoch microseconds
  int32 worker;
  uint64 conn_id;
  char event[16];
  char stream[64];
  char detail[128];
};
// Appends one entry (the diagnostics LWLock, exclusive, over a copy).
void record_diagnostic(int worker, uint64 conn_id, const char *event, const char *stream,
                       const char *detail);
// The entries, oldest first, palloc'd in the current memory context
// (nullptr: the ring is off), *n of them; *first is the number of older
// entries the ring no longer holds. Copied a slice at a time under the lock
// held shared, so a writer never waits for a copy of the whole ring.
DiagEntry *copy_diagnostics(uint64 *n, uint64 *first);

} // namespace pgbs::shmem
