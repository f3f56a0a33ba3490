// libFuzzer target for core/cursor: any text either fails to parse with a
// reason, or parses to a position that encodes with URL-safe characters only
// and parses back equal; add/advance on it keep the ranges canonical.
#include "core/cursor.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

using namespace pgbs::cursor;

namespace {

void check(bool ok, const char *what, std::string_view text) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz_cursor: %s for input \"%.*s\"\n", what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

bool url_safe(std::string_view s) {
  for (char c : s) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == '~' || c == ':' || c == ',';
    if (!ok)
      return false;
  }
  return true;
}

bool canonical(const StreamPosition &p) {
  int64_t prev = p.horizon;
  for (auto [lo, hi] : p.ranges()) {
    if (lo > hi || lo - 1 <= prev)
      return false;
    prev = hi;
  }
  return true;
}

// Applies add/advance driven by the input bytes and checks the invariants.
void exercise(StreamPosition p, std::string_view text) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (unsigned char b : text) {
    const int64_t off = static_cast<int64_t>(b % 24) - 4;
    const int64_t base = p.highest() > kMax - 32 ? kMax - 32 : p.highest();
    const int64_t id = base + off - 8;
    const int64_t before_h = p.horizon;
    if (b >= 0xf0) {
      p.advance(id);
      check(p.horizon >= before_h && p.horizon >= id, "advance lowered the horizon", text);
    } else {
      p.add(id);
      check(p.covers(id), "add did not cover the id", text);
    }
    check(canonical(p), "ranges not canonical after add/advance", text);
    check(!(p.horizon < kMax && p.covers(p.horizon + 1)), "horizon not folded", text);
  }
  std::string enc;
  p.encode(enc);
  check(enc.size() == p.encoded_size(), "encoded_size mismatch", text);
  if (enc.size() <= kMaxTokenBytes) {
    StreamPosition back;
    std::string err;
    check(parse_stream(enc, &back, &err), "encoded position does not parse", text);
    check(back == p, "position round trip differs", text);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);

  int64_t n = 0;
  if (parse_int64(text, &n))
    check(n >= 0, "parse_int64 returned a negative number", text);
  (void)valid_stream_name(text);

  StreamPosition single;
  std::string err;
  if (parse_stream(text, &single, &err)) {
    check(canonical(single), "parse_stream produced non-canonical ranges", text);
    exercise(single, text);
  } else {
    check(!err.empty() && err.rfind("cursor: ", 0) == 0, "parse_stream failed without a reason",
          text);
  }

  Cursor c;
  err.clear();
  if (!parse(text, &c, &err)) {
    check(!err.empty() && err.rfind("cursor: ", 0) == 0, "parse failed without a reason", text);
    check(err.size() < 64, "error message too long", text);
    return 0;
  }
  check(size <= kMaxCursorBytes, "parse accepted an over-long token", text);
  check(!c.streams.empty(), "parse succeeded with no stream", text);
  for (const auto &entry : c.streams) {
    check(canonical(entry.second), "parse produced non-canonical ranges", text);
    check(!entry.first.empty() || entry.second.epoch != 0 || c.streams.size() == 1,
          "an unnamed entry of a list without its epoch", text);
    check(!entry.first.empty() || c.find(entry.first) != nullptr || c.streams.size() > 1,
          "find does not return the entry", text);
    check(entry.first.empty() || c.find(entry.first) == &entry.second,
          "find does not return the entry", text);
  }
  const std::string enc = encode(c);
  check(url_safe(enc), "encoding uses a character outside [A-Za-z0-9-._~:,]", text);
  check(enc.size() <= size, "encoding longer than the (normalised) input", text);
  Cursor back;
  err.clear();
  check(parse(enc, &back, &err), "encoded cursor does not parse", text);
  check(back.streams == c.streams, "cursor round trip differs", text);
  check(encode(back) == enc, "encoding not stable", text);
  return 0;
}
