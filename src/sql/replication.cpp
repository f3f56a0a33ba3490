// replication(): where this node stands in WAL replay, and the standby floor
// table (docs/ARCHITECTURE.md, "Standbys"). Plain PostgreSQL C API only.
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "fmgr.h"
#include "funcapi.h"
#include "replication/walreceiver.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
}
#include "pg/guard.hpp"

PGBS_SQL_FUNCTION(pgbus_stream_replication) {
  TupleDesc desc;
  if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("pgbus_stream: replication() must return a record")));
  desc = BlessTupleDesc(desc);
  Datum values[8];
  bool nulls[8] = {false};
  const bool standby = RecoveryInProgress();
  values[0] = BoolGetDatum(standby);
  if (standby) {
    const XLogRecPtr received = GetWalRcvFlushRecPtr(nullptr, nullptr);
    const XLogRecPtr replayed = GetXLogReplayRecPtr(nullptr);
    const TimestampTz last = GetLatestXTime();
    values[1] = LSNGetDatum(received);
    nulls[1] = XLogRecPtrIsInvalid(received);
    values[2] = LSNGetDatum(replayed);
    values[3] = Int64GetDatum(received > replayed ? (int64)(received - replayed) : 0);
    nulls[3] = XLogRecPtrIsInvalid(received);
    values[4] = TimestampTzGetDatum(last);
    nulls[4] = last == 0;
  } else {
    nulls[1] = nulls[2] = nulls[3] = nulls[4] = true;
  }
  const pgbs::shmem::StandbyFigures f = pgbs::shmem::standby_figures();
  values[5] = Int32GetDatum(f.used);
  values[6] = Int64GetDatum((int64)f.overflows);
  values[7] = Int64GetDatum((int64)f.swept);
  PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
