// libFuzzer target for core/outqueue: the input is an operation sequence
// (push data/control, partial reads, limit changes) run by the shared harness,
// which checks bounds, policies, frame integrity and counters.
#include "outqueue_harness.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pgbs::test::OutQueueHarness harness;
  const std::string err = harness.run(data, size);
  if (!err.empty()) {
    std::fprintf(stderr, "fuzz_outqueue: %s\n", err.c_str());
    std::abort();
  }
  return 0;
}
