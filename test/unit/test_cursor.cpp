// Unit tests for core/cursor: token grammar, normalisation, bounds, and a
// randomised model check of StreamPosition.
#include "core/cursor.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>
#include <string>

using namespace pgbs::cursor;
using Ranges = std::vector<std::pair<int64_t, int64_t>>;
using namespace std::string_literals;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

StreamPosition must_parse_stream(std::string_view text) {
  StreamPosition p;
  std::string err;
  EXPECT_TRUE(parse_stream(text, &p, &err)) << text << ": " << err;
  return p;
}

std::string encoded(const StreamPosition &p) {
  std::string s;
  p.encode(s);
  return s;
}

std::string reject_reason(std::string_view text) {
  Cursor c;
  std::string err;
  EXPECT_FALSE(parse(text, &c, &err)) << testing::PrintToString(std::string(text));
  return err;
}

// Ranges sorted, disjoint, not adjacent to each other or to the horizon.
::testing::AssertionResult canonical(const StreamPosition &p) {
  int64_t prev = p.horizon;
  for (auto [lo, hi] : p.ranges()) {
    if (lo > hi)
      return ::testing::AssertionFailure() << "range " << lo << "-" << hi << " descends";
    if (lo - 1 <= prev)
      return ::testing::AssertionFailure() << "range " << lo << " touches " << prev;
    prev = hi;
  }
  return ::testing::AssertionSuccess();
}

} // namespace

TEST(CursorParse, PlainInteger) {
  auto p = must_parse_stream("42");
  EXPECT_EQ(p.epoch, 0);
  EXPECT_EQ(p.horizon, 42);
  EXPECT_TRUE(p.ranges().empty());
  EXPECT_EQ(encoded(p), "42");
  EXPECT_EQ(encoded(must_parse_stream("0")), "0");
}

TEST(CursorParse, Examples) {
  EXPECT_EQ(must_parse_stream("7~42").epoch, 7);
  EXPECT_EQ(must_parse_stream("7~42").horizon, 42);
  auto p = must_parse_stream("7~42_44-1000.1002");
  EXPECT_EQ(p.epoch, 7);
  EXPECT_EQ(p.horizon, 42);
  EXPECT_EQ(p.ranges(), (Ranges{{44, 1000}, {1002, 1002}}));
  EXPECT_EQ(encoded(p), "7~42_44-1000.1002");
  EXPECT_EQ(encoded(must_parse_stream("42_44")), "42_44");
}

TEST(CursorParse, Int64MaxAcceptedAndOneMoreRejected) {
  EXPECT_EQ(must_parse_stream("9223372036854775807").horizon, kMax);
  EXPECT_EQ(must_parse_stream("9223372036854775807~1").epoch, kMax);
  auto p = must_parse_stream("1_9223372036854775806-9223372036854775807");
  EXPECT_EQ(p.ranges(), (Ranges{{kMax - 1, kMax}}));
  EXPECT_EQ(reject_reason("9223372036854775808"), "cursor: number too large");
  EXPECT_EQ(reject_reason("99999999999999999999"), "cursor: number too large");
  EXPECT_EQ(reject_reason("1_9223372036854775808"), "cursor: number too large");
  EXPECT_EQ(reject_reason("9223372036854775807_1"), "cursor: range not above horizon");
}

TEST(CursorParse, LeadingZerosReadAsTheNumber) {
  EXPECT_EQ(must_parse_stream("007").horizon, 7);
  EXPECT_EQ(encoded(must_parse_stream("007_09")), "7_9");
}

TEST(CursorParse, AdjacentRangesNormalised) {
  auto p = must_parse_stream("42_43");
  EXPECT_EQ(p.horizon, 43);
  EXPECT_TRUE(p.ranges().empty());
  EXPECT_EQ(encoded(must_parse_stream("42_43-45.47")), "45_47");
  EXPECT_EQ(encoded(must_parse_stream("42_44.45")), "42_44-45");
  EXPECT_EQ(encoded(must_parse_stream("42_44-46.47-50.51")), "42_44-51");
  EXPECT_EQ(encoded(must_parse_stream("42_43.44.45.47")), "45_47");
  EXPECT_EQ(encoded(must_parse_stream("42_44-44")), "42_44");
  EXPECT_TRUE(canonical(must_parse_stream("1_3-4.5.7.8-9.11")));
}

TEST(CursorParse, MalformedRejected) {
  const char *bad[] = {"",
                       " ",
                       "\t",
                       "+5",
                       "-5",
                       "4.2",
                       "1e5",
                       "0x10",
                       " 42",
                       "42 ",
                       "4 2",
                       "42_",
                       "42_44-",
                       "42__44",
                       "42_44..46",
                       "42-44",
                       "~42",
                       "7~",
                       "7~8~9",
                       "a",
                       "42#",
                       "42&x",
                       "42%20",
                       "42_44.",
                       "42_.44",
                       "42_-44",
                       "42_+44",
                       "42\n",
                       "\xef\xbc\x94\xef\xbc\x92"};
  for (const char *t : bad)
    reject_reason(t);
  reject_reason("4\0"s
                "2");
  reject_reason("42\0"s);
}

TEST(CursorParse, ErrorMessages) {
  EXPECT_EQ(reject_reason(""), "cursor: empty");
  EXPECT_EQ(reject_reason("   "), "cursor: empty");
  EXPECT_EQ(reject_reason("+5"), "cursor: not a number");
  EXPECT_EQ(reject_reason("-5"), "cursor: not a number");
  EXPECT_EQ(reject_reason("abc"), "cursor: not a number");
  EXPECT_EQ(reject_reason("4.2"), "cursor: unexpected character");
  EXPECT_EQ(reject_reason("42_44-43"), "cursor: descending range");
  EXPECT_EQ(reject_reason("42_40"), "cursor: range not above horizon");
  EXPECT_EQ(reject_reason("42_42"), "cursor: range not above horizon");
  EXPECT_EQ(reject_reason("42_50.44"), "cursor: ranges overlap or descend");
  EXPECT_EQ(reject_reason("42_44-50.45"), "cursor: ranges overlap or descend");
  EXPECT_EQ(reject_reason("42_44.44"), "cursor: ranges overlap or descend");
  EXPECT_EQ(reject_reason("0~42"), "cursor: epoch must be positive");
  EXPECT_EQ(reject_reason(std::string(256, '1')), "cursor: too long");
  EXPECT_EQ(reject_reason("chat:1,chat:2"), "cursor: duplicate stream");
  EXPECT_EQ(reject_reason("42,chat:1"), "cursor: missing stream name");
  EXPECT_EQ(reject_reason(":42"), "cursor: bad stream name");
  EXPECT_EQ(reject_reason("-chat:42"), "cursor: bad stream name");
}

TEST(CursorParse, FailureLeavesOutputAlone) {
  StreamPosition p = must_parse_stream("5_7");
  std::string err;
  EXPECT_FALSE(parse_stream("x", &p, &err));
  EXPECT_EQ(encoded(p), "5_7");
  EXPECT_TRUE(parse_stream("1", &p, nullptr)); // a null err is allowed
  EXPECT_FALSE(parse_stream("x", &p, nullptr));
  Cursor c;
  EXPECT_FALSE(parse("x", &c, nullptr));
}

TEST(CursorParse, SizeBound) {
  // Build a valid token of exactly kMaxTokenBytes bytes: "1_3.5.7...".
  std::string t = "1";
  int64_t next = 3;
  while (t.size() + 1 + std::to_string(next).size() <= kMaxTokenBytes) {
    t += (t.size() == 1 ? "_" : ".") + std::to_string(next);
    next += 2;
  }
  while (t.size() < kMaxTokenBytes) // pad the horizon with leading zeros
    t.insert(0, "0");
  ASSERT_EQ(t.size(), kMaxTokenBytes);
  StreamPosition p;
  std::string err;
  EXPECT_TRUE(parse_stream(t, &p, &err)) << err;
  Cursor c;
  EXPECT_TRUE(parse(t, &c, &err)) << err;
  const std::string longer = "0" + t;
  EXPECT_FALSE(parse_stream(longer, &p, &err));
  EXPECT_EQ(err, "cursor: too long");
  EXPECT_FALSE(parse(longer, &c, &err));
  EXPECT_EQ(err, "cursor: too long");
  // The bound is per stream: a name in front does not count against it.
  EXPECT_TRUE(parse("s:" + t, &c, &err)) << err;
  EXPECT_FALSE(parse("s:" + longer, &c, &err));
  EXPECT_EQ(err, "cursor: too long");
  EXPECT_FALSE(parse(std::string(kMaxCursorBytes + 1, '1'), &c, &err));
  EXPECT_EQ(err, "cursor: too long");
}

TEST(CursorMulti, EpochNamedEntries) {
  // What the server writes for several streams: each position names its
  // stream by epoch, so long stream names never make a token too long.
  Cursor c;
  std::string err;
  ASSERT_TRUE(parse("7~42,9~7_9", &c, &err)) << err;
  ASSERT_EQ(c.streams.size(), 2u);
  EXPECT_EQ(c.streams[0].first, "");
  EXPECT_EQ(c.streams[0].second.epoch, 7);
  EXPECT_EQ(c.streams[1].second.epoch, 9);
  EXPECT_TRUE(c.streams[1].second.covers(9));
  EXPECT_FALSE(c.streams[1].second.covers(8));
  EXPECT_EQ(reject_reason("7~42,42"), "cursor: missing stream name");
  EXPECT_EQ(reject_reason("42,7~42"), "cursor: missing stream name");
  EXPECT_EQ(reject_reason("7~42,7~43"), "cursor: duplicate stream");
  EXPECT_EQ(reject_reason("7~42,"), "cursor: empty");
}

TEST(CursorMulti, ParseAndFind) {
  Cursor c;
  std::string err;
  ASSERT_TRUE(parse("chat:7~42,news:9~7_9", &c, &err)) << err;
  ASSERT_EQ(c.streams.size(), 2u);
  EXPECT_EQ(c.streams[0].first, "chat");
  EXPECT_EQ(c.streams[1].first, "news");
  ASSERT_NE(c.find("chat"), nullptr);
  EXPECT_EQ(c.find("chat")->horizon, 42);
  EXPECT_EQ(c.find("news")->ranges(), (Ranges{{9, 9}}));
  EXPECT_EQ(c.find("sport"), nullptr);
  EXPECT_EQ(c.find(""), nullptr);
  EXPECT_EQ(encode(c), "chat:7~42,news:9~7_9");
}

TEST(CursorMulti, UnnamedEntryMatchesAnyName) {
  Cursor c;
  std::string err;
  ASSERT_TRUE(parse("42", &c, &err)) << err;
  ASSERT_EQ(c.streams.size(), 1u);
  EXPECT_EQ(c.streams[0].first, "");
  ASSERT_NE(c.find("anything"), nullptr);
  EXPECT_EQ(c.find("anything")->horizon, 42);
  EXPECT_EQ(encode(c), "42");
}

TEST(CursorMulti, SingleNamedStreamKeepsItsName) {
  Cursor c;
  std::string err;
  ASSERT_TRUE(parse("chat:5", &c, &err)) << err;
  EXPECT_EQ(encode(c), "chat:5");
  EXPECT_EQ(c.find("news"), nullptr);
}

TEST(CursorMulti, Malformed) {
  for (const char *t :
       {"chat:", "chat:42,", ",chat:42", "chat:42,,news:1", "chat:1:2", "chat%:1", "ch at:1",
        "caf\xc3\xa9:1", "chat:1,news", "chat::1", "chat:1;news:2", ".chat:1"})
    reject_reason(t);
  reject_reason(std::string(129, 'a') + ":1");
  Cursor c;
  std::string err;
  EXPECT_TRUE(parse(std::string(128, 'a') + ":1", &c, &err)) << err;
  EXPECT_TRUE(parse("_x.y-z:1,9:2,A:3", &c, &err)) << err;
}

TEST(CursorMulti, EncodeOnlyUsesUrlSafeCharacters) {
  Cursor c;
  std::string err;
  ASSERT_TRUE(parse("a-b_c.d:7~42_44-1000.1002,Z9:0", &c, &err)) << err;
  for (char ch : encode(c))
    EXPECT_NE(
        std::string_view("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:,")
            .find(ch),
        std::string_view::npos)
        << ch;
}

TEST(CursorInt64, Strict) {
  int64_t v = -1;
  EXPECT_TRUE(parse_int64("0", &v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(parse_int64("123", &v));
  EXPECT_EQ(v, 123);
  EXPECT_TRUE(parse_int64("9223372036854775807", &v));
  EXPECT_EQ(v, kMax);
  EXPECT_TRUE(parse_int64("0000000000000000001", &v)); // 19 digits
  EXPECT_EQ(v, 1);
  v = 77;
  for (const char *t : {"", " ", "+1", "-1", "1.0", " 1", "1 ", "1e3", "9223372036854775808",
                        "00000000000000000001", "18446744073709551616", "0x1"})
    EXPECT_FALSE(parse_int64(t, &v)) << t;
  EXPECT_EQ(v, 77);
}

TEST(CursorStreamName, Rules) {
  for (const char *ok : {"chat", "_x", "9a", "a.b-c_d", "A"})
    EXPECT_TRUE(valid_stream_name(ok)) << ok;
  EXPECT_TRUE(valid_stream_name(std::string(kMaxStreamName, 'n')));
  for (const char *bad : {"", ".a", "-a", "a b", "a:b", "a,b", "a~b", "caf\xc3\xa9", "a/b"})
    EXPECT_FALSE(valid_stream_name(bad)) << bad;
  EXPECT_FALSE(valid_stream_name(std::string(kMaxStreamName + 1, 'n')));
}

TEST(StreamPosition, AddFoldsAndMerges) {
  StreamPosition p;
  p.horizon = 42;
  p.add(43);
  EXPECT_EQ(p.horizon, 43);
  p.add(45);
  EXPECT_EQ(p.ranges(), (Ranges{{45, 45}}));
  p.add(44); // fills the gap: everything folds into the horizon
  EXPECT_EQ(p.horizon, 45);
  EXPECT_TRUE(p.ranges().empty());
  p.add(50);
  p.add(48);
  EXPECT_EQ(p.ranges(), (Ranges{{48, 48}, {50, 50}}));
  p.add(49);
  EXPECT_EQ(p.ranges(), (Ranges{{48, 50}}));
  p.add(47);
  EXPECT_EQ(p.ranges(), (Ranges{{47, 50}}));
  p.add(52);
  p.add(55);
  p.add(53);
  EXPECT_EQ(p.ranges(), (Ranges{{47, 50}, {52, 53}, {55, 55}}));
  p.add(51);
  EXPECT_EQ(p.ranges(), (Ranges{{47, 53}, {55, 55}}));
  p.add(46);
  EXPECT_EQ(p.horizon, 53);
  EXPECT_EQ(p.ranges(), (Ranges{{55, 55}}));
  EXPECT_EQ(p.highest(), 55);
  EXPECT_EQ(encoded(p), "53_55");
}

TEST(StreamPosition, AddIgnoresCoveredIds) {
  StreamPosition p = must_parse_stream("10_12-14");
  p.add(5);
  p.add(-3);
  p.add(10);
  p.add(13);
  EXPECT_EQ(encoded(p), "10_12-14");
}

TEST(StreamPosition, Covers) {
  StreamPosition p = must_parse_stream("10_12-14.20");
  for (int64_t id : std::initializer_list<int64_t>{-1, 0, 10, 12, 13, 14, 20})
    EXPECT_TRUE(p.covers(id)) << id;
  for (int64_t id : std::initializer_list<int64_t>{11, 15, 19, 21, kMax})
    EXPECT_FALSE(p.covers(id)) << id;
}

TEST(StreamPosition, Advance) {
  StreamPosition p = must_parse_stream("10_12-15.20");
  p.advance(5); // never lowers
  EXPECT_EQ(encoded(p), "10_12-15.20");
  p.advance(11); // now touches 12-15
  EXPECT_EQ(encoded(p), "15_20");
  p = must_parse_stream("10_12-15.20");
  p.advance(13); // inside a range
  EXPECT_EQ(encoded(p), "15_20");
  p.advance(19); // touches 20
  EXPECT_EQ(encoded(p), "20");
  p = must_parse_stream("10_12-15.20.30");
  p.advance(25);
  EXPECT_EQ(encoded(p), "25_30");
  p.advance(100);
  EXPECT_EQ(encoded(p), "100");
  EXPECT_EQ(p.highest(), 100);
}

TEST(StreamPosition, AddRange) {
  StreamPosition p = must_parse_stream("10_12-15.20.30-31");
  p.add_range(5, 9); // below the horizon: nothing
  EXPECT_EQ(encoded(p), "10_12-15.20.30-31");
  p.add_range(17, 18); // between ranges, touching neither
  EXPECT_EQ(encoded(p), "10_12-15.17-18.20.30-31");
  p.add_range(16, 19); // joins 12-15, 17-18 and 20
  EXPECT_EQ(encoded(p), "10_12-20.30-31");
  p.add_range(8, 11); // folds into the horizon, which then reaches 20
  EXPECT_EQ(encoded(p), "20_30-31");
  p.add_range(25, 40); // covers 30-31
  EXPECT_EQ(encoded(p), "20_25-40");
  p.add_range(41, 41); // one id, adjacent
  EXPECT_EQ(encoded(p), "20_25-41");
  p.add_range(21, 24);
  EXPECT_EQ(encoded(p), "41");
  p.add_range(kMax - 1, kMax);
  EXPECT_EQ(p.ranges(), (Ranges{{kMax - 1, kMax}}));
  p.add_range(50, 40); // empty
  EXPECT_EQ(p.ranges(), (Ranges{{kMax - 1, kMax}}));
}

TEST(StreamPosition, NearInt64Max) {
  StreamPosition p;
  p.horizon = kMax - 3;
  p.add(kMax);
  p.add(kMax - 1);
  EXPECT_EQ(p.ranges(), (Ranges{{kMax - 1, kMax}}));
  EXPECT_FALSE(p.covers(kMax - 2));
  p.add(kMax - 2);
  EXPECT_EQ(p.horizon, kMax);
  EXPECT_TRUE(p.ranges().empty());
  p.add(kMax);
  p.advance(kMax);
  EXPECT_EQ(p.horizon, kMax);
  EXPECT_EQ(encoded(p), "9223372036854775807");
}

TEST(StreamPosition, EpochEncoding) {
  StreamPosition p;
  p.epoch = 3;
  p.horizon = 9;
  EXPECT_EQ(encoded(p), "3~9");
  EXPECT_EQ(p.encoded_size(), 3u);
  EXPECT_EQ(must_parse_stream("3~9"), p);
}

// Random add/advance sequences checked against a set-based model, then
// encode -> parse -> compare.
TEST(StreamPosition, RandomOperationsMatchModelAndRoundTrip) {
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 400; ++round) {
    StreamPosition p;
    p.epoch = static_cast<int64_t>(rng() % 3);
    const int64_t base = (round % 4 == 0) ? kMax - 200 : static_cast<int64_t>(rng() % 1000);
    p.horizon = base;
    int64_t model_h = base;
    std::set<int64_t> seen;
    const int ops = 1 + static_cast<int>(rng() % 120);
    for (int op = 0; op < ops; ++op) {
      const int64_t off = static_cast<int64_t>(rng() % 150);
      const int64_t id = off > kMax - base ? kMax : base + off;
      if (rng() % 10 == 0) {
        p.advance(id);
        model_h = std::max(model_h, id);
      } else {
        p.add(id);
        seen.insert(id);
      }
      ASSERT_TRUE(canonical(p)) << encoded(p);
      // The horizon is as high as the covered ids allow.
      while (model_h < kMax && (seen.count(model_h + 1)))
        ++model_h;
      ASSERT_EQ(p.horizon, model_h) << encoded(p);
      ASSERT_FALSE(p.horizon < kMax && p.covers(p.horizon + 1));
    }
    for (int64_t off = -2; off < 160; ++off) {
      if (off > kMax - base)
        break;
      const int64_t id = base + off;
      ASSERT_EQ(p.covers(id), id <= model_h || seen.count(id) > 0) << id << " in " << encoded(p);
    }
    const std::string text = encoded(p);
    ASSERT_EQ(p.encoded_size(), text.size());
    StreamPosition back;
    std::string err;
    if (text.size() > kMaxTokenBytes) {
      EXPECT_FALSE(parse_stream(text, &back, &err));
      continue;
    }
    ASSERT_TRUE(parse_stream(text, &back, &err)) << text << ": " << err;
    ASSERT_EQ(back, p) << text;

    Cursor c;
    c.streams.emplace_back("s" + std::to_string(round), p);
    c.streams.emplace_back("other", must_parse_stream("1~5_7"));
    const std::string multi = encode(c);
    Cursor c2;
    {
      ASSERT_TRUE(parse(multi, &c2, &err)) << multi << ": " << err;
      ASSERT_EQ(c2.streams, c.streams);
    }
  }
}
