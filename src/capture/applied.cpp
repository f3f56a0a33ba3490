// Rows applied by a logical-replication subscription. Its apply worker runs
// with session_replication_role = replica and fires row-level triggers only
// (no statement-level INSERT triggers), and of those only the ones enabled
// REPLICA or ALWAYS: the capture trigger is enabled ALWAYS, and in that role
// _capture() hands each row here instead of collecting it as a producer's
// (one trigger for both, so ordinary producers walk no second one; an AFTER
// ROW trigger also keeps COPY's batched inserts). What it collects is
// published at commit with the rest of the capture (capture.cpp).
#include "capture/capture.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/rel.h"

Datum pgbus_stream_capture(PG_FUNCTION_ARGS);
}
#include "pg/guard.hpp"

namespace pgbs::capture {

void capture_applied_row(TriggerData *td, int64_t stream_id) {
  TupleDesc desc = RelationGetDescr(td->tg_relation);
  const QueueColumns cols = queue_columns(td->tg_relation); // types checked
  bool isnull;
  const Datum id = heap_getattr(td->tg_trigtuple, cols.msg_id, desc, &isnull);
  if (isnull)
    return;
  Datum message = 0;
  if (cols.message > 0) {
    bool mnull;
    const Datum m = heap_getattr(td->tg_trigtuple, cols.message, desc, &mnull);
    if (!mnull)
      message = m;
  }
  collect_applied(stream_id, DatumGetInt64(id), (uintptr_t)message);
}

} // namespace pgbs::capture

// pgbus_stream._capture_applied(stream_id): the function of
// pgbus_stream_applied, the REPLICA trigger that queues hooked by earlier
// 0.2.0 builds (and dumps of them) carry beside an ORIGIN capture trigger. It
// fires in replica role only, where _capture() takes the path above.
PGBS_SQL_FUNCTION(pgbus_stream_capture_applied) { return pgbus_stream_capture(fcinfo); }
