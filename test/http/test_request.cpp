// Unit tests of the listener's pure parts: request-target parsing, routes,
// CORS matching (src/http/request.cpp) and listen address expansion
// (src/http/listen.cpp). GoogleTest; run by `make -C test/http run`.
#include "http/listen.hpp"
#include "http/request.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

using namespace pgbs::http;

namespace {

Request fill(std::string_view uri, int *status, std::string *reason = nullptr) {
  Target t;
  std::string err;
  EXPECT_TRUE(parse_target(uri, &t, &err)) << err;
  Request r;
  std::string why;
  *status = fill_sse_request(classify(t.path), t, 4, &r, &why);
  if (reason)
    *reason = why;
  return r;
}

} // namespace

TEST(PercentDecode, Basics) {
  std::string out;
  EXPECT_TRUE(percent_decode("a%20b%2Fc", false, &out));
  EXPECT_EQ(out, "a b/c");
  EXPECT_TRUE(percent_decode("a+b", false, &out));
  EXPECT_EQ(out, "a+b");
  EXPECT_TRUE(percent_decode("a+b%2B", true, &out));
  EXPECT_EQ(out, "a b+");
  EXPECT_TRUE(percent_decode("", true, &out));
  EXPECT_EQ(out, "");
}

TEST(PercentDecode, RejectsMalformedAndNul) {
  std::string out;
  EXPECT_FALSE(percent_decode("%", false, &out));
  EXPECT_FALSE(percent_decode("%4", false, &out));
  EXPECT_FALSE(percent_decode("ab%", false, &out));
  EXPECT_FALSE(percent_decode("%zz", false, &out));
  EXPECT_FALSE(percent_decode("a%00b", false, &out));
  EXPECT_TRUE(percent_decode("%4a%4A", false, &out));
  EXPECT_EQ(out, "JJ");
}

TEST(Target, SplitsPathAndQuery) {
  Target t;
  std::string err;
  ASSERT_TRUE(parse_target("/streams?stream=a&&stream=b&flag&x=1%202#frag", &t, &err));
  EXPECT_EQ(t.path, "/streams");
  ASSERT_EQ(t.query.size(), 4u);
  EXPECT_EQ(t.query[0], std::make_pair(std::string("stream"), std::string("a")));
  EXPECT_EQ(t.query[1], std::make_pair(std::string("stream"), std::string("b")));
  EXPECT_EQ(t.query[2], std::make_pair(std::string("flag"), std::string("")));
  EXPECT_EQ(t.query[3], std::make_pair(std::string("x"), std::string("1 2")));
  EXPECT_FALSE(parse_target("streams", &t, &err));
  EXPECT_FALSE(parse_target("", &t, &err));
  EXPECT_FALSE(parse_target("/s?a=%zz", &t, &err));
}

TEST(Route, Classify) {
  EXPECT_EQ(classify("/streams"), Route::Streams);
  EXPECT_EQ(classify("/streams/chat"), Route::Stream);
  EXPECT_EQ(classify("/streams/"), Route::NotFound);
  EXPECT_EQ(classify("/pgbus/streams/x"), Route::Signed);
  EXPECT_EQ(classify("/pgbus/streams/"), Route::NotFound);
  EXPECT_EQ(classify("/streamsx"), Route::NotFound);
  EXPECT_EQ(classify("/"), Route::NotFound);
}

TEST(SseRequest, SingleStream) {
  int st;
  Request r = fill("/streams/q%5F1?since=%2042%20&replay=all&subscriber=s1&token=t", &st);
  ASSERT_EQ(st, 0);
  EXPECT_EQ(r.streams, std::vector<std::string>{"q_1"});
  EXPECT_TRUE(r.has_since);
  EXPECT_EQ(r.since, "42");
  EXPECT_EQ(r.replay, "all");
  EXPECT_EQ(r.subscriber, "s1");
  EXPECT_EQ(r.creds.token, "t");
}

TEST(SseRequest, BlankIsAbsentAndSinceWins) {
  int st;
  Request r = fill("/streams/a?since=&last_event_id=7", &st);
  ASSERT_EQ(st, 0);
  EXPECT_TRUE(r.has_since);
  EXPECT_EQ(r.since, "7");
  r = fill("/streams/a?since=5&last_event_id=7", &st);
  EXPECT_EQ(r.since, "5");
  r = fill("/streams/a?since=+&replay=", &st);
  EXPECT_FALSE(r.has_since);
  EXPECT_EQ(r.replay, "");
}

TEST(SseRequest, Presence) {
  int st;
  std::string reason;
  EXPECT_FALSE(fill("/streams/a", &st).presence);
  Request r = fill("/streams/a?presence=1", &st);
  ASSERT_EQ(st, 0);
  EXPECT_TRUE(r.presence);
  EXPECT_FALSE(fill("/streams/a?presence=0", &st).presence);
  EXPECT_EQ(st, 0);
  EXPECT_FALSE(fill("/streams/a?presence=", &st).presence) << "blank is absent";
  EXPECT_EQ(st, 0);
  for (const char *bad :
       {"/streams/a?presence=yes", "/streams/a?presence=2", "/streams/a?presence=1x"}) {
    fill(bad, &st, &reason);
    EXPECT_EQ(st, 400) << bad;
    EXPECT_NE(reason.find("invalid presence"), std::string::npos) << reason;
  }
}

TEST(SseRequest, MultiStream) {
  int st;
  std::string reason;
  Request r = fill("/streams?stream=a&stream=b&stream=a&stream=", &st);
  ASSERT_EQ(st, 0);
  EXPECT_EQ(r.streams, (std::vector<std::string>{"a", "b"}));
  fill("/streams", &st, &reason);
  EXPECT_EQ(st, 400);
  fill("/streams?stream=a&stream=b&stream=c&stream=d&stream=e", &st, &reason);
  EXPECT_EQ(st, 400) << "max_streams is 4 here";
  EXPECT_EQ(reason, "too many streams");
  fill("/streams?stream=a&stream=.bad", &st);
  EXPECT_EQ(st, 404);
}

TEST(SseRequest, InvalidNamesAreNotFound) {
  int st;
  fill("/streams/a%20b", &st);
  EXPECT_EQ(st, 404);
  fill("/streams/a/b", &st);
  EXPECT_EQ(st, 404);
  fill("/streams/a%2Fb", &st);
  EXPECT_EQ(st, 404);
  fill("/streams/%2e%2e", &st);
  EXPECT_EQ(st, 404);
  fill("/streams/" + std::string(129, 'a'), &st);
  EXPECT_EQ(st, 404);
  fill("/streams/" + std::string(128, 'a'), &st);
  EXPECT_EQ(st, 0);
}

TEST(SseRequest, SignedName) {
  int st;
  Request r = fill("/pgbus/streams/ab%2Fc+d%3D%3D--99?since=3", &st);
  ASSERT_EQ(st, 0);
  EXPECT_TRUE(r.streams.empty());
  EXPECT_EQ(r.creds.signed_name, "ab/c+d==--99");
  EXPECT_EQ(r.since, "3");
  fill("/pgbus/streams/%20", &st);
  EXPECT_EQ(st, 400);
}

TEST(SseRequest, SignedNameUnderStreams) {
  // The gem renders the token unescaped: '+', '/', '=' as they are, or
  // percent-encoded; /streams/<token> works like /pgbus/streams/<token>.
  const std::string hex(64, 'e');
  int st;
  Request r = fill("/streams/ab/c+d==--" + hex, &st);
  ASSERT_EQ(st, 0);
  EXPECT_TRUE(r.streams.empty());
  EXPECT_EQ(r.creds.signed_name, "ab/c+d==--" + hex);
  r = fill("/streams/ab%2Fc%2Bd%3D%3D--" + hex, &st);
  ASSERT_EQ(st, 0);
  EXPECT_EQ(r.creds.signed_name, "ab/c+d==--" + hex);
  r = fill("/pgbus/streams/ab/c+d==--" + hex, &st);
  ASSERT_EQ(st, 0);
  EXPECT_EQ(r.creds.signed_name, "ab/c+d==--" + hex);
  r = fill("/streams/chat--x", &st); // not a signature: a (valid) stream name
  ASSERT_EQ(st, 0);
  EXPECT_EQ(r.streams, (std::vector<std::string>{"chat--x"}));
}

TEST(Cors, CredentialsOnlyForListedOrigins) {
  EXPECT_TRUE(origin_listed("https://a.example, https://b.example", "https://b.example"));
  EXPECT_FALSE(origin_listed("*", "https://evil.example")) << "'*' never lets cookies through";
  EXPECT_TRUE(origin_allowed("*", "https://evil.example"));
  EXPECT_FALSE(origin_listed("https://a.example", ""));
}

TEST(Headers, Cookie) {
  std::string v;
  EXPECT_TRUE(cookie_value("a=1; pgbus_token=abc.def; b=2", "pgbus_token", &v));
  EXPECT_EQ(v, "abc.def");
  EXPECT_TRUE(cookie_value("pgbus_token=\"q\"", "pgbus_token", &v));
  EXPECT_EQ(v, "q");
  EXPECT_FALSE(cookie_value("xpgbus_token=1; pgbus_token_x=2", "pgbus_token", &v));
  EXPECT_FALSE(cookie_value("pgbus_token=", "pgbus_token", &v));
  EXPECT_FALSE(cookie_value("pgbus_token=1", "", &v));
}

TEST(Headers, BearerToken) {
  std::string tok;
  EXPECT_TRUE(bearer_token("Bearer abc.def", &tok));
  EXPECT_EQ(tok, "abc.def");
  EXPECT_TRUE(bearer_token("  bearer \t xyz  ", &tok));
  EXPECT_EQ(tok, "xyz");
  EXPECT_FALSE(bearer_token("Basic abc", &tok));
  EXPECT_FALSE(bearer_token("Bearer", &tok));
  EXPECT_FALSE(bearer_token("Bearer   ", &tok));
  EXPECT_FALSE(bearer_token("Bearerabc", &tok));
}

TEST(Cors, OriginAllowed) {
  EXPECT_TRUE(origin_allowed("https://a.example, https://b.example", "https://b.example"));
  EXPECT_FALSE(origin_allowed("https://a.example", "https://a.example.evil"));
  EXPECT_FALSE(origin_allowed("https://a.example", ""));
  EXPECT_FALSE(origin_allowed("", "https://a.example"));
  EXPECT_TRUE(origin_allowed("*", "null"));
  EXPECT_TRUE(origin_allowed("https://a.example,*", "https://z.example"));
}

TEST(Listen, AddressForms) {
  std::vector<int> fds;
  int port = -1;
  std::string err;
  ASSERT_TRUE(open_listeners("127.0.0.1", 0, true, &fds, &port, &err)) << err;
  EXPECT_EQ(fds.size(), 1u);
  EXPECT_GT(port, 0);
  for (int fd : fds)
    close(fd);
  ASSERT_TRUE(open_listeners("localhost", 0, true, &fds, &port, &err)) << err;
  EXPECT_GE(fds.size(), 1u); // ::1 is skipped on hosts without IPv6
  for (int fd : fds)
    close(fd);
  ASSERT_TRUE(open_listeners("*", 0, true, &fds, &port, &err)) << err;
  EXPECT_GE(fds.size(), 1u);
  for (int fd : fds)
    close(fd);
  EXPECT_FALSE(open_listeners("db.example.com", 0, true, &fds, &port, &err));
  EXPECT_NE(err.find("not an IP address"), std::string::npos);
  EXPECT_FALSE(open_listeners(" , ", 0, true, &fds, &port, &err));
  EXPECT_FALSE(open_listeners("127.0.0.1", 70000, true, &fds, &port, &err));
}

TEST(Listen, ReusePortSharesThePort) {
  std::vector<int> a, b;
  int pa = -1, pb = -1;
  std::string err;
  ASSERT_TRUE(open_listeners("127.0.0.1", 0, true, &a, &pa, &err)) << err;
  ASSERT_TRUE(open_listeners("127.0.0.1", pa, true, &b, &pb, &err)) << err;
  EXPECT_EQ(pa, pb);
  std::vector<int> c;
  int pc = -1;
  EXPECT_FALSE(open_listeners("127.0.0.1", pa, false, &c, &pc, &err));
  for (int fd : a)
    close(fd);
  for (int fd : b)
    close(fd);
}

TEST(Loopback, OnlyLoopbackAddresses) {
  EXPECT_TRUE(is_loopback("127.0.0.1:5000"));
  EXPECT_TRUE(is_loopback("127.200.3.4:1"));
  EXPECT_TRUE(is_loopback("[::1]:8080"));
  EXPECT_TRUE(is_loopback("[::ffff:127.0.0.1]:8080"));
  EXPECT_FALSE(is_loopback("192.0.2.2:5000"));
  EXPECT_FALSE(is_loopback("10.127.0.1:5000"));
  EXPECT_FALSE(is_loopback("1270.0.0.1:5000"));
  EXPECT_FALSE(is_loopback("[::2]:8080"));
  EXPECT_FALSE(is_loopback("[::1a]:8080"));
  EXPECT_FALSE(is_loopback("[fd00::1]:8080"));
  EXPECT_FALSE(is_loopback("[::ffff:10.0.0.1]:8080"));
  EXPECT_FALSE(is_loopback("?"));
  EXPECT_FALSE(is_loopback(""));
}

// The pgbus gem's routes: its framing and preamble, its strict cursors.
TEST(GemRoute, MarkedWithItsPreamble) {
  int st = 0;
  const std::string tok = "ImNoYXQi--e1051e5eb43d9af0f34d463563153fd301e2faa38160efe648ece0d226fde283";
  Request r = fill("/pgbus/streams/" + tok, &st);
  EXPECT_EQ(st, 0);
  EXPECT_TRUE(r.gem_route);
  EXPECT_FALSE(r.connected);
  r = fill("/streams/" + tok + "?connected=1", &st);
  EXPECT_EQ(st, 0);
  EXPECT_TRUE(r.gem_route);
  EXPECT_TRUE(r.connected);
  r = fill("/streams/chat", &st);
  EXPECT_FALSE(r.gem_route);
  EXPECT_TRUE(r.connected);
  r = fill("/streams/chat?connected=0", &st);
  EXPECT_FALSE(r.connected);
  fill("/streams/chat?connected=yes", &st);
  EXPECT_EQ(st, 400);
}

TEST(GemRoute, StrictCursors) {
  const std::string path = "/pgbus/streams/ImNoYXQi--e1051e5eb43d9af0f34d463563153fd301e2faa381"
                           "60efe648ece0d226fde283?since=";
  int st = 0;
  for (const char *bad : {"+10", "%2B10", "1.5", "-1", "abc", "%2010", "10%20", "1e3",
                          "9223372036854775808"}) {
    std::string why;
    fill(path + bad, &st, &why);
    EXPECT_EQ(st, 400) << bad;
    EXPECT_NE(why.find("cursor"), std::string::npos) << bad;
  }
  for (const char *good : {"0", "10", "9223372036854775807", "7~42", "7~42_44-46.50"}) {
    Request r = fill(path + good, &st);
    EXPECT_EQ(st, 0) << good;
    EXPECT_EQ(r.since, good);
  }
  // Off the gem's routes a padded integer is still taken, as before.
  Request r = fill("/streams/chat?since=+10", &st);
  EXPECT_EQ(st, 0);
  EXPECT_EQ(r.since, "10");
}
