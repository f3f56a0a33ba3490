// Unit tests for core/text: trim and the "*" glob.
#include "core/text.hpp"

#include <gtest/gtest.h>

#include <string>

using pgbs::text::Case;
using pgbs::text::glob;
using pgbs::text::trim;

TEST(TextTrim, SpacesAndTabs) {
  EXPECT_EQ(trim("  a b \t"), "a b");
  EXPECT_EQ(trim("\t\tx"), "x");
  EXPECT_EQ(trim("x"), "x");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("\na\n"), "\na\n"); // line breaks are not whitespace here
}

TEST(TextTrim, OtherCharacters) {
  EXPECT_EQ(trim(" \tpgbus_ ", " "), "\tpgbus_");
  EXPECT_EQ(trim("xxaxx", "x"), "a");
  EXPECT_EQ(trim("abc", ""), "abc");
}

TEST(TextTrim, ResultIsPartOfInput) {
  const std::string s = "  word  ";
  const std::string_view t = trim(s);
  EXPECT_EQ(t.data(), s.data() + 2);
}

TEST(TextGlob, Globs) {
  EXPECT_TRUE(glob("chat", "chat"));
  EXPECT_FALSE(glob("chat", "chats"));
  EXPECT_TRUE(glob("chat:*", "chat:1"));
  EXPECT_TRUE(glob("chat:*", "chat:"));
  EXPECT_FALSE(glob("chat:*", "chat"));
  EXPECT_TRUE(glob("*", "anything"));
  EXPECT_TRUE(glob("*", ""));
  EXPECT_TRUE(glob("", ""));
  EXPECT_TRUE(glob("a*b*c", "axxbyyc"));
  EXPECT_FALSE(glob("a*b*c", "axxbyy"));
  EXPECT_TRUE(glob("*_messages", "room_1_messages"));
  EXPECT_FALSE(glob("", "a"));
  EXPECT_FALSE(glob("ch?t", "chat")); // only '*' is special
}

TEST(TextGlob, Case) {
  EXPECT_FALSE(glob("Chat*", "chat1"));
  EXPECT_TRUE(glob("Chat*", "chat1", Case::Insensitive));
  EXPECT_TRUE(glob("PGBUS_*", "pgbus_orders", Case::Insensitive));
  EXPECT_FALSE(glob("\xc3\x89", "\xc3\xa9", Case::Insensitive)); // ASCII letters only
}

TEST(TextGlob, NoExponentialBacktracking) {
  EXPECT_FALSE(glob(std::string(100, '*') + "b", std::string(128, 'a')));
  EXPECT_FALSE(glob(std::string(100, '*') + "b", std::string(128, 'A'), Case::Insensitive));
}
