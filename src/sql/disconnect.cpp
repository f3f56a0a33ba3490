// pgbus_stream.disconnect(sub => ..., connection => ...): ends live SSE
// connections on every worker, for a user who signed out or lost access.
// Each gets a pgbus:shutdown frame ({"reason":"disconnected"}) before its
// stream ends. Returns how many ended.
//
// The arguments are checked with core/auth's rules before anything is
// posted; the request travels through shared memory (shmem/disconnect.hpp).
#include "core/auth.hpp" // before postgres.h
#include "core/wire.hpp"
#include "shmem/disconnect.hpp"

#include <string>

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/builtins.h"
}
#include "pg/guard.hpp"

namespace {
constexpr int kWaitMs = 5000; // for every running worker to handle the request
} // namespace

PGBS_SQL_FUNCTION(pgbus_stream_disconnect) {
  const bool by_sub = !PG_ARGISNULL(0), by_conn = !PG_ARGISNULL(1);
  if (by_sub == by_conn)
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("pgbus_stream: disconnect() takes either sub or connection"),
                    errhint("disconnect(sub => 'user_42') or disconnect(connection => "
                            "'<connectionId>').")));
  char *arg = text_to_cstring(PG_GETARG_TEXT_PP(by_sub ? 0 : 1));
  uint64 conn_id = 0;
  bool valid = true;
  char why[160] = "";
  {
    // No PostgreSQL call in this scope: the strings are gone before any error.
    std::string reason;
    if (by_conn)
      valid = pgbs::wire::parse_connection_id(arg, &conn_id);
    else
      valid = pgbs::auth::valid_subscriber_id(arg, &reason);
    strlcpy(why, reason.c_str(), sizeof(why));
  }
  if (!valid && by_conn)
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("pgbus_stream: invalid connection id"),
                    errhint("Use the connectionId of a pgbus:connected event (16 hex digits), as "
                            "connections() shows it.")));
  if (!valid)
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("pgbus_stream: invalid sub: %s", why)));
  bool late = false;
  const int64 ended = pgbs::shmem::disconnect_post(conn_id, by_sub ? arg : "", kWaitMs, &late);
  if (late)
    ereport(WARNING, (errmsg("pgbus_stream: a worker did not answer within %d ms: its matching "
                             "connections end when it does",
                             kWaitMs)));
  PG_RETURN_INT64(ended);
}
