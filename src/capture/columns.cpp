// The columns capture reads from a queue row: msg_id (bigint) and message
// (jsonb), found and type-checked once per relation and relcache version.
// A queue whose owner retyped one of them (ALTER COLUMN ... TYPE) would have
// its values read as the wrong type; such a table is refused with an error
// instead. The answers are dropped whenever PostgreSQL invalidates the
// relation's cache entry (any ALTER TABLE, also one earlier in the same
// transaction), so a later statement checks the new shape.
//
// Plain PostgreSQL C API only, like the rest of capture.
#include "capture/capture.hpp"

extern "C" {
#include "postgres.h"
#include "catalog/dependency.h"
#include "catalog/partition.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/syscache.h"
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace pgbs::capture {
namespace {

struct Cached {
  Oid relid;
  QueueColumns cols;
};

constexpr int kCached = 16; // a producer's queues, a few at a time
Cached cache[kCached];
int next_slot = 0;
bool callback_registered = false;

void forget(Datum, Oid relid) {
  for (Cached &c : cache)
    if (!OidIsValid(relid) || c.relid == relid)
      c.relid = InvalidOid;
}

int column(TupleDesc desc, const char *name) {
  for (int i = 0; i < desc->natts; i++) {
    Form_pg_attribute a = TupleDescAttr(desc, i);
    if (!a->attisdropped && strcmp(NameStr(a->attname), name) == 0)
      return i + 1;
  }
  return 0;
}

void refuse(Relation rel, const char *col, Oid type, const char *want) {
  ereport(ERROR,
          (errcode(ERRCODE_DATATYPE_MISMATCH),
           errmsg("pgbus_stream: column %s of queue table \"%s\" is of type %s, not %s", col,
                  RelationGetRelationName(rel), format_type_be(type), want),
           errdetail("Capture reads %s as %s; rows of this table cannot be streamed.", col, want),
           errhint("Restore the column's type, or detach the stream from this table.")));
}

} // namespace

QueueColumns queue_columns(Relation rel) {
  const Oid relid = RelationGetRelid(rel);
  for (const Cached &c : cache)
    if (c.relid == relid && OidIsValid(relid))
      return c.cols;
  if (!callback_registered) {
    CacheRegisterRelcacheCallback(forget, (Datum)0);
    callback_registered = true;
  }
  TupleDesc desc = RelationGetDescr(rel);
  QueueColumns cols;
  cols.msg_id = column(desc, "msg_id");
  if (cols.msg_id == 0)
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                    errmsg("pgbus_stream: table \"%s\" has no msg_id column",
                           RelationGetRelationName(rel))));
  // (a domain over the type reads as the type)
  const Oid id_type = TupleDescAttr(desc, cols.msg_id - 1)->atttypid;
  if (getBaseType(id_type) != INT8OID)
    refuse(rel, "msg_id", id_type, "bigint");
  cols.message = column(desc, "message");
  if (cols.message > 0) {
    const Oid m_type = TupleDescAttr(desc, cols.message - 1)->atttypid;
    if (getBaseType(m_type) != JSONBOID)
      refuse(rel, "message", m_type, "jsonb");
  }
  // The identity (or serial) sequence ids come from: a partition's is its
  // partitioned table's.
  Oid owner_rel = relid;
  if (rel->rd_rel->relispartition)
    owner_rel = llast_oid(get_partition_ancestors(relid));
  List *owned = getOwnedSequences(owner_rel);
  cols.seq = list_length(owned) == 1 ? linitial_oid(owned) : InvalidOid;
  list_free(owned);
  cache[next_slot++ % kCached] = {relid, cols};
  return cols;
}

int64 sequence_last_value(Oid seq) {
  // Read as the sequence's owner: the producer needs INSERT on the queue,
  // not SELECT on its sequence, and reading a sequence runs no user code.
  HeapTuple tup = SearchSysCache1(RELOID, ObjectIdGetDatum(seq));
  if (!HeapTupleIsValid(tup))
    return PG_INT64_MAX; // dropped meanwhile: nothing to compare with
  const Oid owner = ((Form_pg_class)GETSTRUCT(tup))->relowner;
  ReleaseSysCache(tup);
  Oid save_user;
  int save_sec;
  GetUserIdAndSecContext(&save_user, &save_sec);
  SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE |
                                    SECURITY_RESTRICTED_OPERATION);
  LOCAL_FCINFO(fcinfo, 1);
  InitFunctionCallInfoData(*fcinfo, nullptr, 1, InvalidOid, nullptr, nullptr);
  fcinfo->args[0].value = ObjectIdGetDatum(seq);
  fcinfo->args[0].isnull = false;
  PG_TRY();
  { fcinfo->args[0].value = pg_sequence_last_value(fcinfo); }
  PG_FINALLY();
  { SetUserIdAndSecContext(save_user, save_sec); }
  PG_END_TRY();
  // NULL: nothing handed out yet
  return fcinfo->isnull ? 0 : DatumGetInt64(fcinfo->args[0].value);
}

} // namespace pgbs::capture
