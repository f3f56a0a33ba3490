// Batches: a round's run of rows of one stream, queued for the connections
// in step with it as one frame each (docs/ARCHITECTURE.md, "Delivery: live,
// lag and replay"). Engine::dispatch starts and extends a run; it ends here.
#include "engine/engine.hpp"
#include "engine/state.hpp"

#include <algorithm>

namespace pgbs::engine {

// A connection whose subscription is in step with the stream and gets the
// stream's shared frames (deliver()'s fast path) may ride a batch; one with
// drop_oldest does not (evicting a whole batch would drop more than needed).
bool Engine::rides(const Connection &c, const Sub &sub) const {
  return sub.synced && !c.multi && c.subs.size() == 1 && c.subscriber.empty() &&
         !(c.live_only && cfg_.overflow_policy == OverflowPolicy::DropOldest);
}

// Room in the connection's queue for `events` more events of `bytes`.
bool Engine::fits(const Connection &c, size_t events, size_t bytes) const {
  const size_t ev = sink_.queued_events(c.ref), by = sink_.queued_bytes(c.ref);
  if (ev > 0 && lags(c) && sink_.backed_up(c.ref))
    return false;
  return events <= cfg_.queue_max_events && ev <= cfg_.queue_max_events - events &&
         bytes <= cfg_.queue_max_bytes && by <= cfg_.queue_max_bytes - bytes;
}

// Ends the batched run: each rider gets the rows from where it joined as one
// frame when they fit its queue, else row by row exactly as deliver() would
// (a lagging one waits at the first that does not fit and pages from there;
// a later row with a lower id is still delivered to it). Each row's figures
// then go out as if it had been dispatched alone.
void Engine::flush_batch() {
  Stream *stp = batching_;
  batching_ = nullptr;
  if (stp == nullptr)
    return;
  Stream &st = *stp;
  const StreamDelta outer = batch_; // (empty: every path reports its own)
  std::vector<Stream::Batched> rows;
  rows.swap(st.batch);
  st.batch_bytes = 0;
  st.riders = 0;
  const size_t n = rows.size();
  // Riders that got every row from index i on (a difference array, per
  // framing: [1] is the gem's one-line framing), and rows got or dropped
  // one by one.
  std::vector<int64_t> got_from[2] = {std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  std::vector<int64_t> dropped_from(n, 0), got(n, 0), dropped(n, 0);
  std::vector<uint64_t> bytes(n, 0); // of the rows got one by one
  std::vector<size_t> suffix[2];     // bytes of the rows from i on, per framing
  // The joined run from a row on, per framing: built once a rider takes it.
  std::shared_ptr<const std::string> joined[2];
  size_t joined_from[2] = {n, n};
  uint32_t last_at[2] = {0, 0};
  for (Connection *c : st.conns) {
    if (!c->riding)
      continue;
    c->riding = false;
    const int d = c->one_line ? 1 : 0;
    if (suffix[d].empty()) {
      suffix[d].assign(n + 1, 0);
      for (size_t i = n; i-- > 0;)
        suffix[d][i] = suffix[d][i + 1] + rows[i].frame_of(d)->size();
    }
    const size_t from = std::min(c->ride_from, n);
    if (n - from >= 2 && fits(*c, n - from, suffix[d][from])) {
      if (joined_from[d] != from) {
        auto text = std::make_shared<std::string>();
        text->reserve(suffix[d][from]);
        for (size_t i = from; i < n; ++i) {
          last_at[d] = (uint32_t)text->size();
          text->append(*rows[i].frame_of(d));
        }
        joined[d] = std::move(text);
        joined_from[d] = from;
      }
      OutFrame f;
      f.body = joined[d];
      f.events = (uint32_t)(n - from);
      f.last_at = last_at[d];
      (push(*c, std::move(f), true) ? got_from[d] : dropped_from)[from]++; // rows from..n-1
      continue;
    }
    for (size_t i = from; i < n; ++i) {
      Sub &sub = c->subs[0];
      const auto &frame = rows[i].frame_of(d);
      if (!sub.synced) {
        // It waited at an earlier row: a later one may still be below where
        // it pages from (ids committed out of order), as in deliver().
        Row row;
        row.msg_id = rows[i].msg_id;
        const uint64_t before = counters_.queued, lost = counters_.overflow_dropped,
                       by = batch_.bytes_queued;
        deliver(*c, 0, row, rows[i].body); // its own id line: a size of its own
        got[i] += (int64_t)(counters_.queued - before);
        dropped[i] += (int64_t)(counters_.overflow_dropped - lost);
        bytes[i] += batch_.bytes_queued - by;
        continue;
      }
      if (lags(*c) && !room(*c, frame->size())) {
        sub.pos = rows[i].before;
        sub.synced = false;
        counters_.deferred++;
        demote(*c, 0, rows[i].msg_id);
        continue;
      }
      OutFrame f;
      f.body = frame;
      if (push(*c, std::move(f), true)) {
        got[i]++;
        bytes[i] += frame->size();
      } else {
        dropped[i]++;
      }
    }
  }
  int64_t g[2] = {0, 0}, dr = 0;
  for (size_t i = 0; i < n; ++i) {
    g[0] += got_from[0][i];
    g[1] += got_from[1][i];
    dr += dropped_from[i];
    const uint64_t mine = (uint64_t)(g[0] + g[1] + got[i]), lost = (uint64_t)(dr + dropped[i]);
    batch_ = rows[i].others;
    batch_.queued += mine;
    batch_.bytes_queued += (uint64_t)g[0] * rows[i].frame->size() + bytes[i];
    if (g[1] > 0)
      batch_.bytes_queued += (uint64_t)g[1] * rows[i].frame1->size();
    batch_.overflow_dropped += lost;
    flush_stats(st, rows[i].commit_us);
  }
  batch_ = outer;
}

} // namespace pgbs::engine
