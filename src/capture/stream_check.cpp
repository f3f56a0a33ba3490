// The capture trigger's guard: a stream id must be the one the catalog
// records for the table the trigger fires on (or that _publish() is given).
// Plain PostgreSQL C API only, like the rest of capture.
#include "capture/capture.hpp"

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace pgbs::capture {
namespace {

int column(TupleDesc desc, const char *name) {
  for (int i = 0; i < desc->natts; i++) {
    Form_pg_attribute a = TupleDescAttr(desc, i);
    if (!a->attisdropped && strcmp(NameStr(a->attname), name) == 0)
      return i + 1;
  }
  return 0;
}

// True when the catalog (schema nsp's streams table) records stream_id as
// the stream of table relid. Read with a plain index scan under the active
// snapshot: the caller may have no right to read the catalog, and a stream
// created earlier in the same transaction must be seen.
bool catalog_says(int64 stream_id, Oid relid, Oid nsp) {
  Oid catalog = get_relname_relid("streams", nsp);
  if (!OidIsValid(catalog))
    return false;
  Relation rel = table_open(catalog, AccessShareLock);
  TupleDesc desc = RelationGetDescr(rel);
  const int id_att = column(desc, "id"), schema_att = column(desc, "queue_schema"),
            table_att = column(desc, "queue_table");
  Oid pk = RelationGetPrimaryKeyIndex(rel);
  bool ok = false;
  if (id_att > 0 && schema_att > 0 && table_att > 0 && OidIsValid(pk)) {
    ScanKeyData key;
    ScanKeyInit(&key, id_att, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(stream_id));
    Snapshot snap = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
    SysScanDesc scan = systable_beginscan(rel, pk, true, snap, 1, &key);
    HeapTuple tup = systable_getnext(scan);
    if (HeapTupleIsValid(tup)) {
      bool n1, n2;
      Datum qs = heap_getattr(tup, schema_att, desc, &n1);
      Datum qt = heap_getattr(tup, table_att, desc, &n2);
      char *relname = get_rel_name(relid);
      char *relnsp = get_namespace_name(get_rel_namespace(relid));
      ok = !n1 && !n2 && relname && relnsp && strcmp(TextDatumGetCString(qs), relnsp) == 0 &&
           strcmp(TextDatumGetCString(qt), relname) == 0;
    }
    systable_endscan(scan);
  }
  table_close(rel, AccessShareLock);
  return ok;
}

} // namespace

// Refuses a capture trigger (or an ephemeral publish) whose stream id is not
// the one the catalog records for its table: nobody can feed another stream
// from a table of their own. Pairs once confirmed are remembered (stream ids
// never repeat, and only who may create such triggers could move one).
void check_stream_table(int64_t stream_id, Oid relid, Oid nsp) {
  static struct {
    int64 stream_id;
    Oid relid;
  } confirmed[64];
  static int next = 0;
  for (const auto &c : confirmed)
    if (c.stream_id == stream_id && c.relid == relid)
      return;
  if (!catalog_says(stream_id, relid, nsp))
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("pgbus_stream: stream %lld is not the stream of table %s",
                           (long long)stream_id, get_rel_name(relid) ? get_rel_name(relid) : "?"),
                    errhint("Capture triggers are installed by create_stream() and attach().")));
  confirmed[next++ % 64] = {stream_id, relid};
}

} // namespace pgbs::capture
