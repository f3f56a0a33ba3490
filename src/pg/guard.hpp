// The two wrappers at the PostgreSQL/C++ boundary (STYLE.md, "two zones").
//
//  * pg::entry() wraps every entry from PostgreSQL into C++ (SQL function,
//    trigger, worker main). The C++ body runs inside try; a caught exception is
//    turned into ereport(ERROR) only after the try scope has ended, so every
//    destructor has run before PostgreSQL longjmps.
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
#include "utils/elog.h"
#include "utils/memutils.h"
}

namespace pgbs::pg {

// A PostgreSQL error caught by pg::call(): the copied ErrorData travels with it
// so that pg::entry() can rethrow it with its SQLSTATE intact.
class Error : public std::exception {
public:
  explicit Error(ErrorData *edata) : edata_(edata) {}
  const char *what() const noexcept override {
    return edata_ && edata_->message ? edata_->message : "postgres error";
  }
  ErrorData *data() const { return edata_; }

private:
  ErrorData *edata_;
};

template <typename F> void call(F &&fn) {
  MemoryContext oldcxt = CurrentMemoryContext;
  ErrorData *volatile edata = nullptr;
  PG_TRY();
  {
    fn();
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(oldcxt);
    edata = CopyErrorData();
    FlushErrorState();
  }
  PG_END_TRY();
  if (edata != nullptr)
    throw Error(edata);
}

// Runs a C++ body called from PostgreSQL. Returns its value; any exception
// becomes ereport(ERROR) after all C++ frames are gone.
template <typename F> Datum entry(F &&fn) {
  ErrorData *pg_error = nullptr;
  char message[512];
  message[0] = '\0';
  Datum result = (Datum)0;
  try {
    result = fn();
  } catch (const Error &e) {
    pg_error = e.data();
  } catch (const std::exception &e) {
    strlcpy(message, e.what(), sizeof(message));
  } catch (...) {
    strlcpy(message, "unknown C++ exception", sizeof(message));
  }
  if (pg_error != nullptr)
    ReThrowError(pg_error);
  if (message[0] != '\0')
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("pgbus_stream: %s", message)));
  return result;
}

} // namespace pgbs::pg
