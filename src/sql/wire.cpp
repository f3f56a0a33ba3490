// pgbus_stream._wire_valid(kind, value): the wire format's rules
// (core/wire.hpp) for SQL, so that broadcast(), define_audience() and the
// audiences table check what the workers check, with the same code.
#include "core/wire.hpp" // before postgres.h

#include <string_view>

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/builtins.h"
}

#include "pg/echo.hpp"
#include "pg/guard.hpp"
#include "pg/compat.hpp"

namespace {

enum class Kind { Unknown, EventName, ConnectionId };

Kind kind_of(std::string_view k) {
  if (k == "event_name")
    return Kind::EventName;
  if (k == "connection_id")
    return Kind::ConnectionId;
  return Kind::Unknown;
}

} // namespace

// Whether `value` is a valid `kind`: 'event_name' (also audience labels) or
// 'connection_id'. A NULL value is not valid; an unknown kind is an error.
PGBS_SQL_FUNCTION(pgbus_stream_wire_valid) {
  if (PG_ARGISNULL(0))
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("pgbus_stream: _wire_valid() needs a kind"),
                    errhint("'event_name' or 'connection_id'.")));
  text *kind_text = PG_GETARG_TEXT_PP(0);
  const Kind kind = kind_of({VARDATA_ANY(kind_text), VARSIZE_ANY_EXHDR(kind_text)});
  if (kind == Kind::Unknown)
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("pgbus_stream: unknown kind \"%s\" for _wire_valid()",
                           pgbs::pg::echo({VARDATA_ANY(kind_text), VARSIZE_ANY_EXHDR(kind_text)})),
                    errhint("'event_name' or 'connection_id'.")));
  if (PG_ARGISNULL(1))
    PG_RETURN_BOOL(false);
  text *value = PG_GETARG_TEXT_PP(1);
  const std::string_view v(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
  uint64_t id = 0;
  PG_RETURN_BOOL(kind == Kind::EventName ? pgbs::wire::valid_event_name(v)
                                         : pgbs::wire::parse_connection_id(v, &id));
}
