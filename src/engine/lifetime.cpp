// Engine: how long a stream holds its shared-memory entry. A stream is
// awake (holds it) while it has connections here, for stream_linger after
// the last one left, and while a subscription is being opened on it; else it
// is dormant: its catalog row and ephemeral retention stay, its position is
// rebuilt from the table when it wakes. So shared memory holds entries only
// for streams watched or written (docs/ARCHITECTURE.md, "Stream entries").
#include "engine/engine.hpp"
#include "engine/state.hpp"

#include <algorithm>

namespace pgbs::engine {

// The position restarts as at a first load: every committed id up to the
// tables' maximum may be missing from it (lost_upto), so a subscription
// pages those from the table until a round bounds the stream; ids committed
// later arrive through the ring, which this process reads all along.
Engine::Wake Engine::wake(Stream &st) {
  st.touched_round = round_no_;
  if (st.awake)
    return Wake::Ok;
  int64_t max = 0;
  if (!read_ok(rows_.max_id(st.info, &max)))
    return Wake::ReadFailed;
  void *h = obs_.stream_handle(st.info.id, max);
  if (h == nullptr)
    return Wake::NoRoom;
  st.handle = h;
  st.awake = true;
  st.awake_pos = awake_.size();
  awake_.push_back(&st);
  st.pos = cursor::StreamPosition();
  st.pos.epoch = st.info.id;
  st.token_stale = true;
  st.info.max_committed = std::max(st.info.max_committed, max);
  st.tail_drop(max);
  st.tail_unknown = false;
  st.lost_upto = std::max(st.lost_upto, max);
  st.first_bounds = true;
  heat(st);
  // Its ephemeral broadcasts since it was loaded came through the ring and
  // are retained (or listed as evicted); those from before this process
  // are gone, and so is what an incomplete drain lost while it slept.
  // The count this process saw is kept while it is the entry's numbering;
  // a first wake (the count includes broadcasts from before this process)
  // or a reused entry (numbering restarted) takes the entry's, which may
  // include records still unread in the ring: if the next drain turns out
  // incomplete they may be lost, and cursors below hear so (round()).
  st.eph_unknown = st.eph_unknown || !st.woken_before;
  const uint64_t counted = obs_.ephemeral_seq(h);
  if (!st.woken_before || counted < st.ephemeral_seq) {
    st.ephemeral_seq = counted;
    unsettled_.push_back(&st);
  }
  st.woken_before = true;
  if (st.lossy)
    st.ephemeral_floor_rounds = 2; // (hot: first_bounds above)
  st.lossy = false;
  idle(st);
  return Wake::Ok;
}

void Engine::idle(Stream &st) {
  st.idle_since_us = now_us_;
  if (!st.idle_listed) {
    st.idle_listed = true;
    idle_.push_back(&st);
  }
}

// Gives the entry back; what remains is what a dormant stream needs.
void Engine::sleep(Stream &st) {
  if (!st.awake)
    return;
  obs_.release_stream(st.handle);
  st.handle = nullptr;
  st.awake = false;
  Stream *last = awake_.back();
  awake_[st.awake_pos] = last;
  last->awake_pos = st.awake_pos;
  awake_.pop_back();
  st.tail_drop(st.pos.highest());
  st.aborted.clear();
  st.pos = cursor::StreamPosition();
  st.pos.epoch = st.info.id;
  st.token_stale = true;
  st.first_bounds = false;
  st.lost_upto = 0;
  // A loss known or possible but not yet folded into evicted_floor is
  // announced at the wake.
  st.lossy = st.lossy || st.ephemeral_check || st.ephemeral_floor_rounds > 0;
  st.ephemeral_floor_rounds = 0;
  if (st.ephemeral_check) {
    st.ephemeral_check = false;
    eph_checks_.erase(std::remove(eph_checks_.begin(), eph_checks_.end(), &st), eph_checks_.end());
  }
}

// Every 100 ms (or linger), and at once while entries run short: the idle streams past
// their linger go dormant. Not one a subscription or a waiting connection
// needs in this round or the last (it is being opened), nor one no round
// has bounded since it woke.
void Engine::release_idle() {
  if (idle_.empty())
    return;
  const bool short_now = obs_.streams_short();
  if (!short_now &&
      now_us_ - last_release_us_ < std::min<int64_t>(100 * 1000, cfg_.stream_linger_us))
    return;
  last_release_us_ = now_us_;
  size_t keep = 0;
  for (Stream *st : idle_) {
    if (!st->awake || !st->conns.empty()) {
      st->idle_listed = false;
      continue;
    }
    const bool lingering = !short_now && now_us_ - st->idle_since_us < cfg_.stream_linger_us;
    if (lingering || st->first_bounds || round_no_ - st->touched_round < 2 ||
        pending_.count(st->info.name)) {
      idle_[keep++] = st;
      continue;
    }
    st->idle_listed = false;
    sleep(*st);
  }
  idle_.resize(keep);
}

} // namespace pgbs::engine
