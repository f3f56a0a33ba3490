// SQL-callable helpers of the stream catalog's functions: _catalog_changed()
// (the catalog functions tell the workers at commit) and _broadcast_target()
// (what broadcast() needs of a stream's catalog row). Plain PostgreSQL C API
// only (no C++ objects), so errors cannot skip a destructor.
#include "core/auth.hpp" // before postgres.h
#include "capture/capture.hpp"
#include "capture/wal.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

#include "pg/echo.hpp"
#include "pg/guard.hpp"

// pgbus_stream._catalog_changed(stream_id[, fresh]): called by the catalog
// functions; tells the workers at commit. Shared memory takes an entry for
// the stream only once it is written or watched.
PGBS_SQL_FUNCTION(pgbus_stream_catalog_changed) {
  if (!PG_ARGISNULL(0) && PG_NARGS() > 1 && !PG_ARGISNULL(1) && PG_GETARG_BOOL(1)) {
    pgbs::shmem::forget_stream(MyDatabaseId, PG_GETARG_INT64(0));
    pgbs::wal::log_forget(PG_GETARG_INT64(0));
  }
  pgbs::capture::note_catalog_change();
  PG_RETURN_VOID();
}

// pgbus_stream._broadcast_target(stream, OUT stream_id, OUT queue): what
// broadcast() needs of a stream's catalog row, for a caller allowed to
// INSERT into its queue (the catalog itself is not readable by PUBLIC). A
// private stream is "does not exist" to anyone else; a public one says
// permission denied. Plain C: no SECURITY DEFINER, no
// search_path to pin, no per-call settings.
PGBS_SQL_FUNCTION(pgbus_stream_broadcast_target) {
  if (PG_ARGISNULL(0))
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("pgbus_stream: stream name must not be NULL")));
  char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  const Oid ext = get_func_namespace(fcinfo->flinfo->fn_oid);
  int64 id;
  char *schema, *table;
  Oid queue = InvalidOid;
  bool is_public = false;
  bool found = pgbs::capture::find_stream(ext, name, &id, &schema, &table, &is_public);
  if (found) {
    Oid nsp = get_namespace_oid(schema, true);
    if (OidIsValid(nsp))
      queue = get_relname_relid(table, nsp);
  }
  // Only who may broadcast to a private stream learns that it exists (and
  // its id and queue); anyone may know a public one.
  const bool may_insert =
      OidIsValid(queue) && pg_class_aclcheck(queue, GetUserId(), ACL_INSERT) == ACLCHECK_OK;
  const char *shown = !may_insert ? pgbs::pg::echo(name) : name; // (before any ereport)
  if (!OidIsValid(queue) || (!is_public && !may_insert))
    ereport(ERROR,
            (errcode(ERRCODE_UNDEFINED_OBJECT),
             errmsg("pgbus_stream: stream \"%s\" does not exist", shown),
             is_public ? 0 : errhint("A private stream exists only for who may broadcast to it.")));
  if (!may_insert)
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("pgbus_stream: permission denied to broadcast to stream \"%s\"", shown),
                    errhint("GRANT INSERT ON %s.%s TO the publishing role.",
                            quote_identifier(schema), quote_identifier(table))));
  TupleDesc desc;
  if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("pgbus_stream: _broadcast_target must return a record")));
  desc = BlessTupleDesc(desc);
  Datum values[2] = {Int64GetDatum(id), ObjectIdGetDatum(queue)};
  bool nulls[2] = {false, false};
  PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
