// Who may open a stream (see auth_gate.hpp).
#include "core/auth_gate.hpp"

#include "core/auth.hpp"
#include "core/names.hpp"

namespace pgbs::auth {

void Gate::configure(const Secrets &s) {
  if (!verifier_keys_.empty() && s.signing_secret == signing_secret_ &&
      s.secret_key_base == secret_key_base_) {
    jwt_secret_ = s.jwt_secret;
    return;
  }
  signing_secret_ = s.signing_secret;
  secret_key_base_ = s.secret_key_base;
  jwt_secret_ = s.jwt_secret;
  verifier_keys_.clear();
  if (!s.signing_secret.empty())
    verifier_keys_.push_back(s.signing_secret);
  if (!s.secret_key_base.empty()) {
    verifier_keys_.push_back(derive_turbo_key(s.secret_key_base));       // Rails >= 7.0
    verifier_keys_.push_back(derive_turbo_key(s.secret_key_base, true)); // Rails 6.1
  }
  if (verifier_keys_.empty())
    verifier_keys_.push_back(std::string()); // "configured, with no key"
}

int Gate::authenticate(const Credentials &creds, int64_t now_s, Identity *id,
                       std::string *reason) const {
  const std::string_view signed_name = creds.signed_name;
  const std::string_view bearer_or_query = creds.token, cookie = creds.cookie_token;
  *id = Identity();
  if (!signed_name.empty()) {
    if (verifier_keys_.size() == 1 && verifier_keys_[0].empty()) {
      *reason = "signed stream names are not enabled on this server (set "
                "pgbus_stream.signing_secret or pgbus_stream.secret_key_base)";
      return 401;
    }
    if (!verify_signed_name(signed_name, verifier_keys_, now_s, &id->signed_name, reason))
      return 401;
    id->present = true;
    // A JWT beside it (the app's sign-in cookie, say) brings who reads and
    // the audience context; the signed name alone decides the stream, so
    // the JWT's streams claim is not consulted, and one that does not
    // verify is ignored.
    const std::string_view jwt = bearer_or_query.empty() ? cookie : bearer_or_query;
    Claims c;
    std::string ignored;
    if (!jwt.empty() && verify_jwt(jwt, jwt_secret_, now_s, &c, &ignored)) {
      id->sub = std::move(c.sub);
      id->ctx = std::move(c.ctx);
    }
    return 0;
  }
  const bool from_cookie = bearer_or_query.empty();
  const std::string_view token = from_cookie ? cookie : bearer_or_query;
  if (token.empty())
    return 0;
  Claims c;
  if (!verify_jwt(token, jwt_secret_, now_s, &c, reason)) {
    id->fault = (from_cookie ? "token cookie: " : "") + *reason;
    return 0;
  }
  id->present = true;
  id->grants = std::move(c.streams);
  id->sub = std::move(c.sub);
  id->ctx = std::move(c.ctx);
  id->expires_at = c.exp + kLeewaySeconds; // as verify_jwt accepts it
  return 0;
}

int Gate::authorize(const Identity &id, std::string_view name, bool known, bool is_public,
                    std::string *reason) {
  if (known && is_public)
    return 0;
  if (!id.present) {
    *reason = id.fault.empty() ? "credential required" : id.fault;
    return 401;
  }
  const bool covered = !id.signed_name.empty() ? names::gem_stream_named(id.signed_name, name)
                                               : any_pattern_matches(id.grants, name);
  if (!covered) {
    *reason = "credential does not cover this stream";
    return 403;
  }
  if (!known) {
    *reason = "unknown stream";
    return 404;
  }
  return 0;
}

// A stored cursor is read and written only with a credential whose sub names
// it, public stream or not: an anonymous ?subscriber=alice would otherwise
// resume alice's cursor and move it past what alice has seen.
int Gate::authorize_subscriber(const Identity &id, std::string_view subscriber,
                               std::string *reason) {
  std::string why;
  if (!valid_subscriber_id(subscriber, &why)) {
    *reason = "invalid subscriber: " + why;
    return 400;
  }
  if (!id.present) {
    *reason = "?subscriber= needs a credential whose sub names that subscriber" +
              (id.fault.empty() ? std::string() : " (" + id.fault + ")");
    return 403;
  }
  if (!id.sub) {
    *reason = "credential names no subscriber (sub claim)";
    return 403;
  }
  if (!constant_time_equal(*id.sub, subscriber)) {
    *reason = "credential is for another subscriber";
    return 403;
  }
  return 0;
}

} // namespace pgbs::auth
