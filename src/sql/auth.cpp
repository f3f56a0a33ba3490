// pgbus_stream.sign_token(): mints a stream JWT in SQL with the same code
// the workers verify it with (core/auth).
//
// Arguments are read and checked with the plain C API first (errors there
// skip no destructor); the C++ part runs inside pg::entry.
#include "core/auth.hpp"
#include "settings/settings.hpp"

#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
}

#include "pg/guard.hpp"

namespace {

[[noreturn]] void bad_argument(const char *what) {
  ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("pgbus_stream: %s", what)));
  pg_unreachable();
}

} // namespace

// sign_token(streams text[], ttl interval, sub text, ctx jsonb) returns an
// HS256 JWT granting streams until now + ttl.
PGBS_SQL_FUNCTION(pgbus_stream_sign_token) {
  const char *setting = pgbs::settings::jwt_secret();
  if (setting == nullptr || setting[0] == '\0')
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("pgbus_stream: pgbus_stream.jwt_secret is not set"),
                    errhint("Set it in postgresql.conf (superuser only) and reload.")));
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
    bad_argument("streams and ttl must not be NULL");
  Datum *elems;
  bool *elem_nulls;
  int n;
  deconstruct_array(PG_GETARG_ARRAYTYPE_P(0), TEXTOID, -1, false, TYPALIGN_INT, &elems, &elem_nulls,
                    &n);
  if (n == 0 || n > (int)pgbs::auth::kMaxGrantedStreams)
    bad_argument("a token grants 1 to 256 streams");
  char **names = (char **)palloc(sizeof(char *) * n);
  for (int i = 0; i < n; i++) {
    if (elem_nulls[i])
      bad_argument("stream names must not be NULL");
    names[i] = TextDatumGetCString(elems[i]);
    const size_t len = strlen(names[i]);
    if (len == 0 || len > 256)
      bad_argument("stream names and patterns are 1 to 256 bytes");
    for (size_t k = 0; k < len; k++)
      if ((unsigned char)names[i][k] < 0x20 || names[i][k] == 0x7f)
        bad_argument("stream names must not contain control characters");
  }
  Interval *ttl = PG_GETARG_INTERVAL_P(1);
  const double seconds = (double)ttl->time / USECS_PER_SEC + (double)ttl->day * SECS_PER_DAY +
                         (double)ttl->month * DAYS_PER_MONTH * SECS_PER_DAY;
  if (!(seconds >= 1) || seconds > 10.0 * 366 * SECS_PER_DAY)
    bad_argument("ttl must be between 1 second and 10 years");
  char *sub = PG_ARGISNULL(2) ? nullptr : text_to_cstring(PG_GETARG_TEXT_PP(2));
  if (sub && !pgbs::auth::valid_subscriber_id(sub, nullptr))
    bad_argument("sub must be 1 to 128 bytes of letters, digits, -_.:@|+=/ or non-ASCII "
                 "characters");
  char *ctx = nullptr;
  if (!PG_ARGISNULL(3)) {
    Jsonb *jb = PG_GETARG_JSONB_P(3);
    if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
      bad_argument("ctx must be a JSON object");
    ctx = JsonbToCString(nullptr, &jb->root, VARSIZE(jb));
  }
  const int64 now_s = (int64)(GetCurrentTimestamp() / USECS_PER_SEC) +
                      (int64)(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
  const int64 exp = now_s + (int64)seconds;
  return pgbs::pg::entry([&]() -> Datum {
    std::string secret, err;
    if (!pgbs::auth::resolve_secret(setting, &secret, &err))
      throw std::runtime_error("pgbus_stream.jwt_secret: " + err);
    std::vector<std::string> streams(names, names + n);
    const std::string token = pgbs::auth::sign_jwt(
        streams, now_s, exp, sub ? std::optional<std::string>(sub) : std::nullopt, ctx ? ctx : "",
        secret);
    if (token.size() > pgbs::auth::kMaxCredentialBytes)
      throw std::runtime_error("token longer than 8192 bytes (fewer streams or a smaller ctx)");
    text *out = nullptr;
    pgbs::pg::call([&] { out = cstring_to_text_with_len(token.data(), (int)token.size()); });
    return PointerGetDatum(out);
  });
}
