// Credentials for private streams (see auth.hpp).
#include "core/auth.hpp"

#include "core/auth_json.hpp"
#include "core/names.hpp"
#include "core/text.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace pgbs::auth {
namespace {

using json::Value;
using Type = json::Value::Type;

bool set_why(std::string *why, const char *text) {
  if (why)
    *why = text;
  return false;
}

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+' || c == '-')
    return 62;
  if (c == '/' || c == '_')
    return 63;
  return -1;
}

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Days since 1970-01-01 of a proleptic Gregorian date.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool digits(std::string_view s, size_t pos, size_t n, int *out) {
  if (pos + n > s.size())
    return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// A JSON NumericDate (seconds, possibly fractional) as whole seconds.
bool numeric_date(const Value *v, int64_t *out) {
  if (!v || !v->is(Type::Number) || !std::isfinite(v->number) || std::fabs(v->number) > 1e15)
    return false;
  *out = static_cast<int64_t>(std::floor(v->number));
  return true;
}

// The stream name inside a verified MessageVerifier payload (the decoded
// Base64 text).
bool signed_payload_name(std::string_view payload, int64_t now_s, std::string *name,
                         std::string *why) {
  Value v;
  if (!json::parse(payload, &v, nullptr))
    return set_why(why, "signed name: not JSON");
  const Value *value = &v;
  Value inner; // Rails < 7.1: the envelope carries the JSON text Base64-encoded
  std::string inner_text;
  if (const Value *rails = v.is(Type::Object) ? v.get("_rails") : nullptr) {
    if (!rails->is(Type::Object))
      return set_why(why, "signed name: bad envelope");
    const Value *pur = rails->get("pur");
    if (pur && !pur->is(Type::Null) && !(pur->is(Type::String) && pur->str.empty()))
      return set_why(why, "signed name: made for another purpose");
    if (const Value *exp = rails->get("exp"); exp && !exp->is(Type::Null)) {
      int64_t at;
      if (!exp->is(Type::String) || !parse_iso8601(exp->str, &at))
        return set_why(why, "signed name: bad expiry");
      if (now_s >= at)
        return set_why(why, "signed name: expired");
    }
    const Value *data = rails->get("data");
    const Value *message = rails->get("message");
    if (data && !message) {
      value = data;
    } else if (message && !data && message->is(Type::String)) {
      if (!base64_decode(message->str, &inner_text) || !json::parse(inner_text, &inner, nullptr))
        return set_why(why, "signed name: bad envelope");
      value = &inner;
    } else {
      return set_why(why, "signed name: bad envelope");
    }
  }
  if (!value->is(Type::String) || value->str.empty())
    return set_why(why, "signed name: not a stream name");
  *name = value->str;
  return true;
}

bool grant_list(const Value *v, std::vector<std::string> *out) {
  if (!v)
    return false;
  if (v->is(Type::String)) {
    out->push_back(v->str);
    return !v->str.empty();
  }
  if (!v->is(Type::Array) || v->items.empty() || v->items.size() > kMaxGrantedStreams)
    return false;
  for (const Value &item : v->items) {
    if (!item.is(Type::String) || item.str.empty())
      return false;
    out->push_back(item.str);
  }
  return true;
}

} // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string hmac_sha256(std::string_view key, std::string_view msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char *>(msg.data()), msg.size(), out, &len))
    return std::string();
  return std::string(reinterpret_cast<char *>(out), len);
}

std::string to_hex(std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string derive_turbo_key(std::string_view secret_key_base, bool sha1) {
  static const char kSalt[] = "turbo/signed_stream_verifier_key";
  unsigned char key[64];
  if (!PKCS5_PBKDF2_HMAC(secret_key_base.data(), static_cast<int>(secret_key_base.size()),
                         reinterpret_cast<const unsigned char *>(kSalt), sizeof(kSalt) - 1, 1000,
                         sha1 ? EVP_sha1() : EVP_sha256(), sizeof(key), key))
    return std::string();
  return std::string(reinterpret_cast<char *>(key), sizeof(key));
}

bool base64_decode(std::string_view in, std::string *out) {
  out->clear();
  bool std_alpha = false, url_alpha = false;
  size_t pad = 0;
  while (pad < 2 && pad < in.size() && in[in.size() - 1 - pad] == '=')
    pad++;
  const std::string_view body = in.substr(0, in.size() - pad);
  if (pad > 0 && in.size() % 4 != 0)
    return false;
  if (body.size() % 4 == 1)
    return false;
  out->reserve(body.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : body) {
    const int v = b64_value(c);
    if (v < 0)
      return false;
    std_alpha |= c == '+' || c == '/';
    url_alpha |= c == '-' || c == '_';
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (std_alpha && url_alpha)
    return false; // one alphabet per text
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
    return false; // non-canonical: bits set past the end
  if (pad && body.size() % 4 + pad != 4)
    return false;
  return true;
}

std::string base64_encode(std::string_view in, bool url_safe_unpadded) {
  const char *alpha = url_safe_unpadded
                          ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                          : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) |
                       uint32_t(uint8_t(in[i + 2]));
    out.push_back(alpha[(n >> 18) & 63]);
    out.push_back(alpha[(n >> 12) & 63]);
    out.push_back(alpha[(n >> 6) & 63]);
    out.push_back(alpha[n & 63]);
  }
  const size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t n = uint32_t(uint8_t(in[i])) << 16;
    if (rest == 2)
      n |= uint32_t(uint8_t(in[i + 1])) << 8;
    out.push_back(alpha[(n >> 18) & 63]);
    out.push_back(alpha[(n >> 12) & 63]);
    if (rest == 2)
      out.push_back(alpha[(n >> 6) & 63]);
    if (!url_safe_unpadded)
      out.append(rest == 2 ? "=" : "==");
  }
  return out;
}

bool looks_signed(std::string_view text) {
  const size_t sep = text.rfind("--");
  if (sep == std::string_view::npos || sep == 0 || text.size() - sep - 2 != 64)
    return false;
  for (char c : text.substr(sep + 2))
    if (!is_lower_hex(c))
      return false;
  return true;
}

bool verify_signed_name(std::string_view token, const std::vector<std::string> &keys, int64_t now_s,
                        std::string *name, std::string *why) {
  if (token.empty())
    return set_why(why, "signed name: empty");
  if (token.size() > kMaxCredentialBytes)
    return set_why(why, "signed name: too long");
  if (!looks_signed(token))
    return set_why(why, "signed name: malformed");
  const size_t sep = token.rfind("--");
  const std::string_view data = token.substr(0, sep), digest = token.substr(sep + 2);
  bool matched = false;
  for (const std::string &key : keys) // every key is tried: no early exit on a match
    matched |= !key.empty() && constant_time_equal(to_hex(hmac_sha256(key, data)), digest);
  if (!matched)
    return set_why(why, "signed name: bad signature");
  std::string payload;
  if (!base64_decode(data, &payload))
    return set_why(why, "signed name: bad Base64");
  return signed_payload_name(payload, now_s, name, why);
}

std::string sign_name(std::string_view name, std::string_view key) {
  const std::string data = base64_encode(json::quote(name), false);
  return data + "--" + to_hex(hmac_sha256(key, data));
}

bool parse_iso8601(std::string_view s, int64_t *epoch_s) {
  int y, mo, d, h, mi, sec;
  if (!digits(s, 0, 4, &y) || s.size() < 19 || s[4] != '-' || !digits(s, 5, 2, &mo) ||
      s[7] != '-' || !digits(s, 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !digits(s, 11, 2, &h) || s[13] != ':' || !digits(s, 14, 2, &mi) || s[16] != ':' ||
      !digits(s, 17, 2, &sec))
    return false;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
    return false;
  size_t p = 19;
  if (p < s.size() && s[p] == '.') {
    p++;
    const size_t f = p;
    while (p < s.size() && s[p] >= '0' && s[p] <= '9')
      p++;
    if (p == f || p - f > 9)
      return false;
  }
  int offset = 0;
  if (p < s.size() && (s[p] == 'Z' || s[p] == 'z')) {
    p++;
  } else if (p < s.size() && (s[p] == '+' || s[p] == '-')) {
    int oh, om;
    if (!digits(s, p + 1, 2, &oh) || p + 3 >= s.size() || s[p + 3] != ':' ||
        !digits(s, p + 4, 2, &om) || oh > 23 || om > 59)
      return false;
    offset = (oh * 60 + om) * 60 * (s[p] == '-' ? -1 : 1);
    p += 6;
  } else {
    return false;
  }
  if (p != s.size())
    return false;
  *epoch_s =
      days_from_civil(y, unsigned(mo), unsigned(d)) * 86400 + h * 3600 + mi * 60 + sec - offset;
  return true;
}

bool verify_jwt(std::string_view token, std::string_view secret, int64_t now_s, Claims *out,
                std::string *why) {
  *out = Claims();
  if (secret.empty())
    return set_why(why, "token: JWTs are not enabled (pgbus_stream.jwt_secret is not set)");
  if (token.empty() || token.size() > kMaxCredentialBytes)
    return set_why(why, "token: empty or too long");
  const size_t d1 = token.find('.');
  const size_t d2 = d1 == std::string_view::npos ? d1 : token.find('.', d1 + 1);
  if (d2 == std::string_view::npos || token.find('.', d2 + 1) != std::string_view::npos)
    return set_why(why, "token: not a JWT");
  const std::string_view head64 = token.substr(0, d1), body64 = token.substr(d1 + 1, d2 - d1 - 1),
                         sig64 = token.substr(d2 + 1);
  for (std::string_view part : {head64, body64, sig64})
    if (part.find('=') != std::string_view::npos || part.find('+') != std::string_view::npos ||
        part.find('/') != std::string_view::npos)
      return set_why(why, "token: not base64url");
  std::string head_text, body_text, sig;
  if (!base64_decode(head64, &head_text) || !base64_decode(body64, &body_text) ||
      !base64_decode(sig64, &sig))
    return set_why(why, "token: not base64url");
  Value head;
  if (!json::parse(head_text, &head, nullptr) || !head.is(Type::Object))
    return set_why(why, "token: bad header");
  const Value *alg = head.get("alg");
  if (!alg || !alg->is(Type::String) || alg->str != "HS256")
    return set_why(why, "token: only alg HS256 is accepted");
  if (head.get("crit"))
    return set_why(why, "token: unsupported critical header");
  // The signature before anything in the claims is believed.
  const std::string expected = hmac_sha256(secret, token.substr(0, d2)); // header.payload as sent
  if (!constant_time_equal(sig, expected))
    return set_why(why, "token: bad signature");
  Value body;
  if (!json::parse(body_text, &body, nullptr) || !body.is(Type::Object))
    return set_why(why, "token: bad claims");
  if (!numeric_date(body.get("exp"), &out->exp))
    return set_why(why, "token: exp claim required");
  if (now_s > out->exp + kLeewaySeconds)
    return set_why(why, "token: expired");
  if (const Value *nbf = body.get("nbf")) {
    int64_t at;
    if (!numeric_date(nbf, &at))
      return set_why(why, "token: bad nbf claim");
    if (now_s + kLeewaySeconds < at)
      return set_why(why, "token: not valid yet");
  }
  if (!grant_list(body.get("streams"), &out->streams))
    return set_why(why, "token: streams claim must name streams");
  if (const Value *sub = body.get("sub")) {
    if (!sub->is(Type::String) || !valid_subscriber_id(sub->str, nullptr))
      return set_why(why, "token: bad sub claim");
    out->sub = sub->str;
  }
  if (const Value *ctx = body.get("ctx"); ctx && !ctx->is(Type::Null)) {
    if (!ctx->is(Type::Object))
      return set_why(why, "token: ctx claim must be an object");
    out->ctx = std::string(ctx->raw);
  }
  return true;
}

std::string sign_jwt(const std::vector<std::string> &streams, int64_t iat, int64_t exp,
                     const std::optional<std::string> &sub, std::string_view ctx_json,
                     std::string_view secret) {
  std::string claims = "{\"streams\":[";
  for (size_t i = 0; i < streams.size(); i++)
    claims += (i ? "," : "") + json::quote(streams[i]);
  claims += "],\"iat\":" + std::to_string(iat) + ",\"exp\":" + std::to_string(exp);
  if (sub)
    claims += ",\"sub\":" + json::quote(*sub);
  if (!ctx_json.empty())
    claims += ",\"ctx\":" + std::string(ctx_json);
  claims += "}";
  const std::string signing_input = base64_encode("{\"alg\":\"HS256\",\"typ\":\"JWT\"}", true) +
                                    "." + base64_encode(claims, true);
  return signing_input + "." + base64_encode(hmac_sha256(secret, signing_input), true);
}

bool resolve_secret(std::string_view setting, std::string *secret, std::string *err) {
  secret->clear();
  constexpr std::string_view kFile = "file:";
  if (setting.substr(0, kFile.size()) != kFile) {
    *secret = std::string(setting);
    return true;
  }
  const std::string path(setting.substr(kFile.size()));
  FILE *f = fopen(path.c_str(), "rb");
  if (!f) {
    *err = "cannot open secret file \"" + path + "\"";
    return false;
  }
  char buf[4097];
  const size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  if (n > 4096) {
    *err = "secret file \"" + path + "\" is larger than 4 kB";
    return false;
  }
  secret->assign(buf, n);
  if (!secret->empty() && secret->back() == '\n')
    secret->pop_back();
  if (!secret->empty() && secret->back() == '\r')
    secret->pop_back();
  if (secret->empty()) {
    *err = "secret file \"" + path + "\" is empty";
    return false;
  }
  return true;
}

bool any_pattern_matches(const std::vector<std::string> &patterns, std::string_view name) {
  for (const std::string &p : patterns)
    if (text::glob(p, name))
      return true;
  return false;
}

bool valid_subscriber_id(std::string_view id, std::string *why) {
  if (id.empty())
    return set_why(why, "subscriber id must not be empty");
  if (id.size() > kMaxSubscriberIdBytes)
    return set_why(why, "subscriber id longer than 128 bytes");
  if (!json::valid_utf8(id))
    return set_why(why, "subscriber id is not UTF-8");
  for (char ch : id) {
    const unsigned char c = static_cast<unsigned char>(ch);
    const bool ok = c >= 0x80 || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                    (c >= '0' && c <= '9') || strchr("-_.:@|+=/", c) != nullptr;
    if (!ok || c == 0)
      return set_why(why, "subscriber id has a character outside letters, digits and -_.:@|+=/");
  }
  return true;
}

std::string gem_stream_name(std::string_view name) {
  names::QueueNameError err = names::QueueNameError::None;
  const std::string queue = names::queue_name(name, &err);
  // (queue_name keeps more than the prefix; checked again all the same)
  if (err != names::QueueNameError::None || queue.size() <= names::kGemPrefix.size() ||
      queue.compare(0, names::kGemPrefix.size(), names::kGemPrefix) != 0)
    return std::string();
  return queue.substr(names::kGemPrefix.size());
}

} // namespace pgbs::auth
