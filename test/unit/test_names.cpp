// Unit tests for core/names: the pgbus gem's queue names and auto_attach
// patterns.
#include "core/names.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace pgbs::names;

namespace {

std::string q(std::string_view logical) {
  QueueNameError err;
  std::string out = queue_name(logical, &err);
  EXPECT_EQ(err, QueueNameError::None) << logical;
  return out;
}

QueueNameError q_err(std::string_view logical) {
  QueueNameError err;
  EXPECT_EQ(queue_name(logical, &err), "") << logical;
  return err;
}

} // namespace

TEST(Names, RecordStreamKeys) {
  EXPECT_EQ(q("ai_chat_3a4f9c21b7d20e18:messages"), "pgbus_ai_chat_3a4f9c21b7d20e18_messages");
  EXPECT_EQ(q("chat"), "pgbus_chat");
  EXPECT_EQ(q("orders.eu-west"), "pgbus_orders_eu_west");
}

TEST(Names, PlainNamesKeptAsTheyAreThenLowerCased) {
  // [A-Za-z0-9_]+ is not normalised: runs of "_" and a trailing "_" stay.
  EXPECT_EQ(q("a__b_"), "pgbus_a__b_");
  EXPECT_EQ(q("Chat_Room"), "pgbus_chat_room");
  EXPECT_EQ(normalize("pgbus_a__b_"), "pgbus_a__b_");
  EXPECT_EQ(normalize("Chat"), "Chat");
}

TEST(Names, SeparatorsBecomeOneUnderscoreAndOthersAreDropped) {
  EXPECT_EQ(q("a::b"), "pgbus_a_b");
  EXPECT_EQ(q("a-_-b"), "pgbus_a_b");
  EXPECT_EQ(q(":a:"), "pgbus_a");
  EXPECT_EQ(q("gid://app/User/1"), "pgbus_gid_appuser1");
  EXPECT_EQ(q("room 42!"), "pgbus_room42");
  EXPECT_EQ(q("caf\xc3\xa9:x"), "pgbus_caf_x"); // UTF-8 bytes are dropped
  EXPECT_EQ(q("Z2lkOi8vYXBwL1VzZXIvMQ==:m"), "pgbus_z2lkoi8vyxbwl1vzzxivmq_m");
  EXPECT_EQ(normalize("__a..b--"), "a_b");
  EXPECT_EQ(normalize("!!"), "");
}

TEST(Names, LengthLimitIsOnTheQueueName) {
  const std::string at_limit(kMaxQueueName - kGemPrefix.size(), 'x');
  EXPECT_EQ(q(at_limit).size(), kMaxQueueName);
  EXPECT_EQ(q_err(at_limit + "y"), QueueNameError::TooLong);
  // Characters that normalisation drops do not count.
  EXPECT_EQ(q(at_limit + "!!!").size(), kMaxQueueName);
  EXPECT_EQ(q(at_limit + ":"), "pgbus_" + at_limit);
}

TEST(Names, EmptyIsRefused) {
  EXPECT_EQ(q_err(""), QueueNameError::Empty);
  QueueNameError err;
  EXPECT_EQ(queue_name("!", &err, ""), "");
  EXPECT_EQ(err, QueueNameError::Empty);
  EXPECT_EQ(queue_name("x", &err, "app_"), "app_x");
  EXPECT_EQ(err, QueueNameError::None);
}

TEST(Names, AutoAttachPrefixAndGlob) {
  EXPECT_TRUE(auto_attach_matches("pgbus_", "pgbus_chat"));
  EXPECT_TRUE(auto_attach_matches("pgbus_", "pgbus_"));
  EXPECT_FALSE(auto_attach_matches("pgbus_", "pgbus"));
  EXPECT_FALSE(auto_attach_matches("pgbus_", "other_pgbus_chat"));
  EXPECT_TRUE(auto_attach_matches("PGBUS_", "pgbus_chat"));
  EXPECT_TRUE(auto_attach_matches("pgbus_*_messages", "pgbus_ai_chat_1_messages"));
  EXPECT_FALSE(auto_attach_matches("pgbus_*_messages", "pgbus_ai_chat_1_messages_x"));
  EXPECT_TRUE(auto_attach_matches("*", "anything"));
  EXPECT_TRUE(auto_attach_matches("a*b*c", "axxbyyc"));
  EXPECT_FALSE(auto_attach_matches("a*b*c", "axxbyy"));
  EXPECT_TRUE(auto_attach_matches("jobs_, pgbus_", "pgbus_x"));
  EXPECT_TRUE(auto_attach_matches("jobs_, pgbus_", "jobs_x"));
  EXPECT_FALSE(auto_attach_matches("", "pgbus_x"));
  EXPECT_FALSE(auto_attach_matches(" , ", "pgbus_x"));
  // Backtracking stays bounded on a hostile pattern.
  EXPECT_FALSE(auto_attach_matches("*a*a*a*a*a*a*b", std::string(47, 'a')));
}

TEST(Names, AutoAttachSettingValidity) {
  EXPECT_TRUE(valid_auto_attach("pgbus_"));
  EXPECT_TRUE(valid_auto_attach(""));
  EXPECT_TRUE(valid_auto_attach("pgbus_*, jobs_"));
  EXPECT_FALSE(valid_auto_attach("pgbus-"));
  EXPECT_FALSE(valid_auto_attach("pgbus_%"));
  EXPECT_FALSE(valid_auto_attach(std::string(48, 'a')));
}
