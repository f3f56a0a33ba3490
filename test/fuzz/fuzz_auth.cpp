// libFuzzer target for core/auth: any credential text is refused with a
// reason or accepted, never crashes; accepted Base64 re-encodes to itself
// (modulo alphabet and padding); a JSON value's raw text parses to the same
// value; a token signed here always verifies and any change to it does not.
#include "core/auth.hpp"
#include "core/auth_json.hpp"
#include "core/text.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace pgbs::auth;

namespace {

void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz_auth: %s\n", what);
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  const std::string key(64, 'a');
  std::string name, why, decoded;
  if (verify_signed_name(in, {key}, 1796115600, &name, &why))
    check(!name.empty(), "accepted a signed name without a name");
  Claims claims;
  if (verify_jwt(in, "secret", 1796115600, &claims, &why))
    check(!claims.streams.empty(), "accepted a JWT without streams");
  if (base64_decode(in, &decoded)) {
    std::string again;
    check(base64_decode(base64_encode(decoded, false), &again) && again == decoded,
          "base64 round trip");
  }
  json::Value v;
  if (json::parse(in, &v, nullptr)) {
    json::Value w;
    check(json::parse(v.raw, &w, nullptr) && w.raw == v.raw, "json raw text");
  }
  // The input as a stream name and as a pattern.
  const size_t half = size / 2;
  const std::string_view pat = in.substr(0, half), subject = in.substr(half);
  const bool exact = pgbs::text::glob(pat, subject);
  check(!exact || pgbs::text::glob(pat, subject, pgbs::text::Case::Insensitive),
        "a case-sensitive match is not a case-insensitive one");
  if (valid_subscriber_id(in, &why))
    check(size > 0 && size <= kMaxSubscriberIdBytes, "subscriber id bounds");
  if (!in.empty() && size <= 256) {
    // Names that are UTF-8 without NUL come back; others are refused.
    const bool nameable = json::valid_utf8(in) && in.find('\0') == std::string_view::npos;
    const std::string tok = sign_name(in, key);
    check(verify_signed_name(tok, {key}, 0, &name, &why) == nameable && (!nameable || name == in),
          "signed name round trip");
    std::string bad = tok;
    bad[size % bad.size()] ^= 1;
    check(!verify_signed_name(bad, {key}, 0, &name, &why), "changed signed name verified");
  }
  return 0;
}
