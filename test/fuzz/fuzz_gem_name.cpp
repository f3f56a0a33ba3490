// libFuzzer target for the pgbus gem's names (core/names, auth's
// gem_stream_name): any text as a logical stream name maps to a queue name
// or is refused, never throws; an accepted one is the prefix followed by at
// least one character, lower-case [a-z0-9_], at most kMaxQueueName long, and
// gem_stream_name is that queue without its prefix. auto_attach patterns
// never throw either.
#include "core/auth.hpp"
#include "core/names.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace pgbs;

namespace {

void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz_gem_name: %s\n", what);
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view in(reinterpret_cast<const char *>(data), size);
  names::QueueNameError err = names::QueueNameError::None;
  const std::string q = names::queue_name(in, &err);
  const std::string short_name = auth::gem_stream_name(in);
  if (err == names::QueueNameError::None) {
    check(q.size() > names::kGemPrefix.size() && q.size() <= names::kMaxQueueName,
          "queue name length");
    check(q.compare(0, names::kGemPrefix.size(), names::kGemPrefix) == 0, "queue name prefix");
    for (char c : q)
      check((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_', "queue name character");
    check(short_name == q.substr(names::kGemPrefix.size()), "gem stream name is the queue's tail");
  } else {
    check(q.empty() && short_name.empty(), "refused name maps to something");
  }
  (void)names::normalize(in);
  const size_t half = size / 2;
  if (names::valid_auto_attach(in.substr(0, half)))
    (void)names::auto_attach_matches(in.substr(0, half), in.substr(half));
  return 0;
}
