// libFuzzer target: the delivery engine driven from fuzz input. The input's
// bytes are the simulated world's decisions (configuration, producers,
// commits and aborts, ring laps and overruns, read failures, sockets,
// reconnects, deletions, retention, restarts); every invariant of the
// simulation (test/engine/sim_world.cpp) is checked, and a broken one aborts.
#include "sim_world.hpp"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sim::BytesChoices ch(data, size);
  sim::World w(ch);
  const std::string err = w.run(400);
  if (!err.empty()) {
    fprintf(stderr, "engine invariant broken: %s\n", err.c_str());
    abort();
  }
  return 0;
}
