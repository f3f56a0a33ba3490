// Admission (auth::admit): the access decision of an SSE request, over a
// catalog held in a map (the engine is the catalog in the product).
#include "core/auth.hpp"
#include "core/auth_admit.hpp"

#include <gtest/gtest.h>

#include <map>

using namespace pgbs::auth;
using Verdict = Admission::Verdict;

namespace {

constexpr int64_t kNow = 1800000000;
const std::string kSigning = "signing", kJwt = "jwt";

struct MapCatalog : Catalog {
  std::map<std::string, bool> streams; // name -> public
  bool unreadable = false;
  std::map<std::string, std::string> signed_targets; // logical -> catalog name
  std::vector<std::pair<std::string, bool>> asked;   // (name, may_read), in order
  int signed_asked = 0;

  Found find_stream(const std::string &name, bool may_read, bool *is_public) override {
    asked.emplace_back(name, may_read);
    return read(streams, name, is_public);
  }
  Found find_signed_stream(const std::string &logical, std::string *name) override {
    signed_asked++;
    return read(signed_targets, logical, name);
  }
  template <typename V>
  Found read(const std::map<std::string, V> &m, const std::string &key, V *out) {
    if (unreadable)
      return Found::Unreadable;
    auto it = m.find(key);
    if (it == m.end())
      return Found::No;
    *out = it->second;
    return Found::Yes;
  }
};

Gate gate() {
  Gate g;
  Secrets s;
  s.signing_secret = kSigning;
  s.jwt_secret = kJwt;
  g.configure(s);
  return g;
}

Admission run(MapCatalog &cat, const Credentials &creds, const std::vector<std::string> &streams,
              bool presence = false, const std::string &subscriber = "") {
  const Gate g = gate();
  return admit(g, {creds, kNow, streams, presence, subscriber}, cat);
}

std::string jwt(std::vector<std::string> grants, std::optional<std::string> sub = std::nullopt) {
  return sign_jwt(grants, kNow, kNow + 60, sub, "", kJwt);
}

MapCatalog catalog() {
  MapCatalog c;
  c.streams = {{"pub", true}, {"priv", false}, {"room_1", false}};
  return c;
}

} // namespace

TEST(Admit, PublicStreamsNeedNoCredentialAndAreReadWithout) {
  MapCatalog cat = catalog();
  const Admission a = run(cat, {}, {"pub"});
  EXPECT_EQ(a.verdict, Verdict::Allow);
  EXPECT_EQ(a.open, (std::vector<std::string>{"pub"}));
  EXPECT_TRUE(a.awaited.empty());
  EXPECT_FALSE(a.who.present);
  // An anonymous request may be answered from what the catalog holds.
  ASSERT_EQ(cat.asked.size(), 1u);
  EXPECT_FALSE(cat.asked[0].second);
}

TEST(Admit, PrivateAndUnknownLookAlikeWithoutACredential) {
  MapCatalog cat = catalog();
  const Admission priv = run(cat, {}, {"priv"});
  const Admission unknown = run(cat, {}, {"nothing"});
  EXPECT_EQ(priv.verdict, Verdict::Refuse);
  EXPECT_EQ(priv.status, 401);
  EXPECT_EQ(unknown.verdict, Verdict::Refuse);
  EXPECT_EQ(unknown.status, 401);
  EXPECT_EQ(priv.reason, unknown.reason);
  EXPECT_EQ(priv.reason.back(), '\n');
}

TEST(Admit, AnAuthorisedUnknownStreamIsAwaited) {
  MapCatalog cat = catalog();
  const Admission a = run(cat, {"", jwt({"room_*"}), ""}, {"room_1", "room_9", "pub"});
  EXPECT_EQ(a.verdict, Verdict::Wait);
  EXPECT_EQ(a.open, (std::vector<std::string>{"room_1", "pub"}));
  EXPECT_EQ(a.awaited, (std::vector<std::string>{"room_9"}));
  ASSERT_EQ(cat.asked.size(), 3u);
  EXPECT_TRUE(cat.asked[1].second); // a verified credential may make the catalog read
}

TEST(Admit, ACredentialThatDoesNotCoverIsRefused) {
  MapCatalog cat = catalog();
  const Admission a = run(cat, {"", jwt({"room_*"}), ""}, {"room_1", "priv"});
  EXPECT_EQ(a.verdict, Verdict::Refuse);
  EXPECT_EQ(a.status, 403);
  // Unknown outside the grants: 403 like a private stream, not "wait".
  EXPECT_EQ(run(cat, {"", jwt({"room_*"}), ""}, {"other"}).status, 403);
}

TEST(Admit, NamesTwiceOrNoneAreBadRequests) {
  MapCatalog cat = catalog();
  Admission a = run(cat, {}, {"pub", "pub"});
  EXPECT_EQ(a.verdict, Verdict::Refuse);
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.reason, "stream named twice: pub\n");
  a = run(cat, {"", jwt({"room_*"}), ""}, {"room_9", "room_9"});
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.reason, "stream named twice: room_9\n");
  a = run(cat, {}, {});
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.reason, "no stream named\n");
}

TEST(Admit, AnUnreadableCatalogMeansRetry) {
  MapCatalog cat = catalog();
  cat.unreadable = true;
  const Admission a = run(cat, {}, {"pub"});
  EXPECT_EQ(a.verdict, Verdict::Retry);
  EXPECT_NE(a.reason.find("cannot read the catalog"), std::string::npos);
  EXPECT_EQ(run(cat, {sign_name("room:1", kSigning), "", ""}, {}).verdict, Verdict::Retry);
}

TEST(Admit, PresenceNeedsACredentialEvenOnAPublicStream) {
  MapCatalog cat = catalog();
  Admission a = run(cat, {}, {"pub"}, true);
  EXPECT_EQ(a.verdict, Verdict::Refuse);
  EXPECT_EQ(a.status, 401);
  EXPECT_EQ(a.reason.rfind("presence: ", 0), 0u);
  // An awaited stream needs it as well.
  a = run(cat, {"", jwt({"pub", "room_*"}), ""}, {"pub", "room_7"}, true);
  EXPECT_EQ(a.verdict, Verdict::Wait);
}

TEST(Admit, ASubscriberNeedsACredentialNamingIt) {
  MapCatalog cat = catalog();
  EXPECT_EQ(run(cat, {}, {"pub"}, false, "alice").status, 403);
  EXPECT_EQ(run(cat, {"", jwt({"*"}, "bob"), ""}, {"pub"}, false, "alice").status, 403);
  EXPECT_EQ(run(cat, {"", jwt({"*"}, "alice"), ""}, {"pub"}, false, "a b").status, 400);
  const Admission a = run(cat, {"", jwt({"*"}, "alice"), ""}, {"pub"}, false, "alice");
  EXPECT_EQ(a.verdict, Verdict::Allow);
  EXPECT_EQ(a.who.sub, std::optional<std::string>("alice"));
  // The streams are decided first: a refused stream is what the client hears.
  EXPECT_EQ(run(cat, {}, {"priv"}, false, "alice").status, 401);
}

TEST(Admit, ASignedNameOpensTheCatalogsStreamForIt) {
  MapCatalog cat = catalog();
  cat.signed_targets = {{"room:1", "room_1"}, {"room:2", "room_2"}};
  Admission a = run(cat, {sign_name("room:1", kSigning), "", ""}, {});
  EXPECT_EQ(a.verdict, Verdict::Allow);
  EXPECT_EQ(a.open, (std::vector<std::string>{"room_1"}));
  a = run(cat, {sign_name("room:2", kSigning), "", ""}, {}); // not born yet
  EXPECT_EQ(a.verdict, Verdict::Wait);
  EXPECT_EQ(a.awaited, (std::vector<std::string>{"room_2"}));
  a = run(cat, {sign_name("room:3", kSigning), "", ""}, {}); // no stream can be it
  EXPECT_EQ(a.verdict, Verdict::Refuse);
  EXPECT_EQ(a.status, 404);
}

TEST(Admit, BadSignedNamesAreRefusedWithoutReadingTheCatalog) {
  MapCatalog cat = catalog();
  Admission a = run(cat, {sign_name("room:1", "not-the-key"), "", ""}, {});
  EXPECT_EQ(a.verdict, Verdict::Refuse);
  EXPECT_EQ(a.status, 401);
  a = run(cat, {sign_name(":", kSigning), "", ""}, {});
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(a.reason.find("maps to no stream name"), std::string::npos);
  a = run(cat, {sign_name(std::string(60, 'x'), kSigning), "", ""}, {});
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(a.reason.find("too long"), std::string::npos);
  EXPECT_EQ(cat.signed_asked, 0);
  EXPECT_TRUE(cat.asked.empty());
}
