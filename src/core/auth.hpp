// Credentials for private streams: Rails/Turbo signed stream names
// (ActiveSupport::MessageVerifier, SHA256, JSON), HS256 JWTs, the stream
// patterns a JWT grants, and durable subscriber ids. Pure C++ (OpenSSL's
// libcrypto for HMAC and PBKDF2), no PostgreSQL.
//
// Every signature is compared in constant time. Nothing here logs, and no
// error text ever contains a key.
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pgbs::auth {

// Larger credentials are refused before any work (a cookie-sized bound).
constexpr size_t kMaxCredentialBytes = 8192;
constexpr size_t kMaxGrantedStreams = 256;
constexpr size_t kMaxSubscriberIdBytes = 128;
// exp/nbf are checked with this much clock skew allowed.
constexpr int64_t kLeewaySeconds = 30;

// ---- primitives ------------------------------------------------------------

// Equal length and bytes, in time that depends on the length only.
bool constant_time_equal(std::string_view a, std::string_view b);
// HMAC-SHA256 of msg under key: 32 raw bytes.
std::string hmac_sha256(std::string_view key, std::string_view msg);
// Lowercase hex of bytes.
std::string to_hex(std::string_view bytes);
// turbo-rails' Turbo.signed_stream_verifier_key for an app's secret_key_base:
// PBKDF2-HMAC, salt "turbo/signed_stream_verifier_key", 1000 iterations, 64
// bytes; SHA256 with Rails >= 7.0 defaults, SHA1 before (sha1 = true).
std::string derive_turbo_key(std::string_view secret_key_base, bool sha1 = false);

// Base64 in the standard or the URL-safe alphabet (not both), padded or not.
// Refuses anything else (whitespace, stray padding, bits set past the end).
bool base64_decode(std::string_view in, std::string *out);
std::string base64_encode(std::string_view in, bool url_safe_unpadded);

// ---- signed stream names ---------------------------------------------------

// True when text has the shape of a MessageVerifier token ("<base64>--<64 hex>"),
// so that /streams/<token> can be told apart from a stream name.
bool looks_signed(std::string_view text);

// Verifies a MessageVerifier token against each key in turn and returns the
// stream name it carries: a JSON string, or Rails' metadata envelope
// {"_rails":{"message":<Base64 of the JSON value>,"exp","pur"}} (Rails < 7.1)
// or {"_rails":{"data":<value>,"exp","pur"}} (7.1+). Refused when no key
// matches, when it expired (exp, ISO 8601, before now_s), when a purpose is
// set (these names are made without one), or when the value is not a string.
// *why gets a reason fit for a client (never a key).
bool verify_signed_name(std::string_view token, const std::vector<std::string> &keys, int64_t now_s,
                        std::string *name, std::string *why);
// Makes such a token (no envelope), as Rails would: for tests and tools.
std::string sign_name(std::string_view name, std::string_view key);

// Seconds since the epoch of an ISO 8601 UTC/offset timestamp
// ("2026-12-01T09:00:00.000Z", "...+01:00"); false if malformed.
bool parse_iso8601(std::string_view s, int64_t *epoch_s);

// ---- JWT (HS256) -----------------------------------------------------------

struct Claims {
  std::vector<std::string> streams; // names or patterns ("chat:*", "*")
  std::optional<std::string> sub;   // identity; a durable subscriber id
  std::string ctx;                  // JSON object text (audience context), "" if none
  int64_t exp = 0;
};

// Verifies a compact HS256 JWT: header alg exactly "HS256" (no "none", no
// other algorithm, no "crit"), signature under secret, "exp" required and
// not past (leeway kLeewaySeconds), "nbf" not in the future, "streams" a
// string or an array of strings (at most kMaxGrantedStreams), "sub" a valid
// subscriber id if present, "ctx" an object if present.
bool verify_jwt(std::string_view token, std::string_view secret, int64_t now_s, Claims *out,
                std::string *why);
// Mints one (what pgbus_stream.sign_token() returns). ctx_json must be a JSON
// object or empty.
std::string sign_jwt(const std::vector<std::string> &streams, int64_t iat, int64_t exp,
                     const std::optional<std::string> &sub, std::string_view ctx_json,
                     std::string_view secret);

// ---- secrets -----------------------------------------------------------------

// The secret a setting names: its value, or with "file:<path>" the contents
// of that file (at most 4 kB, one trailing newline removed). PostgreSQL logs
// a setting's new value when a reload changes it; the file form keeps the
// secret itself out of the log. False with *err (which names the path, never
// the contents) when the file cannot be read or is empty.
bool resolve_secret(std::string_view setting, std::string *secret, std::string *err);

// ---- what a credential grants ----------------------------------------------

// Whether a name matches one of the patterns a credential grants: "*"
// stands for any run of characters (also none), case-sensitive (text::glob).
bool any_pattern_matches(const std::vector<std::string> &patterns, std::string_view name);

// Durable subscriber ids: 1..kMaxSubscriberIdBytes bytes of UTF-8, ASCII
// letters, digits and "-_.:@|+=/" or non-ASCII characters; no spaces or
// control characters.
bool valid_subscriber_id(std::string_view id, std::string *why);

// The stream auto_attach makes of the pgbus gem's queue for a logical stream
// name: names::queue_name() without its prefix ("ai_chat_3a4f:messages" ->
// "ai_chat_3a4f_messages"); "" when the gem would refuse the name.
std::string gem_stream_name(std::string_view name);

} // namespace pgbs::auth
