// SQL-callable readers of the figures the workers keep in shared memory.
// Plain PostgreSQL C API only (no C++ objects), so errors cannot skip a
// destructor.
#include "core/wire.hpp"
#include "shmem/awaited.hpp"
#include "shmem/conns.hpp"
#include "shmem/figures.hpp"
#include "shmem/ring.hpp"

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
  int64 now = (int64)GetCurrentTimestamp();
  for (int i = 0; i < pgbs::shmem::stream_places(); i++) {
    pgbs::shmem::StreamFigures f;
    if (!pgbs::shmem::stream_figures_at(i, MyDatabaseId, now, &f))
      continue;
    Datum values[12];
    bool nulls[12] = {false};
    values[0] = Int64GetDatum(f.stream_id);
    values[1] = Int64GetDatum(f.subscribers);
    values[2] = Int64GetDatum(f.events);
    values[3] = Int64GetDatum(f.queued);
    values[4] = Int64GetDatum(f.overflow_dropped);
    values[5] = Int64GetDatum(f.failed);
    values[6] = Int64GetDatum(f.bytes_queued);
    values[7] = Int64GetDatum(f.max_committed);
    if (f.has_latency) {
      values[8] = Float8GetDatum(f.latency_p50_ms);
      values[9] = Float8GetDatum(f.latency_p99_ms);
    } else {
      nulls[8] = nulls[9] = true;
    }
    values[10] = Int64GetDatum(f.retention_removed);
    values[11] = Int64GetDatum(f.horizon);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

// _worker_stats(): one row per running worker.
PGBS_SQL_FUNCTION(pgbus_stream_worker_stats) {
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  for (int i = 0; i < pgbs::shmem::kMaxWorkers; i++) {
    pgbs::shmem::WorkerRow row;
    if (!pgbs::shmem::read_worker_figures(i, MyDatabaseId, &row))
      continue;
    const pgbs::shmem::WorkerFigures &w = row.figures;
    // 0.1.0's workers() declares the first nine columns, 0.2.0's twelve:
    // only those are read. The last is 0.2.0's name of queued (one version).
    Datum values[13];
    bool nulls[13] = {false};
    values[0] = Int32GetDatum(i);
    values[1] = Int32GetDatum((int32)row.pid);
    values[2] = Int64GetDatum((int64)w.connections);
    values[3] = Int64GetDatum((int64)w.queued);
    values[4] = Int64GetDatum((int64)w.overflow_dropped);
    values[5] = Int64GetDatum((int64)w.catch_ups);
    values[6] = Int64GetDatum((int64)w.events_read);
    values[7] = Int64GetDatum((int64)pgbs::shmem::ring_overflows());
    values[8] = Int64GetDatum((int64)w.held_back);
    uint64 reads, pending;
    pgbs::shmem::lookup_figures(i, &reads, &pending);
    values[9] = Int64GetDatum((int64)reads);
    values[10] = Int64GetDatum((int64)pending);
    values[11] = Int64GetDatum(row.streams_held);
    values[12] = values[3];
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

// connections(): one row per live SSE connection, from every worker.
PGBS_SQL_FUNCTION(pgbus_stream_connections) {
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  for (int w = 0; w < pgbs::shmem::kMaxWorkers; w++) {
    // Copied under the lock; the tuples are built after it was released.
    int n = 0;
    pgbs::shmem::ConnSnapshot *copy = pgbs::shmem::copy_conn_rows(w, &n);
    if (copy == nullptr)
      continue;
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
  uint64 n = 0, start = 0;
  pgbs::shmem::DiagEntry *copy = pgbs::shmem::copy_diagnostics(&n, &start);
  if (copy == nullptr)
    return (Datum)0;
  for (uint64 i = 0; i < n; i++) {
    pgbs::shmem::DiagEntry *e = &copy[i];
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
