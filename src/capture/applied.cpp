// Rows applied by a logical-replication subscription. Its apply worker runs
// with session_replication_role = replica and fires row-level triggers only
// (no statement-level INSERT triggers), and of those only the ones enabled
// REPLICA or ALWAYS: _capture_applied() is an AFTER INSERT FOR EACH ROW
// trigger enabled REPLICA, so ordinary producers never run it (an AFTER ROW
// trigger also keeps COPY's batched inserts). What it collects is published
// at commit with the rest of the capture (capture.cpp).
#include "capture/capture.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(pgbus_stream_capture_applied);
}

// pgbus_stream._capture_applied(stream_id)
extern "C" Datum pgbus_stream_capture_applied(PG_FUNCTION_ARGS) {
  if (!CALLED_AS_TRIGGER(fcinfo))
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture_applied() must be called as a trigger")));
  TriggerData *td = (TriggerData *)fcinfo->context;
  if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
      !TRIGGER_FIRED_AFTER(td->tg_event) || td->tg_trigger->tgnargs != 1)
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture_applied() must be an AFTER INSERT FOR EACH ROW "
                           "trigger with the stream id as its argument")));
  const int64 stream_id = pg_strtoint64(td->tg_trigger->tgargs[0]);
  pgbs::capture::check_stream_table(stream_id, RelationGetRelid(td->tg_relation),
                                    fcinfo->flinfo->fn_oid);
  TupleDesc desc = RelationGetDescr(td->tg_relation);
  const int id_att = SPI_fnumber(desc, "msg_id"); // a pure lookup: no SPI connection needed
  if (id_att <= 0)
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                    errmsg("pgbus_stream: table \"%s\" has no msg_id column",
                           RelationGetRelationName(td->tg_relation))));
  bool isnull;
  const Datum id = heap_getattr(td->tg_trigtuple, id_att, desc, &isnull);
  if (isnull)
    return PointerGetDatum(NULL);
  Datum message = 0;
  if (const int m_att = SPI_fnumber(desc, "message"); m_att > 0) {
    bool mnull;
    const Datum m = heap_getattr(td->tg_trigtuple, m_att, desc, &mnull);
    if (!mnull)
      message = m;
  }
  pgbs::capture::collect_applied(stream_id, DatumGetInt64(id), (uintptr_t)message);
  return PointerGetDatum(NULL);
}
