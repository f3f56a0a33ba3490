// Text helpers shared by every layer: trimming and "*" globs. The one
// implementation of each; names, credentials and the HTTP parser call them.
// Pure C++, no PostgreSQL.
#pragma once
#include "core/no_postgres.hpp"

#include <string_view>

namespace pgbs::text {

// `s` without the leading and trailing characters found in `chars` (by
// default spaces and tabs, HTTP's optional whitespace).
std::string_view trim(std::string_view s, std::string_view chars = " \t");

enum class Case { Sensitive, Insensitive };

// Whether `s` matches `pattern`, where "*" stands for any run of characters
// (also none) and every other character for itself; Insensitive folds ASCII
// letters only. Iterative with one backtrack point: never recursive, and
// linear in practice even for patterns of many stars.
bool glob(std::string_view pattern, std::string_view s, Case c = Case::Sensitive);

} // namespace pgbs::text
