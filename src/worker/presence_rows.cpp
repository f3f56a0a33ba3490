// Presence from shared memory (worker/presence_rows.hpp).
#include "worker/presence_rows.hpp"
#include "shmem/conns.hpp"

#include <algorithm>
#include <cstring>

namespace pgbs::worker {

static_assert(sizeof(PresenceRow::stream_ids) == sizeof(shmem::ConnSnapshot::stream_ids) &&
                  sizeof(PresenceRow::identity) == sizeof(shmem::ConnSnapshot::identity),
              "a presence row holds what a connection row says of presence");

namespace {

// Copies the rows of one worker that name a stream of `streams` (sorted)
// into the scratch rows, which have room for all of them: called under the
// rows' lock, so it neither allocates nor throws.
struct Take {
  const std::vector<int64_t> *streams;
  std::vector<PresenceRow> *scratch;
  size_t n;
};

bool take_row(const shmem::ConnSnapshot &c, void *arg) {
  Take *t = static_cast<Take *>(arg);
  if (t->n >= t->scratch->size())
    return false;
  bool wanted = false;
  for (int k = 0; k < c.nstreams && !wanted; k++)
    wanted = std::binary_search(t->streams->begin(), t->streams->end(), c.stream_ids[k]);
  if (!wanted)
    return true;
  PresenceRow &r = (*t->scratch)[t->n++];
  r.has_identity = c.has_identity;
  r.nstreams = c.nstreams;
  memcpy(r.stream_ids, c.stream_ids, sizeof(r.stream_ids));
  memcpy(r.identity, c.identity, sizeof(r.identity));
  return true;
}

} // namespace

void count_presence(const std::vector<int64_t> &streams,
                    std::map<int64_t, engine::PresenceCounts> *out,
                    std::vector<PresenceRow> *scratch) {
  out->clear();
  for (int64_t id : streams)
    (*out)[id];
  for (int w = 0; w < shmem::kMaxWorkers; w++) {
    const int capacity = shmem::conn_rows_capacity(w);
    if (capacity == 0)
      continue;
    // Room first: nothing under the lock may allocate (or throw).
    if (scratch->size() < (size_t)capacity)
      scratch->resize((size_t)capacity);
    Take t{&streams, scratch, 0};
    shmem::visit_conn_rows(w, take_row, &t);
    for (size_t i = 0; i < t.n; i++) {
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
