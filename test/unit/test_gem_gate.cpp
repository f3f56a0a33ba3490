// A JWT beside a signed name (the gem's routes): it brings sub and ctx for
// the connection; the signed name alone decides the stream.
#include "core/auth.hpp"
#include "core/auth_gate.hpp"

#include <gtest/gtest.h>

using namespace pgbs::auth;

namespace {

constexpr int64_t kNow = 1800000000;

Gate gate() {
  Gate g;
  Secrets s;
  s.signing_secret = "signing";
  s.jwt_secret = "jwt";
  g.configure(s);
  return g;
}

} // namespace

TEST(GemGate, JwtBesideSignedNameGivesSubAndCtx) {
  const Gate g = gate();
  const std::string name = sign_name("room:1", "signing");
  const std::string jwt = sign_jwt({"other_*"}, kNow, kNow + 60, "alice", R"({"role":"admin"})", "jwt");
  Identity id;
  std::string why;
  for (auto [bearer, cookie] : {std::pair<std::string, std::string>{jwt, ""}, {"", jwt}}) {
    ASSERT_EQ(g.authenticate({name, bearer, cookie}, kNow, &id, &why), 0) << why;
    EXPECT_TRUE(id.present);
    EXPECT_EQ(id.signed_name, "room:1");
    ASSERT_TRUE(id.sub.has_value());
    EXPECT_EQ(*id.sub, "alice");
    EXPECT_EQ(id.ctx, R"({"role":"admin"})");
    EXPECT_TRUE(id.grants.empty()); // the JWT's streams claim opens nothing here
    EXPECT_EQ(Gate::authorize(id, "room_1", true, false, &why), 0);
    EXPECT_EQ(Gate::authorize(id, "other_1", true, false, &why), 403);
  }
}

TEST(GemGate, BadJwtBesideSignedNameIsIgnored) {
  const Gate g = gate();
  const std::string name = sign_name("room:1", "signing");
  const std::string wrong = sign_jwt({"*"}, kNow, kNow + 60, "mallory", R"({"role":"admin"})", "other");
  const std::string expired = sign_jwt({"*"}, kNow - 600, kNow - 300, "eve", "{}", "jwt");
  Identity id;
  std::string why;
  for (const std::string &bad : {wrong, expired, std::string("x.y.z")}) {
    ASSERT_EQ(g.authenticate({name, bad, ""}, kNow, &id, &why), 0);
    EXPECT_TRUE(id.present);
    EXPECT_FALSE(id.sub.has_value());
    EXPECT_EQ(id.ctx, "");
  }
  // A bad signed name is refused whatever JWT comes with it.
  EXPECT_EQ(g.authenticate({sign_name("room:1", "nope"),
                            sign_jwt({"*"}, kNow, kNow + 60, "a", "{}", "jwt"), ""},
                           kNow, &id, &why),
            401);
}
