// libFuzzer target for engine/row_decode: any text in the cells of a
// stream's rows query (a queue row is a producer's input) decodes to a row
// or to none, never throws; a decoded row's msg_id is the first cell's
// integer, and parse_i64 accepts exactly the canonical decimal of an int64.
#include "engine/row_decode.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace pgbs;

namespace {

void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz_row_decode: %s\n", what);
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Cells separated by '\x1f'; '\x1e' alone is a NULL cell.
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  std::vector<std::optional<std::string>> cells;
  size_t start = 0;
  while (cells.size() < 8) {
    const size_t end = in.find('\x1f', start);
    const std::string_view cell = in.substr(start, end == std::string_view::npos ? in.npos : end - start);
    if (cell == "\x1e")
      cells.emplace_back();
    else
      cells.emplace_back(std::string(cell));
    if (end == std::string_view::npos)
      break;
    start = end + 1;
  }
  engine::Row row;
  const bool ok = engine::decode_row(cells.data(), (int)cells.size(), &row);
  int64_t id = 0;
  const bool id_ok = cells[0] && engine::parse_i64(*cells[0], &id);
  check(ok == id_ok, "a row exactly when its id parses");
  if (ok)
    check(row.msg_id == id && !row.unreadable, "decoded id");
  if (id_ok) {
    const std::string canon = std::to_string(id);
    check(*cells[0] == canon || (cells[0]->size() > 1 && (*cells[0])[0] == '0') ||
              (cells[0]->size() > 2 && cells[0]->compare(0, 2, "-0") == 0) || *cells[0] == "-0",
          "only decimal text parses");
    int64_t again = 0;
    check(engine::parse_i64(canon, &again) && again == id, "round trip");
  }
  return 0;
}
