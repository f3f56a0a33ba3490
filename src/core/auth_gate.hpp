// Who may open a stream: the decision the worker takes for each SSE request
// (401 / 403 / 404 / 400), from the credential it presents and what the
// catalog says of each stream. Pure C++, no PostgreSQL.
//
// Rules (README, "Access control"):
//  * A public stream needs no credential; a private one needs a credential
//    that covers it. A JWT that does not verify (Bearer, ?token= or cookie)
//    counts as absent: a public stream ignores it (an expired cookie, which
//    browsers send unasked, must not break one) and a private one is refused
//    with its fault as the reason. A signed name that does not verify names
//    no stream: 401.
//  * Without a valid credential an unknown stream is refused like a private
//    one (401), and with one that does not cover it like a covered private one
//    is not (403): a refusal never tells whether a stream exists.
//  * ?presence=1 (who else is connected) needs a credential that covers the
//    stream, public or not: a public stream's readers are anonymous.
//  * ?subscriber=<id> must be a valid id and needs, on every stream, a
//    credential whose sub is that very id (403 otherwise).
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pgbs::auth {

struct Secrets {
  std::string signing_secret;  // raw MessageVerifier key (pgbus gem)
  std::string secret_key_base; // Rails app secret; turbo-rails keys are derived from it
  std::string jwt_secret;      // HS256
};

// What a request presents to prove who it is, as the HTTP layer read it:
// filled once per request (http::Request), carried whole to the engine
// (engine::Subscribe) and verified by Gate::authenticate.
struct Credentials {
  std::string signed_name;  // the signed route's name (/pgbus/streams/{x}, /streams/{x})
  std::string token;        // Authorization: Bearer, else ?token=
  std::string cookie_token; // the token cookie (pgbus_stream.token_cookie)
};

// What a verified credential says.
struct Identity {
  bool present = false;            // a credential was presented and verified
  std::string signed_name;         // signed route: the name it carries
  std::vector<std::string> grants; // JWT: names or patterns
  std::optional<std::string> sub;
  std::string ctx;        // JSON object text or ""
  std::string fault;      // why a JWT given was not taken ("" if it was, or none was given)
  int64_t expires_at = 0; // JWT: refused once the Unix time is past this (exp + leeway); 0: never
};

class Gate {
public:
  // Takes new secrets; derives the turbo-rails keys only when
  // secret_key_base changed (PBKDF2 is deliberately slow).
  void configure(const Secrets &s);

  // Verifies the credential of a request: the signed name of the route if
  // any, else the first of its token and cookie token that is not empty.
  // Beside a signed name, a JWT that verifies (the token, else the cookie
  // token) gives the identity its sub and ctx, never more streams.
  // Returns 0 (with *id filled; id->present false when none was given, or
  // when the JWT did not verify: id->fault says why) or 401 with a reason
  // (a signed name that does not verify).
  int authenticate(const Credentials &creds, int64_t now_s, Identity *id,
                   std::string *reason) const;

  // 0 when id may open the stream `name`; else 401/403/404 with a reason.
  // A signed name covers the catalog names of the gem's stream for it
  // (names::gem_stream): the caller opens the one whose queue is the gem's.
  static int authorize(const Identity &id, std::string_view name, bool known, bool is_public,
                       std::string *reason);
  // 0 when id may receive the presence (who else is connected) of the
  // stream `name`: a credential that covers it, also when it is public.
  static int authorize_presence(const Identity &id, std::string_view name, std::string *reason) {
    return authorize(id, name, true, false, reason);
  }
  // 0 when ?subscriber=<subscriber> (non-empty) may be used; else 400/403.
  static int authorize_subscriber(const Identity &id, std::string_view subscriber,
                                  std::string *reason);

private:
  std::vector<std::string> verifier_keys_; // signing_secret, then the turbo-rails keys
  std::string jwt_secret_;
  std::string signing_secret_, secret_key_base_; // as last configured
};

} // namespace pgbs::auth
