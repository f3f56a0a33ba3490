// What an error message shows of a caller's text (core/names.hpp, echo):
// every error that quotes an argument goes through it, so no argument's
// size reaches the log.
#pragma once
#include <string_view>

namespace pgbs::pg {
// names::echo(text), palloc'd in the current memory context.
char *echo(std::string_view text);
} // namespace pgbs::pg
