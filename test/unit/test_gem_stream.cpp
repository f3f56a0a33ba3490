// Unit tests for names::gem_stream / is_gem_queue: the one rule by which a
// gem (signed) name opens a stream, in the worker and in SQL alike.
#include "core/names.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace pgbs::names;

TEST(GemStream, NamesAndTable) {
  GemStream gs;
  ASSERT_TRUE(gem_stream("a:b", &gs));
  EXPECT_EQ(gs.table, "q_pgbus_a_b");
  EXPECT_EQ(gs.short_name, "a_b");
  EXPECT_EQ(gs.queue, "pgbus_a_b");
  EXPECT_EQ(gs.names, (std::vector<std::string>{"a:b", "a_b", "pgbus_a_b"}));
  ASSERT_TRUE(gem_stream("a_b", &gs)); // no duplicate names
  EXPECT_EQ(gs.names, (std::vector<std::string>{"a_b", "pgbus_a_b"}));
  ASSERT_TRUE(gem_stream("A-B", &gs)); // PGMQ lower-cases the table
  EXPECT_EQ(gs.table, "q_pgbus_a_b");
  EXPECT_EQ(gs.names[0], "A-B");
}

TEST(GemStream, RefusedNames) {
  GemStream gs;
  for (const char *bad : {"", ":", "...", "/", "-", "\xc3\xa9"})
    EXPECT_FALSE(gem_stream(bad, &gs)) << bad;
  EXPECT_FALSE(gem_stream(std::string(42, 'x'), &gs)); // queue longer than 47
  EXPECT_TRUE(gem_stream(std::string(41, 'x'), &gs));
}

// attach('orders_internal', 'a_b') holds the name a_b with another queue:
// no spelling of a:b opens it; the gem's queue does, under either name.
TEST(GemStream, OnlyTheGemsQueue) {
  for (const char *spelling : {"a:b", "A-B", "a.b", "A_B", "a_b"}) {
    GemStream gs;
    ASSERT_TRUE(gem_stream(spelling, &gs)) << spelling;
    EXPECT_FALSE(is_gem_queue(gs, "pgmq", "q_orders_internal")) << spelling;
    EXPECT_TRUE(is_gem_queue(gs, "pgmq", "q_pgbus_a_b")) << spelling;
    // create_stream's own queue when PGMQ is not installed
    EXPECT_TRUE(is_gem_queue(gs, "pgbus_stream", "q_pgbus_a_b")) << spelling;
    EXPECT_FALSE(is_gem_queue(gs, "public", "q_pgbus_a_b")) << spelling;
  }
  GemStream none;
  EXPECT_FALSE(is_gem_queue(none, "pgmq", ""));
}

TEST(GemStream, NamedCoversEveryCatalogName) {
  EXPECT_TRUE(gem_stream_named("a:b", "a:b"));
  EXPECT_TRUE(gem_stream_named("a:b", "a_b"));
  EXPECT_TRUE(gem_stream_named("a:b", "pgbus_a_b"));
  EXPECT_FALSE(gem_stream_named("a:b", "b_a"));
  EXPECT_FALSE(gem_stream_named(":", ""));
}
