// presence(stream): the identities connected to a stream over every worker,
// from the connection rows the workers publish in shared memory. Plain
// PostgreSQL C API only (no C++ objects), so errors cannot skip a destructor.
#include "capture/capture.hpp"
#include "pg/echo.hpp"
#include "shmem/conns.hpp"

extern "C" {
#include "postgres.h"
#include "catalog/pg_authid.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"
}
#include "pg/guard.hpp"
#include "pg/compat.hpp"

namespace {

// One connection of the stream: its identity (NULL: anonymous).
struct Member {
  bool has_identity;
  char identity[pgbs::shmem::kIdentityBytes];
};

int member_cmp(const void *a, const void *b) {
  const Member *x = (const Member *)a, *y = (const Member *)b;
  if (x->has_identity != y->has_identity)
    return x->has_identity ? 1 : -1; // anonymous first
  return x->has_identity ? strcmp(x->identity, y->identity) : 0;
}

// The connections of one stream, copied from the rows under their lock
// (nothing here allocates or errors).
struct Members {
  Member *items;
  int n, cap;
  int64 stream_id;
};

bool take_member(const pgbs::shmem::ConnSnapshot &c, void *arg) {
  Members *m = (Members *)arg;
  if (m->n >= m->cap)
    return false;
  if (!pgbs::shmem::conn_on_stream(c, m->stream_id))
    return true;
  m->items[m->n].has_identity = c.has_identity;
  memcpy(m->items[m->n].identity, c.identity, sizeof(m->items[m->n].identity));
  m->n++;
  return true;
}

// Private streams: as connections() and stats(), for superusers, members of
// pgbus_stream_monitor and the extension's owner.
bool may_see_private() {
  const Oid me = GetUserId();
  if (superuser_arg(me))
    return true;
  const Oid monitor = get_role_oid("pgbus_stream_monitor", true);
  if (OidIsValid(monitor) && has_privs_of_role(me, monitor))
    return true;
  const Oid ext = get_extension_oid("pgbus_stream", true);
  return OidIsValid(ext) && pgbs::pg::owns_extension(ext, me);
}

} // namespace

PGBS_SQL_FUNCTION(pgbus_stream_presence) {
  if (PG_ARGISNULL(0))
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("pgbus_stream: stream name must not be NULL")));
  char *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
  int64_t stream_id = 0;
  char *schema, *table;
  bool is_public = false;
  const char *shown = pgbs::pg::echo(name); // (before any ereport)
  if (!pgbs::capture::find_stream(get_func_namespace(fcinfo->flinfo->fn_oid), name, &stream_id,
                                  &schema, &table, &is_public))
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("pgbus_stream: stream \"%s\" does not exist", shown)));
  if (!is_public && !may_see_private())
    ereport(
        ERROR,
        (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
         errmsg("pgbus_stream: permission denied for the presence of private stream \"%s\"", shown),
         errhint("Superusers, members of pgbus_stream_monitor and the extension's owner may "
                 "list who is connected to a private stream.")));
  ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
  InitMaterializedSRF(fcinfo, 0);
  int total = 0;
  for (int w = 0; w < pgbs::shmem::kMaxWorkers; w++)
    total += pgbs::shmem::conn_rows_capacity(w);
  Members m{(Member *)palloc(sizeof(Member) * (total + 1)), 0, total, stream_id};
  for (int w = 0; w < pgbs::shmem::kMaxWorkers; w++)
    pgbs::shmem::visit_conn_rows(w, take_member, &m);
  Member *members = m.items;
  const int n = m.n;
  qsort(members, n, sizeof(Member), member_cmp);
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && member_cmp(&members[i], &members[j]) == 0)
      j++;
    Datum values[2];
    bool nulls[2] = {!members[i].has_identity, false};
    values[0] = members[i].has_identity ? CStringGetTextDatum(members[i].identity) : (Datum)0;
    values[1] = Int64GetDatum((int64)(j - i));
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    i = j;
  }
  pfree(members);
  return (Datum)0;
}
