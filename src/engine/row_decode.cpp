// Text cells of a stream's rows query to a Row (see row_decode.hpp).
#include "engine/row_decode.hpp"

#include "core/wire.hpp"

#include <cstdint>

namespace pgbs::engine {

bool parse_i64(std::string_view text, int64_t *out) {
  bool neg = false;
  size_t i = 0;
  if (!text.empty() && text[0] == '-') {
    neg = true;
    i = 1;
  }
  if (i == text.size() || text.size() - i > 19)
    return false;
  uint64_t v = 0;
  for (; i < text.size(); i++) {
    const char c = text[i];
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + static_cast<uint64_t>(c - '0'); // at most 19 digits: no wrap
  }
  const uint64_t limit = neg ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
  if (v > limit)
    return false;
  *out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

namespace {
template <typename Cell> bool decode(Cell *cells, int ncols, Row *out) {
  *out = Row();
  if (ncols < 1 || !cells[0] || !parse_i64(*cells[0], &out->msg_id))
    return false;
  auto cell = [&](int i) -> const std::optional<std::string> * {
    return i < ncols ? &cells[i] : nullptr;
  };
  if (ncols > 1 && cells[1])
    out->data = std::move(*cells[1]); // a copy when the cells are const
  if (const auto *c = cell(2))
    out->event = *c;
  if (const auto *c = cell(3))
    out->visible_to = *c;
  if (const auto *c = cell(4); c && *c && !parse_i64(**c, &out->enqueued_us))
    out->enqueued_us = 0;
  if (const auto *c = cell(5); c && *c && !wire::parse_connection_id(**c, &out->exclude))
    out->exclude = 0;
  return true;
}
} // namespace

bool decode_row(const std::optional<std::string> *cells, int ncols, Row *out) {
  return decode(cells, ncols, out);
}

bool decode_row_taking(std::optional<std::string> *cells, int ncols, Row *out) {
  return decode(cells, ncols, out);
}

} // namespace pgbs::engine
