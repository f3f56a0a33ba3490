// Seeded deterministic simulation of the delivery engine (see sim_world.cpp
// for the invariants). Runs SIM_SEEDS seeds (default 100000) from
// SIM_FIRST_SEED, or stops at SIM_SECONDS (default 600) and fails if the
// budget ran out first; SIM_SEED=<n> reruns one seed alone. A failing seed
// prints itself and the command that reruns it.
#include "sim_world.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, nullptr, 10) : dflt;
}

std::string run_seed(uint64_t seed, bool trace = false) {
  sim::SeededChoices ch(seed);
  sim::World w(ch);
  w.trace = trace;
  return w.run(40 + (int)ch.below(160));
}

} // namespace

int main() {
  using clock = std::chrono::steady_clock;
  if (getenv("SIM_SEED") && *getenv("SIM_SEED")) {
    const uint64_t seed = env_u64("SIM_SEED", 0);
    const std::string err = run_seed(seed, getenv("SIM_TRACE") != nullptr);
    if (!err.empty()) {
      printf("seed %llu: FAIL %s\n", (unsigned long long)seed, err.c_str());
      printf("0 passed, 1 failed\n");
      return 1;
    }
    printf("seed %llu: ok\n1 passed, 0 failed\n", (unsigned long long)seed);
    return 0;
  }
  const uint64_t first = env_u64("SIM_FIRST_SEED", 1);
  const uint64_t seeds = env_u64("SIM_SEEDS", 100000);
  const double budget = (double)env_u64("SIM_SECONDS", 600);
  const auto start = clock::now();
  uint64_t run = 0, failed = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    const std::string err = run_seed(seed);
    ++run;
    if (!err.empty()) {
      ++failed;
      printf("seed %llu: FAIL %s\n  rerun alone: SIM_SEED=%llu make -C test/engine run\n",
             (unsigned long long)seed, err.c_str(), (unsigned long long)seed);
      if (failed >= 5)
        break;
    }
    if ((run & 1023) == 0 && std::chrono::duration<double>(clock::now() - start).count() > budget)
      break;
  }
  const double took = std::chrono::duration<double>(clock::now() - start).count();
  printf("sim: %llu seeds from %llu in %.1f s\n", (unsigned long long)run,
         (unsigned long long)first, took);
  if (run < seeds && failed == 0) {
    printf("sim: time budget (%.0f s) ran out before %llu seeds\n", budget,
           (unsigned long long)seeds);
    failed = 1;
  }
  printf("%llu passed, %llu failed\n",
         (unsigned long long)(run - (failed && run >= seeds ? failed : 0)),
         (unsigned long long)failed);
  return failed ? 1 : 0;
}
