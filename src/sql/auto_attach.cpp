// SQL-callable helpers of pgbus_stream.auto_attach: the pattern test (one
// implementation in core/names) and the shared-memory side of a stream born
// without attach().
#include "core/names.hpp"
#include "settings/settings.hpp"
#include "shmem/awaited.hpp"
#include "shmem/shared.hpp"
#include "pg/compat.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
}
#include "pg/guard.hpp"

namespace {

// A stream was born in this transaction: at commit the workers hear of it
// (stream_births), so that subscriptions waiting for it find it and the
// workers forget the names they knew to be unknown.
bool g_born = false;
bool g_callback = false;

void on_xact(XactEvent event, void *) {
  if (event == XACT_EVENT_COMMIT && g_born)
    pgbs::shmem::note_births();
  if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
    g_born = false;
}

} // namespace

// _auto_attach_match(queue): whether pgbus_stream.auto_attach captures a
// PGMQ queue of this name. Nothing here allocates or throws.
PGBS_SQL_FUNCTION(pgbus_stream_auto_attach_match) {
  text *queue = PG_GETARG_TEXT_PP(0);
  const char *patterns = pgbs::settings::auto_attach();
  PG_RETURN_BOOL(pgbs::names::auto_attach_matches(
      patterns, std::string_view(VARDATA_ANY(queue), VARSIZE_ANY_EXHDR(queue))));
}

// _stream_born(stream_id): a new stream starts from nothing, whatever an
// older incarnation of the extension left in shared memory under the same
// id. It takes no entry (auto-attached queues are
// many, and most are never watched) and, unlike _catalog_changed(), does
// not make the workers reload.
PGBS_SQL_FUNCTION(pgbus_stream_stream_born) {
  pgbs::shmem::forget_stream(MyDatabaseId, PG_GETARG_INT64(0));
  if (!g_callback) {
    RegisterXactCallback(on_xact, nullptr);
    g_callback = true;
  }
  g_born = true;
  PG_RETURN_VOID();
}

// _stream_awaited(name): whether a subscription waits for this stream (its
// queue is then hooked in the transaction that creates it).
PGBS_SQL_FUNCTION(pgbus_stream_stream_awaited) {
  text *name = PG_GETARG_TEXT_PP(0);
  char *cname = text_to_cstring(name);
  PG_RETURN_BOOL(pgbs::shmem::stream_awaited(MyDatabaseId, cname));
}
