// The pgbus gem's framing (one data line, CR/LF removed) and its derivation
// from a split-line frame.
#include "core/sse.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

using namespace pgbs::sse;

namespace {

std::string one_line(std::string_view id, std::string_view ev, std::string_view data) {
  std::string out;
  append_event_one_line(out, id, ev, data);
  return out;
}

std::string lines(std::string_view ev, std::string_view data) {
  std::string out;
  append_event(out, "", ev, data);
  return out;
}

} // namespace

TEST(SseOneLine, GemBytes) {
  EXPECT_EQ(one_line("", "turbo-stream", "<li>\n    Hello\r\n    world\r  </li>"),
            "event: turbo-stream\ndata: <li>    Hello    world  </li>\n\n");
  EXPECT_EQ(one_line("7", "turbo-stream", ""), "id: 7\nevent: turbo-stream\ndata: \n\n");
  EXPECT_EQ(one_line("", "", "\n\n\r"), "data: \n\n");
  EXPECT_EQ(one_line("", "x", std::string("a\0b", 3)), "event: x\ndata: ab\n\n");
}

TEST(SseOneLine, NothingAPayloadHoldsEndsTheFrame) {
  const std::string f = one_line("", "turbo-stream", "a\n\nid: 9\n\nevent: x\r\rdata: y");
  EXPECT_EQ(f, "event: turbo-stream\ndata: aid: 9event: xdata: y\n\n");
  EXPECT_EQ(f.find("\n\n"), f.size() - 2);
}

TEST(SseOneLine, DerivedFromTheSplitFrame) {
  std::mt19937 rng(42);
  const char alphabet[] = {'a', ' ', '\n', '\r', '\0', ':', 'd'};
  for (int i = 0; i < 20000; i++) {
    std::string data;
    const int n = (int)(rng() % 12);
    for (int k = 0; k < n; k++)
      data.push_back(alphabet[rng() % sizeof alphabet]);
    const std::string ev = i % 3 == 0 ? "" : "turbo-stream";
    const std::string split = lines(ev, data);
    ASSERT_EQ(one_line_frame(split), one_line("", ev, data)) << i;
    const bool single = data.find_first_of(std::string("\r\n", 2)) == std::string::npos;
    ASSERT_EQ(has_one_data_line(split), single) << i;
    if (single) {
      ASSERT_EQ(one_line_frame(split), split);
    }
  }
}

TEST(SseOneLine, PayloadLineThatLooksLikeAField) {
  const std::string split = lines("e", "data: x\ndata: y");
  EXPECT_EQ(one_line_frame(split), "event: e\ndata: data: xdata: y\n\n");
  EXPECT_FALSE(has_one_data_line(split));
}
