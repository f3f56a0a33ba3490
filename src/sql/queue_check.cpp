// pgbus_stream._queue_problem(regclass): why a table cannot be taken as a
// queue, or NULL when it can (the rule: pg/queue_table.hpp). Plain
// PostgreSQL C API only.
#include "pg/queue_table.hpp"

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(pgbus_stream_queue_problem);
}

extern "C" Datum pgbus_stream_queue_problem(PG_FUNCTION_ARGS) {
  unsigned owner = 0;
  char why[256];
  if (pgbs::pg::queue_table_ok(PG_GETARG_OID(0), &owner, why, sizeof(why)))
    PG_RETURN_NULL();
  PG_RETURN_TEXT_P(cstring_to_text(why));
}
