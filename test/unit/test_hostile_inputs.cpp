// Unit tests for inputs that once crashed or stalled something: logical
// names the gem's normalisation empties, error echoes of huge arguments, and
// rows decoded from the row source's text cells (engine/row_decode).
#include "core/auth.hpp"
#include "core/names.hpp"
#include "engine/row_decode.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

using namespace pgbs;

TEST(HostileNames, NormalisedToNothingIsRefused) {
  for (const char *name : {":", "...", "/", "-", "\xc3\xa9", "_:", "::::", " "}) {
    names::QueueNameError err = names::QueueNameError::None;
    EXPECT_EQ(names::queue_name(name, &err), "") << name;
    EXPECT_EQ(err, names::QueueNameError::Empty) << name;
    EXPECT_EQ(auth::gem_stream_name(name), "") << name; // no exception
  }
  EXPECT_EQ(auth::gem_stream_name("_"), "_"); // "pgbus__" is a queue the gem makes
  EXPECT_EQ(auth::gem_stream_name("a:"), "a");
}

TEST(HostileNames, EchoIsCapped) {
  EXPECT_EQ(names::echo("short"), "short");
  const std::string huge(10 * 1024 * 1024, 'a');
  const std::string e = names::echo(huge);
  EXPECT_EQ(e, std::string(64, 'a') + "... (10485760 bytes)");
  // Never cut inside a UTF-8 character.
  std::string utf(63, 'a');
  utf += "\xc3\xa9\xc3\xa9";
  EXPECT_EQ(names::echo(utf), std::string(63, 'a') + "... (67 bytes)");
}

TEST(RowDecode, Integers) {
  int64_t v = 0;
  EXPECT_TRUE(engine::parse_i64("9223372036854775807", &v));
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_TRUE(engine::parse_i64("-9223372036854775808", &v));
  EXPECT_EQ(v, INT64_MIN);
  EXPECT_TRUE(engine::parse_i64("0", &v));
  EXPECT_EQ(v, 0);
  for (const char *bad : {"", "-", "9223372036854775808", "-9223372036854775809",
                          "99999999999999999999", "1e3", " 1", "1.5", "+1", "Infinity"})
    EXPECT_FALSE(engine::parse_i64(bad, &v)) << bad;
}

TEST(RowDecode, CellsToRow) {
  using Cell = std::optional<std::string>;
  std::vector<Cell> cells = {Cell("42"), Cell("<p>x</p>"), Cell("ev"), std::nullopt,
                             Cell("9223372036854775807"), Cell("00000000000000ff")};
  engine::Row row;
  ASSERT_TRUE(engine::decode_row(cells.data(), (int)cells.size(), &row));
  EXPECT_EQ(row.msg_id, 42);
  EXPECT_EQ(row.data, "<p>x</p>");
  EXPECT_EQ(row.event, Cell("ev"));
  EXPECT_FALSE(row.visible_to);
  EXPECT_EQ(row.enqueued_us, INT64_MAX);
  EXPECT_EQ(row.exclude, 0xffu);
  EXPECT_FALSE(row.unreadable);
  // Cells that cannot be read take their defaults; the row stays.
  cells[4] = Cell("infinity");
  cells[5] = Cell("not-an-id");
  ASSERT_TRUE(engine::decode_row(cells.data(), (int)cells.size(), &row));
  EXPECT_EQ(row.enqueued_us, 0);
  EXPECT_EQ(row.exclude, 0u);
  // Without a usable id there is no row.
  for (Cell id : {std::optional<std::string>(), Cell("x"), Cell("99999999999999999999")}) {
    cells[0] = id;
    EXPECT_FALSE(engine::decode_row(cells.data(), (int)cells.size(), &row));
  }
  EXPECT_FALSE(engine::decode_row(cells.data(), 0, &row));
  cells[0] = Cell("7");
  ASSERT_TRUE(engine::decode_row(cells.data(), 1, &row)); // fewer columns: defaults
  EXPECT_EQ(row.msg_id, 7);
  EXPECT_EQ(row.data, "");
}
