// The workers' processes and their connections as shared memory shows them:
// each worker's latch and pid, its rows for connections() and presence(),
// and the presence watchers. Each worker's rows have their own LWLock; only
// that worker writes them.
#pragma once

#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "storage/latch.h"
}

namespace pgbs::shmem {

// A live connection as shown by connections() and counted by presence();
// written by its worker about twice a second, and at once when its set of
// connections changed.
constexpr int kConnStreams = 32;        // http::Config::max_streams_per_request
constexpr int kIdentityBytes = 128 + 1; // auth::kMaxSubscriberIdBytes + NUL
struct ConnSnapshot {
  uint64 conn_id;
  int64 connected_at_us; // Unix epoch microseconds
  int64 queued_events, queued_bytes, written, overflow_dropped;
  char remote[48];
  char streams[128];
  char cursor[256];
  char subscriber[64];
  char state[16];
  // presence(): the streams by catalog id and the credential's identity
  // (the JWT's sub); has_identity false for anonymous connections.
  int32 nstreams;
  bool has_identity;
  int64 stream_ids[kConnStreams];
  char identity[kIdentityBytes];
};
inline bool conn_on_stream(const ConnSnapshot &c, int64 stream_id) {
  for (int i = 0; i < c.nstreams; i++)
    if (c.stream_ids[i] == stream_id)
      return true;
  return false;
}

// Worker w's process: attached at start (its latch and pid; the connection
// places a previous process held go back), detached at exit (also empties
// its rows and tells the other workers' presence watchers).
void worker_attach(int w, Latch *latch, int pid);
void worker_detach(int w);

// ---- worker w's rows (written by worker w only) ----

// How many rows worker w has room for (0: not a worker of this server).
int conn_rows_capacity(int w);
// Under the rows' lock (exclusive), copies only: the rows are planned before.
// set_conn_rows: rows[0, n) become all of them. put_conn_rows: rows[0, n)
// overwrite the rows from `at`. move_conn_rows: each move in turn copies
// row `from` (from >= 0) or staged[staged_at] to row `to`, then count rows
// remain.
void set_conn_rows(int w, const ConnSnapshot *rows, int n);
void put_conn_rows(int w, int at, const ConnSnapshot *rows, int n);
struct ConnRowMove {
  int to;
  int from;      // -1: from staged
  int staged_at; // -1: from row `from`
};
void move_conn_rows(int w, const ConnRowMove *moves, size_t nmoves, const ConnSnapshot *staged,
                    int count);
// Row i of worker w, read by worker w itself (the only writer: no lock).
ConnSnapshot own_conn_row(int w, int i);

// ---- any backend reads the rows ----

// Calls fn(row, arg) for each row of worker w under the rows' lock (shared),
// until it returns false: fn copies and compares only (no allocation, no
// error, no exception).
void visit_conn_rows(int w, bool (*fn)(const ConnSnapshot &, void *), void *arg);
// A palloc'd copy of worker w's rows (n of them, nullptr when it has
// none), taken under the lock held shared.
ConnSnapshot *copy_conn_rows(int w, int *n);

// ---- presence ----

// Announces a change of worker w's connection rows to the presence
// watchers of the other workers (bumps the generation, sets their latches).
void presence_changed(int w);
// Worker w watches (has ?presence=1 connections) or stops watching; the
// bit is set with a full barrier, before the generation is read.
void watch_presence(int w, bool on);
uint64 presence_generation();

} // namespace pgbs::shmem
