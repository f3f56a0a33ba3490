// Unit tests for core/sse: the frames a browser's EventSource will parse.
#include "core/sse.hpp"
#include "sse_reference.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

using pgbs::sse::append_comment;
using pgbs::sse::append_event;
using pgbs::sse::append_retry;
using pgbs::sse::json_escape;
using namespace std::string_literals;

namespace {

std::string event(std::string_view id, std::string_view ev, std::string_view data) {
  std::string out;
  append_event(out, id, ev, data);
  return out;
}

std::string data_only(std::string_view data) { return event("", "", data); }

} // namespace

TEST(SseEvent, IdEventAndData) {
  EXPECT_EQ(event("42", "turbo-stream", "hello"), "id: 42\nevent: turbo-stream\ndata: hello\n\n");
}

TEST(SseEvent, IdAndEventOmittedWhenEmpty) {
  EXPECT_EQ(event("", "", "x"), "data: x\n\n");
  EXPECT_EQ(event("7", "", "x"), "id: 7\ndata: x\n\n");
  EXPECT_EQ(event("", "ping", "x"), "event: ping\ndata: x\n\n");
}

TEST(SseEvent, EmptyPayloadIsOneEmptyDataLine) { EXPECT_EQ(data_only(""), "data: \n\n"); }

TEST(SseEvent, SplitsOnLf) { EXPECT_EQ(data_only("a\nb"), "data: a\ndata: b\n\n"); }

TEST(SseEvent, SplitsOnCrLf) { EXPECT_EQ(data_only("a\r\nb"), "data: a\ndata: b\n\n"); }

TEST(SseEvent, SplitsOnCr) { EXPECT_EQ(data_only("a\rb"), "data: a\ndata: b\n\n"); }

TEST(SseEvent, LfCrIsTwoBreaks) { EXPECT_EQ(data_only("a\n\rb"), "data: a\ndata: \ndata: b\n\n"); }

TEST(SseEvent, MixedBreaks) {
  EXPECT_EQ(data_only("a\r\n\r\nb\rc\nd"), "data: a\ndata: \ndata: b\ndata: c\ndata: d\n\n");
}

TEST(SseEvent, TrailingNewlineKept) {
  EXPECT_EQ(data_only("a\n"), "data: a\ndata: \n\n");
  EXPECT_EQ(data_only("a\r\n"), "data: a\ndata: \n\n");
  EXPECT_EQ(data_only("a\r"), "data: a\ndata: \n\n");
}

TEST(SseEvent, OnlyLineBreaks) {
  EXPECT_EQ(data_only("\n"), "data: \ndata: \n\n");
  EXPECT_EQ(data_only("\r\n"), "data: \ndata: \n\n");
  EXPECT_EQ(data_only("\n\n"), "data: \ndata: \ndata: \n\n");
}

TEST(SseEvent, LeadingSpacesKept) {
  // The parser strips exactly one space after the colon, which is ours.
  EXPECT_EQ(data_only("  x"), "data:   x\n\n");
  auto p = pgbs::test::sse_parse(data_only("  x"));
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].data, "  x");
}

TEST(SseEvent, NulDropped) {
  EXPECT_EQ(data_only("a\0b"s), "data: ab\n\n");
  EXPECT_EQ(data_only("\0"s), "data: \n\n");
  // A NUL between CR and LF does not turn one break into two.
  EXPECT_EQ(data_only("a\r\0\nb"s), "data: a\ndata: b\n\n");
  EXPECT_EQ(data_only("a\n\0\nb"s), "data: a\ndata: \ndata: b\n\n");
}

TEST(SseEvent, Utf8PassesThrough) {
  const std::string s = "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80";
  EXPECT_EQ(data_only(s), "data: " + s + "\n\n");
  // Invalid UTF-8 is not ours to fix: bytes pass as they are.
  EXPECT_EQ(data_only("\xff\xfe\x80"), "data: \xff\xfe\x80\n\n");
}

TEST(SseEvent, IdAndEventCannotSplitTheFrame) {
  EXPECT_EQ(event("4\r\n2", "a\nb", "x"), "id: 42\nevent: ab\ndata: x\n\n");
  EXPECT_EQ(event("4\0"s
                  "2",
                  "e\r", "x"),
            "id: 42\nevent: e\ndata: x\n\n");
  // Nothing left after cleaning: omitted (an empty "id:" would reset lastEventId).
  EXPECT_EQ(event("\r\n", "\n", "x"), "data: x\n\n");
}

TEST(SseEvent, AppendsToExistingBuffer) {
  std::string out = "retry: 1\n\n";
  append_event(out, "1", "", "a");
  append_event(out, "2", "", "b");
  EXPECT_EQ(out, "retry: 1\n\nid: 1\ndata: a\n\nid: 2\ndata: b\n\n");
}

TEST(SseEvent, PayloadCannotInjectEvents) {
  const std::string evil = "x\n\nid: 99\nevent: evil\ndata: y\r\rretry: 1\n: c";
  auto p = pgbs::test::sse_parse(event("42", "turbo-stream", evil));
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].last_event_id, "42");
  EXPECT_EQ(p.events[0].type, "turbo-stream");
  EXPECT_EQ(p.events[0].data, pgbs::test::sse_expected_data(evil));
  EXPECT_EQ(p.retry, -1);
  EXPECT_TRUE(p.comments.empty());
  EXPECT_EQ(p.blank_lines, 1u);
}

TEST(SseEvent, RandomPayloadsRoundTripThroughAReferenceParser) {
  std::mt19937 rng(12345);
  const char alphabet[] = {'a', 'b', ' ', ':', '\r', '\n', '\0', '\xc3', '\xa9', 'd', 'i'};
  for (int iter = 0; iter < 5000; ++iter) {
    std::string payload;
    const size_t n = rng() % 24;
    for (size_t i = 0; i < n; ++i)
      payload.push_back(alphabet[rng() % sizeof alphabet]);
    std::string out;
    append_event(out, std::to_string(iter), "e", payload);
    auto p = pgbs::test::sse_parse(out);
    ASSERT_EQ(p.events.size(), 1u) << testing::PrintToString(payload);
    EXPECT_EQ(p.events[0].data, pgbs::test::sse_expected_data(payload))
        << testing::PrintToString(payload);
    EXPECT_EQ(p.events[0].last_event_id, std::to_string(iter));
    EXPECT_EQ(p.blank_lines, 1u);
    EXPECT_TRUE(p.pending_data.empty());
  }
}

TEST(SseComment, Plain) {
  std::string out;
  append_comment(out, "heartbeat 1700000000");
  EXPECT_EQ(out, ": heartbeat 1700000000\n\n");
}

TEST(SseComment, Empty) {
  std::string out;
  append_comment(out, "");
  EXPECT_EQ(out, ": \n\n");
}

TEST(SseComment, NoLineBreaksOrNul) {
  std::string out;
  append_comment(out, "a\r\nb\0c\rd\ne"s);
  EXPECT_EQ(out, ": a  b c d e\n\n");
  auto p = pgbs::test::sse_parse(out);
  EXPECT_TRUE(p.events.empty());
  ASSERT_EQ(p.comments.size(), 1u);
}

TEST(SseRetry, Values) {
  std::string out;
  append_retry(out, 2000);
  EXPECT_EQ(out, "retry: 2000\n\n");
  out.clear();
  append_retry(out, 0);
  EXPECT_EQ(out, "retry: 0\n\n");
  out.clear();
  append_retry(out, -5); // browsers ignore a non-digit retry; send 0 instead
  EXPECT_EQ(out, "retry: 0\n\n");
  EXPECT_EQ(pgbs::test::sse_parse("retry: 2000\n\n").retry, 2000);
}

TEST(SseJsonEscape, Escapes) {
  EXPECT_EQ(json_escape(""), "");
  EXPECT_EQ(json_escape("plain"), "plain");
  EXPECT_EQ(json_escape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(json_escape("\n\r\t\b\f"), "\\n\\r\\t\\b\\f");
  EXPECT_EQ(json_escape("\x01\x1f"), "\\u0001\\u001f");
  EXPECT_EQ(json_escape("\0"s), "\\u0000");
  EXPECT_EQ(json_escape("/\x7f"), "/\x7f");
  EXPECT_EQ(json_escape("h\xc3\xa9"), "h\xc3\xa9");
}

TEST(SseJsonEscape, OutputHasNoControlCharacters) {
  std::string all;
  for (int c = 0; c < 256; ++c)
    all.push_back(static_cast<char>(c));
  for (char c : json_escape(all))
    EXPECT_GE(static_cast<unsigned char>(c), 0x20);
}
