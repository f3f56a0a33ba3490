// The two wrappers at the PostgreSQL/C++ boundary (docs/ARCHITECTURE.md,
// "C++ inside PostgreSQL").
//
//  * pg::entry() wraps an entry from PostgreSQL into C++ code that may throw
//    or hold objects with destructors: every C SQL function (through
//    PGBS_SQL_FUNCTION below, which cannot be forgotten), the stream check of
//    capture triggers, and the module's _PG_init and shmem_request steps.
//    The C++ body runs inside try; a caught exception is turned into
//    ereport(ERROR) only after the try scope has ended, so every destructor
//    has run before PostgreSQL longjmps. Hooks and callbacks written in
//    PostgreSQL's C API alone need none, and the worker's main catches at
//    its own entry (pgbus_stream_worker_main).
//  * pg::call() wraps every call from C++ into a PostgreSQL API that can
//    elog(ERROR). It catches the longjmp, restores the memory context, keeps
//    the ErrorData and throws pg::Error, so no longjmp crosses a C++ frame.
//    The callable must hold no objects with non-trivial destructors.
//
// Include after the C++ headers and after postgres.h (this file needs it).
#pragma once

#include <exception>
#include <string>
#include <utility>

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/elog.h"
#include "utils/memutils.h"
}

namespace pgbs::pg {

// A PostgreSQL error caught by pg::call(). What it says is copied into the
// exception itself: the ErrorData was palloc'd in whatever context was
// current, which unwinding may delete (a SpiTx aborting its transaction), and
// outside a transaction nothing would ever free it. pg::entry() raises it
// again with its SQLSTATE, detail and hint.
class Error : public std::exception {
public:
  explicit Error(const ErrorData *e)
      : sqlerrcode_(e->sqlerrcode), message_(e->message ? e->message : "postgres error"),
        detail_(e->detail ? e->detail : ""), hint_(e->hint ? e->hint : "") {}
  const char *what() const noexcept override { return message_.c_str(); }
  int sqlerrcode() const { return sqlerrcode_; }
  const std::string &detail() const { return detail_; }
  const std::string &hint() const { return hint_; }

private:
  int sqlerrcode_;
  std::string message_, detail_, hint_;
};

// Copies the error being handled into an Error and forgets it in
// PostgreSQL (its ErrorData copy is freed at once).
Error take_error(MemoryContext cxt);

// Makes the memory context take_error() copies into (from _PG_init).
void init_error_copy();

template <typename F> void call(F &&fn) {
  MemoryContext oldcxt = CurrentMemoryContext;
  volatile bool failed = false;
  PG_TRY();
  { fn(); }
  PG_CATCH();
  { failed = true; }
  PG_END_TRY();
  if (failed)
    throw take_error(oldcxt);
}

// Runs a C++ body called from PostgreSQL. Returns its value; any exception
// becomes ereport(ERROR) after all C++ frames are gone (the texts travel in
// fixed buffers, so nothing with a destructor is skipped by the longjmp).
template <typename F> Datum entry(F &&fn) {
  int code = 0;
  char message[1024], detail[1024], hint[512];
  message[0] = detail[0] = hint[0] = '\0';
  Datum result = (Datum)0;
  try {
    result = fn();
  } catch (const Error &e) {
    code = e.sqlerrcode();
    strlcpy(message, e.what(), sizeof(message));
    strlcpy(detail, e.detail().c_str(), sizeof(detail));
    strlcpy(hint, e.hint().c_str(), sizeof(hint));
  } catch (const std::exception &e) {
    code = ERRCODE_INTERNAL_ERROR;
    snprintf(message, sizeof(message), "pgbus_stream: %s", e.what());
  } catch (...) {
    code = ERRCODE_INTERNAL_ERROR;
    strlcpy(message, "pgbus_stream: unknown C++ exception", sizeof(message));
  }
  if (code != 0)
    ereport(ERROR,
            (errcode(code), errmsg_internal("%s", message),
             detail[0] ? errdetail_internal("%s", detail) : 0, hint[0] ? errhint("%s", hint) : 0));
  return result;
}

} // namespace pgbs::pg

// PGBS_SQL_FUNCTION(name) { body } defines the C SQL function `name` (the
// symbol an install script names after 'MODULE_PATHNAME'): it declares
// PG_FUNCTION_INFO_V1(name) and runs the body, which sees `fcinfo` as usual,
// inside pg::entry(). Every C SQL function is written this way
// (test/lint/sql_functions.pl checks it), so none can forget the boundary.
// What the body holds when it calls a PostgreSQL API that can elog(ERROR)
// must have trivial destructors, or the call goes through pg::call().
#define PGBS_SQL_FUNCTION(name)                                                                    \
  static Datum name##_body(PG_FUNCTION_ARGS);                                                      \
  extern "C" {                                                                                     \
  PG_FUNCTION_INFO_V1(name);                                                                       \
  }                                                                                                \
  extern "C" Datum name(PG_FUNCTION_ARGS) {                                                        \
    return ::pgbs::pg::entry([fcinfo]() -> Datum { return name##_body(fcinfo); });                 \
  }                                                                                                \
  static Datum name##_body(PG_FUNCTION_ARGS)
