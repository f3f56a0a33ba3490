// pgbus_stream._queue_problem(regclass): why a table cannot be taken as a
// queue, or NULL when it can (the rule: pg/queue_table.hpp). Plain
// PostgreSQL C API only.
#include "pg/queue_table.hpp"

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/builtins.h"
}
#include "pg/guard.hpp"

PGBS_SQL_FUNCTION(pgbus_stream_queue_problem) {
  unsigned owner = 0;
  char why[256];
  if (pgbs::pg::queue_table_ok(PG_GETARG_OID(0), &owner, why, sizeof(why)))
    PG_RETURN_NULL();
  PG_RETURN_TEXT_P(cstring_to_text(why));
}
