// Presence from shared memory (worker/presence_rows.hpp).
#include "worker/presence_rows.hpp"
#include "shmem/shared.hpp"

#include <algorithm>
#include <cstring>

namespace pgbs::worker {

static_assert(sizeof(PresenceRow::stream_ids) == sizeof(shmem::ConnSnapshot::stream_ids) &&
                  sizeof(PresenceRow::identity) == sizeof(shmem::ConnSnapshot::identity),
              "a presence row holds what a connection row says of presence");

void count_presence(const std::vector<int64_t> &streams,
                    std::map<int64_t, engine::PresenceCounts> *out,
                    std::vector<PresenceRow> *scratch) {
  out->clear();
  for (int64_t id : streams)
    (*out)[id];
  shmem::Shared *s = shmem::shared();
  for (int w = 0; w < shmem::kMaxWorkers; w++) {
    shmem::WorkerConns *wc = &s->worker_conns[w];
    if (wc->capacity == 0)
      continue;
    // Room first: nothing under the lock may allocate (or throw).
    if (scratch->size() < (size_t)wc->capacity)
      scratch->resize((size_t)wc->capacity);
    size_t n = 0;
    LWLockAcquire(wc->lock, LW_SHARED);
    for (int i = 0; i < wc->count && n < scratch->size(); i++) {
      const shmem::ConnSnapshot &c = wc->items[i];
      bool wanted = false;
      for (int k = 0; k < c.nstreams && !wanted; k++)
        wanted = std::binary_search(streams.begin(), streams.end(), c.stream_ids[k]);
      if (!wanted)
        continue;
      PresenceRow &r = (*scratch)[n++];
      r.has_identity = c.has_identity;
      r.nstreams = c.nstreams;
      memcpy(r.stream_ids, c.stream_ids, sizeof(r.stream_ids));
      memcpy(r.identity, c.identity, sizeof(r.identity));
    }
    LWLockRelease(wc->lock);
    for (size_t i = 0; i < n; i++) {
      const PresenceRow &r = (*scratch)[i];
      const std::optional<std::string> who =
          r.has_identity ? std::optional<std::string>(r.identity) : std::nullopt;
      for (int k = 0; k < r.nstreams; k++) {
        auto it = out->find(r.stream_ids[k]);
        if (it != out->end())
          it->second[who]++;
      }
    }
  }
}

} // namespace pgbs::worker
