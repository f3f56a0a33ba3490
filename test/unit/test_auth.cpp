// Unit tests for core/auth: signed stream names against vectors made by the
// real ActiveSupport::MessageVerifier (fixtures/signed_names.tsv, see
// fixtures/gen_signed_names.rb), HS256 JWTs, patterns, subscriber ids.
#include "core/auth.hpp"
#include "core/auth_audience.hpp"
#include "core/auth_gate.hpp"
#include "core/auth_json.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace pgbs::auth;

namespace {

constexpr int64_t kNow = 1796115600; // the generator's clock, 2026-12-01T09:00:00Z

std::vector<std::vector<std::string>> fixture_rows() {
  std::ifstream in(FIXTURES_DIR "/signed_names.tsv");
  EXPECT_TRUE(in.good()) << FIXTURES_DIR;
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string col;
    while (std::getline(ss, col, '\t'))
      cols.push_back(col);
    rows.push_back(cols);
  }
  return rows;
}

std::string key_of(const std::string &kind, const std::string &secret) {
  return kind == "raw" ? secret : derive_turbo_key(secret, kind == "skb1");
}

std::string flip(std::string s, size_t at) {
  s[at] = s[at] == 'A' ? 'B' : 'A';
  return s;
}

} // namespace

TEST(SignedNames, RailsVectors) {
  int checked = 0;
  for (const auto &r : fixture_rows()) {
    if (r[0] != "ok" && r[0] != "fail")
      continue;
    ASSERT_EQ(r.size(), 7u);
    const std::string key = key_of(r[1], r[2]);
    std::string name, why;
    const bool ok = verify_signed_name(r[5], {key}, std::stoll(r[3]), &name, &why);
    EXPECT_EQ(ok, r[0] == "ok") << r[6] << ": " << why;
    if (ok) {
      EXPECT_EQ(name, r[4]) << r[6];
    }
    // The same token under the other key kind, or tampered, never verifies.
    for (const char *other : {"raw", "skb", "skb1"})
      if (r[1] != other) {
        EXPECT_FALSE(verify_signed_name(r[5], {key_of(other, r[2])}, std::stoll(r[3]), &name, &why))
            << r[6];
      }
    EXPECT_FALSE(verify_signed_name(flip(r[5], 2), {key}, std::stoll(r[3]), &name, &why)) << r[6];
    checked++;
  }
  EXPECT_GE(checked, 20);
}

TEST(SignedNames, TurboKeyDerivation) {
  bool seen = false;
  for (const auto &r : fixture_rows())
    if (r[0] == "key") {
      EXPECT_EQ(to_hex(key_of(r[1], r[2])), r[3]);
      seen = true;
    }
  EXPECT_TRUE(seen);
}

TEST(SignedNames, DocumentedExampleAndRoundTrip) {
  const std::string key(64, 'a');
  EXPECT_EQ(sign_name("chat", key),
            "ImNoYXQi--e1051e5eb43d9af0f34d463563153fd301e2faa38160efe648ece0d226fde283");
  std::string name, why;
  ASSERT_TRUE(verify_signed_name(sign_name("a/b+c", key), {"other", key}, kNow, &name, &why));
  EXPECT_EQ(name, "a/b+c");
}

TEST(SignedNames, Refusals) {
  const std::string key(64, 'a');
  const std::string good = sign_name("chat", key);
  std::string name, why;
  EXPECT_FALSE(verify_signed_name("", {key}, kNow, &name, &why));
  EXPECT_EQ(why, "signed name: empty");
  EXPECT_FALSE(verify_signed_name(good, {}, kNow, &name, &why)); // no key configured
  EXPECT_FALSE(verify_signed_name(good, {""}, kNow, &name, &why));
  EXPECT_FALSE(verify_signed_name(good, {"b"}, kNow, &name, &why));
  EXPECT_EQ(why, "signed name: bad signature");
  // Upper-case digest, missing digest, digest one short, separator alone.
  std::string upper = good;
  for (size_t i = good.find("--") + 2; i < upper.size(); i++)
    upper[i] = static_cast<char>(toupper(upper[i]));
  EXPECT_FALSE(verify_signed_name(upper, {key}, kNow, &name, &why));
  EXPECT_FALSE(verify_signed_name("ImNoYXQi", {key}, kNow, &name, &why));
  EXPECT_FALSE(verify_signed_name(good.substr(0, good.size() - 1), {key}, kNow, &name, &why));
  EXPECT_FALSE(verify_signed_name("--" + std::string(64, 'a'), {key}, kNow, &name, &why));
  // Malformed Base64 that is correctly signed.
  for (std::string data : {"ImNoYXQi!", "ImNoYXQ", "Im NoYXQi", "ImNoYXQi===", "ImNo+XQ_"}) {
    const std::string tok = data + "--" + to_hex(hmac_sha256(key, data));
    EXPECT_FALSE(verify_signed_name(tok, {key}, kNow, &name, &why)) << data;
  }
  // Signed JSON that is not a name, or an envelope of the wrong shape.
  for (std::string payload :
       {"", "\"\"", "null", "[\"chat\"]", "{\"name\":\"chat\"}", "{\"_rails\":\"chat\"}",
        "{\"_rails\":{\"data\":\"a\",\"message\":\"ImEi\"}}", "{\"_rails\":{\"exp\":null}}",
        "{\"_rails\":{\"data\":\"a\",\"exp\":\"tomorrow\"}}", "\"chat\" x", "\"ch\\u0000at\""}) {
    const std::string data = base64_encode(payload, false);
    const std::string tok = data + "--" + to_hex(hmac_sha256(key, data));
    EXPECT_FALSE(verify_signed_name(tok, {key}, kNow, &name, &why)) << payload;
  }
  const std::string huge(kMaxCredentialBytes + 1, 'A');
  EXPECT_FALSE(verify_signed_name(huge + "--" + std::string(64, 'a'), {key}, kNow, &name, &why));
  EXPECT_EQ(why, "signed name: too long");
}

TEST(SignedNames, LooksSigned) {
  EXPECT_TRUE(
      looks_signed("ImNoYXQi--e1051e5eb43d9af0f34d463563153fd301e2faa38160efe648ece0d226fde283"));
  EXPECT_FALSE(looks_signed("chat"));
  EXPECT_FALSE(looks_signed("a--b"));
  EXPECT_FALSE(looks_signed("--e1051e5eb43d9af0f34d463563153fd301e2faa38160efe648ece0d226fde283"));
}

TEST(Iso8601, Forms) {
  int64_t t = 0;
  ASSERT_TRUE(parse_iso8601("2026-12-01T09:00:00.000Z", &t));
  EXPECT_EQ(t, kNow);
  ASSERT_TRUE(parse_iso8601("2026-12-01T10:00:00+01:00", &t));
  EXPECT_EQ(t, kNow);
  ASSERT_TRUE(parse_iso8601("1970-01-01T00:00:00Z", &t));
  EXPECT_EQ(t, 0);
  for (const char *bad : {"", "2026-12-01", "2026-12-01T09:00:00", "2026-13-01T09:00:00Z",
                          "2026-12-01T09:00:00.Z", "2026-12-01T09:00:00Zx", "x026-12-01T09:00:00Z"})
    EXPECT_FALSE(parse_iso8601(bad, &t)) << bad;
}

TEST(Base64, Alphabets) {
  std::string out;
  ASSERT_TRUE(base64_decode("aGk=", &out));
  EXPECT_EQ(out, "hi");
  ASSERT_TRUE(base64_decode("aGk", &out));
  EXPECT_EQ(out, "hi");
  ASSERT_TRUE(base64_decode("-_8", &out));
  EXPECT_EQ(out, "\xfb\xff");
  ASSERT_TRUE(base64_decode("+/8=", &out));
  EXPECT_EQ(out, "\xfb\xff");
  EXPECT_FALSE(base64_decode("+_8=", &out)); // two alphabets
  EXPECT_FALSE(base64_decode("aGl=", &out)); // bits past the end
  EXPECT_FALSE(base64_decode("a", &out));
  EXPECT_FALSE(base64_decode("aG=k", &out));
  EXPECT_FALSE(base64_decode("aGk==", &out));
  for (int n = 0; n < 40; n++) {
    std::string in;
    for (int i = 0; i < n; i++)
      in.push_back(static_cast<char>(i * 37 + n));
    for (bool url : {false, true}) {
      ASSERT_TRUE(base64_decode(base64_encode(in, url), &out));
      EXPECT_EQ(out, in);
    }
  }
}

TEST(Jwt, VectorsMadeElsewhere) {
  int checked = 0;
  for (const auto &r : fixture_rows()) {
    if (r[0] != "jwt")
      continue;
    Claims c;
    std::string why;
    const bool ok = verify_jwt(r[5], r[1], std::stoll(r[2]), &c, &why);
    EXPECT_EQ(ok, r[3] == "ok") << r[6] << ": " << why;
    if (ok) {
      std::string joined;
      for (const auto &s : c.streams)
        joined += (joined.empty() ? "" : ",") + s;
      EXPECT_EQ(joined, r[4]) << r[6];
    } else {
      EXPECT_EQ(why, r[4]) << r[6];
    }
    checked++;
  }
  EXPECT_GE(checked, 10);
}

TEST(Jwt, SignAndVerify) {
  const std::string secret = "s3cret";
  const std::string tok = sign_jwt({"chat", "room:*"}, kNow, kNow + 60, std::string("alice"),
                                   "{\"role\":\"admin\"}", secret);
  Claims c;
  std::string why;
  ASSERT_TRUE(verify_jwt(tok, secret, kNow, &c, &why)) << why;
  EXPECT_EQ(c.streams, (std::vector<std::string>{"chat", "room:*"}));
  ASSERT_TRUE(c.sub.has_value());
  EXPECT_EQ(*c.sub, "alice");
  EXPECT_EQ(c.ctx, "{\"role\":\"admin\"}");
  EXPECT_EQ(c.exp, kNow + 60);
  EXPECT_FALSE(verify_jwt(tok, "other", kNow, &c, &why));
  EXPECT_FALSE(verify_jwt(tok, "", kNow, &c, &why));
  EXPECT_FALSE(verify_jwt(tok, secret, kNow + 60 + kLeewaySeconds + 1, &c, &why));
  EXPECT_EQ(why, "token: expired");
  EXPECT_TRUE(verify_jwt(tok, secret, kNow + 60 + kLeewaySeconds, &c, &why));
  // Every single-character change is refused.
  for (size_t i = 0; i < tok.size(); i++) {
    if (tok[i] == '.')
      continue;
    std::string t = tok;
    t[i] = t[i] == 'x' ? 'y' : 'x';
    EXPECT_FALSE(verify_jwt(t, secret, kNow, &c, &why)) << i;
  }
}

TEST(Jwt, Malformed) {
  Claims c;
  std::string why;
  for (const char *bad : {"", "a", "a.b", "a.b.c.d", "..", "eyJ.eyJ.", "a=.b.c", "a+b.c.d"})
    EXPECT_FALSE(verify_jwt(bad, "k", kNow, &c, &why)) << bad;
  const std::string huge(kMaxCredentialBytes + 1, 'a');
  EXPECT_FALSE(verify_jwt(huge, "k", kNow, &c, &why));
  // A bad sub is refused even when signed.
  EXPECT_FALSE(verify_jwt(sign_jwt({"a"}, kNow, kNow + 60, std::string("has space"), "", "k"), "k",
                          kNow, &c, &why));
  EXPECT_EQ(why, "token: bad sub claim");
}

TEST(Patterns, AnyGrant) {
  // The glob itself is text::glob (test_text.cpp): case-sensitive here.
  EXPECT_TRUE(any_pattern_matches({"x", "room*"}, "room9"));
  EXPECT_FALSE(any_pattern_matches({"x", "room*"}, "Room9"));
  EXPECT_FALSE(any_pattern_matches({}, "room9"));
}

TEST(SubscriberIds, Validation) {
  std::string why;
  EXPECT_TRUE(valid_subscriber_id("alice", &why));
  EXPECT_TRUE(valid_subscriber_id("user:42@example.org", &why));
  EXPECT_TRUE(valid_subscriber_id("j\xc3\xbcrgen", &why));
  EXPECT_TRUE(valid_subscriber_id(std::string(128, 'x'), &why));
  EXPECT_FALSE(valid_subscriber_id(std::string(129, 'x'), &why));
  EXPECT_FALSE(valid_subscriber_id("", &why));
  EXPECT_FALSE(valid_subscriber_id("a b", &why));
  EXPECT_FALSE(valid_subscriber_id("a\nb", &why));
  EXPECT_FALSE(valid_subscriber_id("a,b", &why));
  EXPECT_FALSE(valid_subscriber_id("\xc3", &why));
  EXPECT_FALSE(valid_subscriber_id("\xed\xa0\x80", &why)); // a surrogate
}

TEST(GemNames, Normalisation) {
  EXPECT_EQ(gem_stream_name("chat"), "chat");
  EXPECT_EQ(gem_stream_name("ai_chat_3a4f9c21b7d20e18:messages"),
            "ai_chat_3a4f9c21b7d20e18_messages");
  EXPECT_EQ(gem_stream_name("gid://app/Room/1:messages"), "gid_approom1_messages");
  EXPECT_EQ(gem_stream_name(""), "");
  EXPECT_EQ(gem_stream_name("a..b--c"), "a_b_c");
  EXPECT_EQ(gem_stream_name(":x:"), "x");
}

TEST(Json, StrictParse) {
  json::Value v;
  std::string err;
  ASSERT_TRUE(
      json::parse(" {\"a\": [1, 2.5e3, true, null, \"\\u00e9\\ud83d\\ude00\"]} ", &v, &err));
  const json::Value *a = v.get("a");
  ASSERT_TRUE(a && a->items.size() == 5);
  EXPECT_EQ(a->items[1].number, 2500);
  EXPECT_EQ(a->items[4].str, "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(a->raw, "[1, 2.5e3, true, null, \"\\u00e9\\ud83d\\ude00\"]");
  for (const char *bad : {"", "{", "{\"a\":1,\"a\":2}", "[1,]", "01", "1.", "\"\\ud800\"",
                          "\"a\x01\"", "tru", "{} {}", "\"\\x\"", "\"\xff\""})
    EXPECT_FALSE(json::parse(bad, &v, &err)) << bad;
  EXPECT_FALSE(json::parse(std::string(40, '[') + std::string(40, ']'), &v, &err));
  EXPECT_EQ(json::quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

TEST(Gate, Decisions) {
  Gate g;
  g.configure({std::string(64, 'a'), "", "jk"});
  Identity none, id;
  std::string why;
  EXPECT_EQ(g.authenticate({"", "", ""}, kNow, &none, &why), 0);
  EXPECT_FALSE(none.present);
  // Public streams need nothing; private and unknown ones look alike.
  EXPECT_EQ(Gate::authorize(none, "pub", true, true, &why), 0);
  EXPECT_EQ(Gate::authorize(none, "priv", true, false, &why), 401);
  const std::string private_reason = why;
  EXPECT_EQ(Gate::authorize(none, "nope", false, false, &why), 401);
  EXPECT_EQ(why, private_reason);
  // A signed name covers the names of the gem's stream for it only (which
  // of them is its stream the engine decides by queue table: test_gem_stream).
  ASSERT_EQ(g.authenticate({sign_name("a:b", std::string(64, 'a')), "", ""}, kNow, &id, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "a_b", true, false, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "a:b", true, false, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "other", true, false, &why), 403);
  EXPECT_EQ(Gate::authorize(id, "other", false, false, &why), 403);
  EXPECT_EQ(Gate::authorize(id, "pgbus_a_b", true, false, &why), 0); // auto_attach's other name
  EXPECT_EQ(Gate::authorize(id, "a_b_c", true, false, &why), 403);
  EXPECT_EQ(g.authenticate({sign_name("a", "zz"), "", ""}, kNow, &id, &why), 401);
  // JWTs: the bearer/query token wins over the cookie; patterns; sub binding.
  const std::string tok = sign_jwt({"room_*"}, kNow, kNow + 60, std::string("alice"), "", "jk");
  ASSERT_EQ(g.authenticate({"", tok, "garbage"}, kNow, &id, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "room_1", true, false, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "room_9", false, false, &why), 404);
  EXPECT_EQ(Gate::authorize(id, "chat", true, false, &why), 403);
  // A bad cookie counts as none (public streams keep working) and says why.
  ASSERT_EQ(g.authenticate({"", "", "garbage"}, kNow, &id, &why), 0);
  EXPECT_FALSE(id.present);
  EXPECT_EQ(Gate::authorize(id, "pub", true, true, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "priv", true, false, &why), 401);
  EXPECT_NE(why.find("token cookie"), std::string::npos);
  ASSERT_EQ(g.authenticate({"", "", tok}, kNow, &id, &why), 0);
  EXPECT_EQ(Gate::authorize_subscriber(id, "alice", &why), 0);
  EXPECT_EQ(Gate::authorize_subscriber(id, "bob", &why), 403);
  EXPECT_EQ(Gate::authorize_subscriber(id, "a b", &why), 400);
  // A stored cursor needs a credential naming it, on public streams too.
  EXPECT_EQ(Gate::authorize_subscriber(none, "bob", &why), 403);
  EXPECT_NE(why.find("sub"), std::string::npos);
  Identity nosub;
  nosub.present = true;
  EXPECT_EQ(Gate::authorize_subscriber(nosub, "bob", &why), 403);
  // Without keys, signed names and JWTs are refused with a clear reason.
  Gate off;
  off.configure({});
  EXPECT_EQ(off.authenticate({sign_name("a", "k"), "", ""}, kNow, &id, &why), 401);
  EXPECT_NE(why.find("not enabled"), std::string::npos);
  ASSERT_EQ(off.authenticate({"", tok, ""}, kNow, &id, &why), 0);
  EXPECT_EQ(Gate::authorize(id, "priv", true, false, &why), 401);
  EXPECT_NE(why.find("jwt_secret"), std::string::npos);
}

TEST(Secrets, FileForm) {
  std::string s, err;
  ASSERT_TRUE(resolve_secret("plain", &s, &err));
  EXPECT_EQ(s, "plain");
  const std::string path = std::string(testing::TempDir()) + "pgbus_auth_secret";
  { std::ofstream(path) << "from-file\n"; }
  ASSERT_TRUE(resolve_secret("file:" + path, &s, &err)) << err;
  EXPECT_EQ(s, "from-file");
  { std::ofstream(path) << ""; }
  EXPECT_FALSE(resolve_secret("file:" + path, &s, &err));
  EXPECT_FALSE(resolve_secret("file:/nonexistent/x", &s, &err));
  EXPECT_EQ(err.find("from-file"), std::string::npos);
}

TEST(Audiences, CachedFailClosed) {
  int calls = 0;
  Audiences a([&](const std::string &rule, const std::string &ctx) -> std::optional<bool> {
    calls++;
    if (rule == "error")
      return std::nullopt;
    if (rule == "throws")
      throw std::runtime_error("evaluator broke");
    return ctx.find(rule) != std::string::npos;
  });
  EXPECT_TRUE(a.set_rules({{"admins", "admin"}, {"bad", "error"}, {"worse", "throws"}}));
  EXPECT_FALSE(a.set_rules({{"admins", "admin"}, {"bad", "error"}, {"worse", "throws"}}));
  EXPECT_TRUE(a.visible("{\"role\":\"admin\"}", "admins"));
  EXPECT_FALSE(a.visible("{\"role\":\"viewer\"}", "admins"));
  for (int i = 0; i < 100; i++) // once per context and label, not per message
    EXPECT_TRUE(a.visible("{\"role\":\"admin\"}", "admins"));
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(a.visible("", "admins")) << "no context";
  EXPECT_FALSE(a.visible("{\"role\":\"admin\"}", "nobody")) << "unknown label";
  EXPECT_FALSE(a.visible("{\"role\":\"admin\"}", "bad")) << "rule error";
  EXPECT_FALSE(a.visible("{\"role\":\"admin\"}", "worse")) << "evaluator failure";
  EXPECT_EQ(calls, 4);
  // A changed rule is evaluated again; a removed label hides.
  EXPECT_TRUE(a.set_rules({{"admins", "viewer"}}));
  EXPECT_FALSE(a.visible("{\"role\":\"admin\"}", "admins"));
  EXPECT_TRUE(a.visible("{\"role\":\"viewer\"}", "admins"));
  EXPECT_EQ(calls, 6);
  EXPECT_TRUE(a.set_rules({}));
  EXPECT_FALSE(a.visible("{\"role\":\"viewer\"}", "admins"));
  // The cache per label is bounded.
  a.set_rules({{"x", "x"}});
  for (size_t i = 0; i < Audiences::kMaxCachedPerLabel + 10; i++)
    a.visible("ctx" + std::to_string(i), "x");
  EXPECT_EQ(a.evaluations(), 6 + Audiences::kMaxCachedPerLabel + 10);
}
