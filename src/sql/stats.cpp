// SQL-callable readers of the figures the workers keep in shared memory.
// Plain PostgreSQL C API only (no C++ objects), so errors cannot skip a
// destructor.
#include "core/wire.hpp"
#include "shmem/awaited.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "datatype/timestamp.h"
#include "storage/lwlock.h"
}
#include "pg/guard.hpp"

// _stream_stats(): one row per stream of this database known to shared memory.
PGBS_SQL_FUNCTION(pgbus_stream_stream_stats) {
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  pgbs::shmem::Shared *s = pgbs::shmem::shared();
  int64 now = (int64)GetCurrentTimestamp();
  for (int i = 0; i < s->max_streams; i++) {
    pgbs::shmem::StreamEntry *e = &s->streams[i];
    if (e->stream_id == 0 || e->dboid != MyDatabaseId)
      continue;
    pgbs::shmem::StreamStats *st = &e->stats;
    Datum values[12];
    bool nulls[12] = {false};
    values[0] = Int64GetDatum(e->stream_id);
    values[1] = Int64GetDatum((int64)pg_atomic_read_u64(&st->subscribers));
    values[2] = Int64GetDatum((int64)pg_atomic_read_u64(&e->events));
    values[3] = Int64GetDatum((int64)pg_atomic_read_u64(&st->queued));
    values[4] = Int64GetDatum((int64)pg_atomic_read_u64(&st->overflow_dropped));
    values[5] = Int64GetDatum((int64)pg_atomic_read_u64(&st->failed));
    values[6] = Int64GetDatum((int64)pg_atomic_read_u64(&st->bytes_queued));
    values[7] = Int64GetDatum((int64)pg_atomic_read_u64(&e->max_committed));
    double p50, p99;
    if (pgbs::shmem::latency_percentiles(&st->latency, now, &p50, &p99)) {
      values[8] = Float8GetDatum(p50);
      values[9] = Float8GetDatum(p99);
    } else {
      nulls[8] = nulls[9] = true;
    }
    values[10] = Int64GetDatum((int64)pg_atomic_read_u64(&st->retention_removed));
    values[11] = Int64GetDatum((int64)pg_atomic_read_u64(&st->horizon));
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

// _worker_stats(): one row per running worker.
PGBS_SQL_FUNCTION(pgbus_stream_worker_stats) {
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  pgbs::shmem::Shared *s = pgbs::shmem::shared();
  for (int i = 0; i < pgbs::shmem::kMaxWorkers; i++) {
    uint32 pid = pg_atomic_read_u32(&s->worker_pid[i]);
    if (pid == 0)
      continue;
    pgbs::shmem::WorkerStats *w = &s->worker_stats[i];
    // 0.1.0's workers() declares the first nine columns, 0.2.0's twelve:
    // only those are read. The last is 0.2.0's name of queued (one version).
    Datum values[13];
    bool nulls[13] = {false};
    values[0] = Int32GetDatum(i);
    values[1] = Int32GetDatum((int32)pid);
    values[2] = Int64GetDatum((int64)pg_atomic_read_u64(&w->connections));
    values[3] = Int64GetDatum((int64)pg_atomic_read_u64(&w->queued));
    values[4] = Int64GetDatum((int64)pg_atomic_read_u64(&w->overflow_dropped));
    values[5] = Int64GetDatum((int64)pg_atomic_read_u64(&w->catch_ups));
    values[6] = Int64GetDatum((int64)pg_atomic_read_u64(&w->events_read));
    values[7] = Int64GetDatum((int64)pg_atomic_read_u64(&s->ring_overflows));
    values[8] = Int64GetDatum((int64)pg_atomic_read_u64(&w->held_back));
    uint64 reads, pending;
    pgbs::shmem::lookup_figures(i, &reads, &pending);
    values[9] = Int64GetDatum((int64)reads);
    values[10] = Int64GetDatum((int64)pending);
    int64 held = 0; // a scan of max_streams entries: a monitoring call, not a hot path
    for (int k = 0; k < s->max_streams; k++)
      if (s->streams[k].dboid == MyDatabaseId && pgbs::shmem::held_by_worker(&s->streams[k], i))
        held++;
    values[11] = Int64GetDatum(held);
    values[12] = values[3];
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

// connections(): one row per live SSE connection, from every worker.
PGBS_SQL_FUNCTION(pgbus_stream_connections) {
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  pgbs::shmem::Shared *s = pgbs::shmem::shared();
  for (int w = 0; w < pgbs::shmem::kMaxWorkers; w++) {
    pgbs::shmem::WorkerConns *wc = &s->worker_conns[w];
    if (wc->capacity == 0)
      continue;
    // Copy under the lock, build tuples after releasing it.
    LWLockAcquire(wc->lock, LW_SHARED);
    int n = wc->count;
    pgbs::shmem::ConnSnapshot *copy =
        (pgbs::shmem::ConnSnapshot *)palloc(sizeof(pgbs::shmem::ConnSnapshot) * (n + 1));
    memcpy(copy, wc->items, sizeof(pgbs::shmem::ConnSnapshot) * n);
    LWLockRelease(wc->lock);
    for (int i = 0; i < n; i++) {
      pgbs::shmem::ConnSnapshot *c = &copy[i];
      // Before 0.3.0 the declared columns end at subscriber; the last two
      // are 0.2.0's names of written and overflow_dropped (one version).
      Datum values[14];
      bool nulls[14] = {false};
      char idbuf[pgbs::wire::kConnectionIdLen + 1];
      pgbs::wire::format_connection_id(c->conn_id, idbuf);
      values[0] = CStringGetTextDatum(idbuf);
      values[1] = Int32GetDatum(w);
      values[2] = CStringGetTextDatum(c->streams);
      values[3] = CStringGetTextDatum(c->remote);
      // Unix microseconds -> TimestampTz (microseconds since 2000-01-01)
      values[4] = TimestampTzGetDatum(
          (TimestampTz)(c->connected_at_us - ((int64)(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                              SECS_PER_DAY * USECS_PER_SEC)));
      values[5] = CStringGetTextDatum(c->cursor);
      values[6] = Int64GetDatum(c->queued_events);
      values[7] = Int64GetDatum(c->queued_bytes);
      values[8] = Int64GetDatum(c->written);
      values[9] = Int64GetDatum(c->overflow_dropped);
      values[10] = CStringGetTextDatum(c->state);
      if (c->subscriber[0])
        values[11] = CStringGetTextDatum(c->subscriber);
      else
        nulls[11] = true;
      values[12] = values[8];
      values[13] = values[9];
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
    pfree(copy);
  }
  return (Datum)0;
}

static Datum unix_us_to_timestamptz(int64 us) {
  return TimestampTzGetDatum((TimestampTz)(us - ((int64)(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                                 SECS_PER_DAY * USECS_PER_SEC)));
}

// diagnostics(): the ring of recent lifecycle events, oldest first, with the
// number of older entries it no longer holds.
PGBS_SQL_FUNCTION(pgbus_stream_diagnostics) {
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  pgbs::shmem::Diagnostics *d = &pgbs::shmem::shared()->diagnostics;
  if (d->capacity <= 0)
    return (Datum)0;
  // Copied a slice at a time, the lock shared for each: a writer (a worker
  // recording a connection event) never waits for more than one slice, not
  // for a copy of the whole ring. An entry overwritten meanwhile is left out.
  const uint64 cap = (uint64)d->capacity;
  LWLockAcquire(d->lock, LW_SHARED);
  uint64 next = d->next;
  LWLockRelease(d->lock);
  uint64 first = next > cap ? next - cap : 0;
  pgbs::shmem::DiagEntry *copy =
      (pgbs::shmem::DiagEntry *)palloc(sizeof(pgbs::shmem::DiagEntry) * (next - first + 1));
  constexpr uint64 kSlice = 256;
  for (uint64 i = first; i < next; i += kSlice) {
    const uint64 n = Min(kSlice, next - i);
    LWLockAcquire(d->lock, LW_SHARED);
    for (uint64 k = 0; k < n; k++)
      copy[i - first + k] = d->items[(i + k) % cap];
    LWLockRelease(d->lock);
  }
  LWLockAcquire(d->lock, LW_SHARED);
  const uint64 end = d->next; // entries below end - cap may have been overwritten
  LWLockRelease(d->lock);
  const uint64 start = Min(next, Max(first, end > cap ? end - cap : 0));
  for (uint64 i = start; i < next; i++) {
    pgbs::shmem::DiagEntry *e = &copy[i - first];
    Datum values[7];
    bool nulls[7] = {false};
    char idbuf[pgbs::wire::kConnectionIdLen + 1];
    pgbs::wire::format_connection_id(e->conn_id, idbuf);
    values[0] = unix_us_to_timestamptz(e->at_us);
    values[1] = Int32GetDatum(e->worker);
    values[2] = CStringGetTextDatum(idbuf);
    values[3] = CStringGetTextDatum(e->event);
    values[4] = CStringGetTextDatum(e->stream);
    values[5] = CStringGetTextDatum(e->detail);
    values[6] = Int64GetDatum((int64)start);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  pfree(copy);
  return (Datum)0;
}
