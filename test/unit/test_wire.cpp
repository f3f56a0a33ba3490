// Unit tests for core/wire: the event-name rule, connection ids and every
// control frame, byte for byte as clients (the pgbus gem, browsers) see them.
#include "core/wire.hpp"
#include "sse_reference.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace pgbs::wire;
using namespace std::string_literals;

TEST(WireEventName, Valid) {
  EXPECT_TRUE(valid_event_name("turbo-stream"));
  EXPECT_TRUE(valid_event_name("pgbus:connected"));
  EXPECT_TRUE(valid_event_name("a"));
  EXPECT_TRUE(valid_event_name("!#$%&'*+-./:;<=>?@[]^_`{|}~"));
  EXPECT_TRUE(valid_event_name(std::string(kMaxEventName, 'x')));
}

TEST(WireEventName, Invalid) {
  EXPECT_FALSE(valid_event_name(""));
  EXPECT_FALSE(valid_event_name(std::string(kMaxEventName + 1, 'x')));
  EXPECT_FALSE(valid_event_name("a b"));
  EXPECT_FALSE(valid_event_name("a\nb"));
  EXPECT_FALSE(valid_event_name("a\rb"));
  EXPECT_FALSE(valid_event_name("a\tb"));
  EXPECT_FALSE(valid_event_name("a\0b"s));
  EXPECT_FALSE(valid_event_name("a\x7f"));
  EXPECT_FALSE(valid_event_name("\xc3\xa9"));
  EXPECT_FALSE(valid_event_name(" "));
}

TEST(WireEventName, ControlFramesFollowIt) {
  for (std::string_view e : {kConnected, kGapDetected, kShutdown, kPresence})
    EXPECT_TRUE(valid_event_name(e)) << e;
}

TEST(WireConnectionId, Format) {
  EXPECT_EQ(connection_id(255), "00000000000000ff");
  EXPECT_EQ(connection_id(UINT64_MAX), "ffffffffffffffff");
  char buf[kConnectionIdLen + 1];
  format_connection_id(0x0123456789abcdefull, buf);
  EXPECT_STREQ(buf, "0123456789abcdef");
}

TEST(WireConnectionId, Parse) {
  uint64_t id = 0;
  ASSERT_TRUE(parse_connection_id("00000000000000ff", &id));
  EXPECT_EQ(id, 255u);
  ASSERT_TRUE(parse_connection_id("ffffffffffffffff", &id));
  EXPECT_EQ(id, UINT64_MAX);
  id = 7;
  EXPECT_FALSE(parse_connection_id("0000000000000000", &id)); // no connection has id 0
  EXPECT_FALSE(parse_connection_id("00000000000000FF", &id)); // lowercase only
  EXPECT_FALSE(parse_connection_id("ff", &id));
  EXPECT_FALSE(parse_connection_id("000000000000000ff", &id));
  EXPECT_FALSE(parse_connection_id("00000000000000fg", &id));
  EXPECT_FALSE(parse_connection_id("", &id));
  EXPECT_EQ(id, 7u) << "a refused text leaves the id alone";
}

TEST(WireConnectionId, RoundTrip) {
  for (uint64_t v : {1ull, 0xabcull, 0x8000000000000000ull, 0x632be59bd9b4e019ull}) {
    uint64_t back = 0;
    ASSERT_TRUE(parse_connection_id(connection_id(v), &back));
    EXPECT_EQ(back, v);
  }
}

TEST(WireFrames, Connected) {
  EXPECT_EQ(connected_frame(0x2a),
            "event: pgbus:connected\ndata: {\"connectionId\":\"000000000000002a\"}\n\n");
}

TEST(WireFrames, Shutdown) {
  EXPECT_EQ(shutdown_frame("worker_restart"),
            "event: pgbus:shutdown\ndata: {\"reason\":\"worker_restart\"}\n\n");
  EXPECT_EQ(shutdown_frame("a\"b\n"),
            "event: pgbus:shutdown\ndata: {\"reason\":\"a\\\"b\\n\"}\n\n");
}

TEST(WireFrames, Presence) {
  EXPECT_EQ(presence_change_frame("chat", "u\"1"s, true, 2),
            "event: pgbus:presence\ndata: "
            "{\"stream\":\"chat\",\"action\":\"join\",\"sub\":\"u\\\"1\",\"count\":2}\n\n");
  EXPECT_EQ(presence_change_frame("chat", std::nullopt, false, 0),
            "event: pgbus:presence\ndata: "
            "{\"stream\":\"chat\",\"action\":\"leave\",\"sub\":null,\"count\":0}\n\n");
  EXPECT_EQ(presence_snapshot_frame("chat", {}),
            "event: pgbus:presence\ndata: "
            "{\"stream\":\"chat\",\"action\":\"snapshot\",\"members\":[]}\n\n");
  EXPECT_EQ(presence_snapshot_frame("chat", {{std::nullopt, 3}, {"b"s, 1}}),
            "event: pgbus:presence\ndata: {\"stream\":\"chat\",\"action\":\"snapshot\","
            "\"members\":[{\"sub\":null,\"count\":3},{\"sub\":\"b\",\"count\":1}]}\n\n");
}

namespace {

// The data of a gap notice of stream "s" resuming at "tok".
std::string notice(Gap g) {
  g.stream = "s";
  g.resume = Gap::Resume::Cursor;
  g.cursor = "tok";
  const std::string frame = gap_frame(g);
  const pgbs::test::SseParse p = pgbs::test::sse_parse(frame);
  EXPECT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].type, "pgbus:gap-detected");
  const std::string head = "event: pgbus:gap-detected\ndata: ";
  EXPECT_EQ(frame.compare(0, head.size(), head), 0) << "no id line: " << frame;
  return p.events[0].data;
}

} // namespace

TEST(WireGap, EachReason) {
  EXPECT_EQ(notice(Gap::ids_gone(GapReason::Deleted, {4, 7})),
            R"({"stream":"s","reason":"deleted","ids":[4,7],"resume":"tok"})");
  EXPECT_EQ(notice(Gap::ids_gone(GapReason::Late, {9})),
            R"({"stream":"s","reason":"late","ids":[9],"resume":"tok"})");
  EXPECT_EQ(notice(Gap::ids_gone(GapReason::Unreadable, {3})),
            R"({"stream":"s","reason":"unreadable","ids":[3],"resume":"tok"})");
  EXPECT_EQ(notice(Gap::lost(5)),
            R"({"stream":"s","reason":"ephemeral-overrun","lost":5,"resume":"tok"})");
  EXPECT_EQ(notice(Gap::retention(12)),
            R"({"stream":"s","reason":"retention","oldest":12,"resume":"tok"})");
  EXPECT_EQ(notice(Gap::retention(std::nullopt)),
            R"({"stream":"s","reason":"retention","oldest":null,"resume":"tok"})");
  EXPECT_EQ(notice(Gap(GapReason::EphemeralExpired)),
            R"({"stream":"s","reason":"ephemeral-expired","resume":"tok"})");
}

TEST(WireGap, AtStartHasNoResume) {
  Gap g(GapReason::StreamRecreated);
  g.stream = "a\"b";
  EXPECT_EQ(gap_frame(g), "event: pgbus:gap-detected\ndata: "
                          "{\"stream\":\"a\\\"b\",\"reason\":\"stream-recreated\"}\n\n");
}

TEST(WireGap, OverflowNamesNoStream) {
  EXPECT_EQ(gap_frame(Gap::overflow(3, std::nullopt)),
            "event: pgbus:gap-detected\ndata: "
            "{\"reason\":\"overflow\",\"dropped\":3,\"resume\":null}\n\n");
  EXPECT_EQ(gap_frame(Gap::overflow(1, std::string_view("41"))),
            "event: pgbus:gap-detected\ndata: "
            "{\"reason\":\"overflow\",\"dropped\":1,\"resume\":\"41\"}\n\n");
}

TEST(WireGap, ReasonNames) {
  EXPECT_STREQ(gap_reason_name(GapReason::Overflow), "overflow");
  EXPECT_STREQ(gap_reason_name(GapReason::StreamRecreated), "stream-recreated");
  EXPECT_STREQ(gap_reason_name(GapReason::EphemeralOverrun), "ephemeral-overrun");
}
