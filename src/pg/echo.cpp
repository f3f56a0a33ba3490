#include "pg/echo.hpp"
#include "core/names.hpp"

#include <string>

extern "C" {
#include "postgres.h"
#include "utils/palloc.h"
}

#include "pg/guard.hpp"

namespace pgbs::pg {

char *echo(std::string_view text) {
  char *out = nullptr;
  entry([&]() -> Datum {
    const std::string e = names::echo(text);
    call([&] { out = pnstrdup(e.data(), e.size()); });
    return (Datum)0;
  });
  return out;
}

} // namespace pgbs::pg
