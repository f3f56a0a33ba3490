// A stream's row as the row source reads it (text cells: msg_id, data,
// event, visible_to, enqueued_us, exclude; the message's parts as
// pg/envelope.hpp reads them) turned into a Row. Whatever a cell holds, nothing
// here throws: a queue row is a producer's input. Plain C++, no PostgreSQL.
#pragma once
#include "engine/interfaces.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace pgbs::engine {

// A decimal int64 ("-12", "42"), nothing else; false on anything else or
// out of range (no exception, unlike std::stoll).
bool parse_i64(std::string_view text, int64_t *out);

// One row from ncols cells. False when the row has no usable msg_id (no id
// to name it by): the caller leaves it out. Other cells that cannot be read
// take their defaults (no event, enqueued_us 0, no exclude).
bool decode_row(const std::optional<std::string> *cells, int ncols, Row *out);
// The same, taking the payload cell's bytes instead of copying them (a
// large payload is not held twice).
bool decode_row_taking(std::optional<std::string> *cells, int ncols, Row *out);

} // namespace pgbs::engine
