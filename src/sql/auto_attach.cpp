// SQL-callable helpers of pgbus_stream.auto_attach: the pattern test (one
// implementation in core/names) and the shared-memory side of a stream born
// without attach().
#include "core/names.hpp"
#include "pgbus_stream.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(pgbus_stream_auto_attach_match);
PG_FUNCTION_INFO_V1(pgbus_stream_stream_born);
}

// _auto_attach_match(queue): whether pgbus_stream.auto_attach captures a
// PGMQ queue of this name. Nothing here allocates or throws.
extern "C" Datum pgbus_stream_auto_attach_match(PG_FUNCTION_ARGS) {
  text *queue = PG_GETARG_TEXT_PP(0);
  const char *patterns = pgbs::guc::auto_attach ? pgbs::guc::auto_attach : "";
  PG_RETURN_BOOL(pgbs::names::auto_attach_matches(
      patterns, std::string_view(VARDATA_ANY(queue), VARSIZE_ANY_EXHDR(queue))));
}

// _stream_born(stream_id): a new stream starts from nothing, whatever an
// older incarnation of the extension left in shared memory under the same
// id. It takes no entry (auto-attached queues are
// many, and most are never watched) and, unlike _catalog_changed(), does
// not make the workers reload.
extern "C" Datum pgbus_stream_stream_born(PG_FUNCTION_ARGS) {
  pgbs::shmem::forget_stream(MyDatabaseId, PG_GETARG_INT64(0));
  PG_RETURN_VOID();
}
