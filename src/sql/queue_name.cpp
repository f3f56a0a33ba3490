// SQL-callable forms of the pgbus gem's naming rules (core/names.hpp), so
// that SQL and the workers share one implementation.
#include "core/names.hpp"

#include <string>

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/builtins.h"
}

#include "pg/echo.hpp"
#include "pg/guard.hpp"
#include "pg/compat.hpp"

namespace {

std::string_view arg_text(text *t) { return {VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)}; }

} // namespace


// queue_name(logical): the PGMQ queue the pgbus gem uses for a logical stream
// name. The C++ part runs inside pg::entry; errors are raised after it.
PGBS_SQL_FUNCTION(pgbus_stream_queue_name) {
  text *logical = PG_GETARG_TEXT_PP(0);
  pgbs::names::QueueNameError err = pgbs::names::QueueNameError::None;
  text *result = nullptr;
  pgbs::pg::entry([&]() -> Datum {
    const std::string q = pgbs::names::queue_name(arg_text(logical), &err);
    if (err == pgbs::names::QueueNameError::None)
      pgbs::pg::call([&] { result = cstring_to_text_with_len(q.data(), (int)q.size()); });
    return (Datum)0;
  });
  const char *shown = err != pgbs::names::QueueNameError::None ? pgbs::pg::echo(arg_text(logical)) : "";
  if (err == pgbs::names::QueueNameError::Empty && VARSIZE_ANY_EXHDR(logical) == 0)
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("pgbus_stream: stream name must not be empty")));
  if (err == pgbs::names::QueueNameError::Empty)
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("pgbus_stream: stream name \"%s\" maps to no queue name",
                    shown),
             errdetail("It has no letter, digit or \"_\": the gem's normalisation leaves nothing.")));
  if (err == pgbs::names::QueueNameError::TooLong)
    ereport(ERROR,
            (errcode(ERRCODE_NAME_TOO_LONG),
             errmsg("pgbus_stream: the queue of stream \"%s\" would be longer than %d characters",
                    shown, (int)pgbs::names::kMaxQueueName),
             errdetail("Queues are named \"%.*s\" followed by the stream name, with \"-\", \".\" "
                       "and \":\" as \"_\" and other characters outside [A-Za-z0-9_] dropped.",
                       (int)pgbs::names::kGemPrefix.size(), pgbs::names::kGemPrefix.data())));
  PG_RETURN_TEXT_P(result);
}

// _queue_name_or_null(logical): queue_name(), NULL where it would fail.
PGBS_SQL_FUNCTION(pgbus_stream_queue_name_or_null) {
  text *logical = PG_GETARG_TEXT_PP(0);
  text *result = nullptr;
  pgbs::pg::entry([&]() -> Datum {
    pgbs::names::QueueNameError err;
    const std::string q = pgbs::names::queue_name(arg_text(logical), &err);
    if (err == pgbs::names::QueueNameError::None)
      pgbs::pg::call([&] { result = cstring_to_text_with_len(q.data(), (int)q.size()); });
    return (Datum)0;
  });
  if (result == nullptr)
    PG_RETURN_NULL();
  PG_RETURN_TEXT_P(result);
}

// _echo(text): what an error message shows of a caller's text
// (names::echo: at most 64 bytes, then "..." and the size).
PGBS_SQL_FUNCTION(pgbus_stream_echo) {
  PG_RETURN_TEXT_P(cstring_to_text(pgbs::pg::echo(arg_text(PG_GETARG_TEXT_PP(0)))));
}
