// A small strict JSON reader for credentials (JWT headers and claims, Rails
// message envelopes). Pure C++, no PostgreSQL.
//
// Strict on purpose: the input must be valid UTF-8, one value with nothing
// after it, no duplicate object keys (a claim must not mean two things), at
// most kMaxDepth levels. Every value keeps its source text (`raw`), so an
// object such as a JWT's ctx can be handed on unchanged.
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pgbs::auth::json {

constexpr int kMaxDepth = 16;

struct Value {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0;
  std::string str; // String: the decoded text
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;
  std::string_view raw; // the value's JSON text inside the parsed input

  bool is(Type t) const { return type == t; }
  // The member named key of an object, or nullptr.
  const Value *get(std::string_view key) const;
};

// Parses `text` (which must outlive *out: raw points into it). False with a
// short reason on any syntax error.
bool parse(std::string_view text, Value *out, std::string *err);

// `s` as a JSON string literal (quotes included; control characters, '"'
// and '\\' escaped, other bytes as they are).
std::string quote(std::string_view s);

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(std::string_view s);

} // namespace pgbs::auth::json
