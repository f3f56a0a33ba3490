// A connection's bounded outbound queue (docs/ARCHITECTURE.md, "Delivery: live, lag and replay").
//
// bytes() counts whole data frames until their last byte is copied out, so a
// partially written frame still counts: its memory is held until then. A
// partially written frame is never evicted (the client would receive half an
// event glued to the next one).
#include "core/outqueue.hpp"

#include <algorithm>
#include <cstring>

namespace pgbs {

bool parse_overflow_policy(const std::string &s, OverflowPolicy *out) {
  if (s == "drop_oldest")
    *out = OverflowPolicy::DropOldest;
  else if (s == "drop_newest")
    *out = OverflowPolicy::DropNewest;
  else if (s == "disconnect")
    *out = OverflowPolicy::Disconnect;
  else if (s == "lag")
    *out = OverflowPolicy::Lag;
  else
    return false;
  return true;
}

const char *overflow_policy_name(OverflowPolicy p) {
  switch (p) {
  case OverflowPolicy::DropOldest:
    return "drop_oldest";
  case OverflowPolicy::DropNewest:
    return "drop_newest";
  case OverflowPolicy::Disconnect:
    return "disconnect";
  case OverflowPolicy::Lag:
    break;
  }
  return "lag";
}

void OutQueue::set_start_id(const std::string &id) {
  if (written_ == 0 && !id.empty())
    last_written_.head = "id: " + id + "\n";
}

OutQueue::OutQueue(size_t max_events, size_t max_bytes, OverflowPolicy policy)
    : max_events_(max_events), max_bytes_(max_bytes), policy_(policy) {}

void OutQueue::set_limits(size_t max_events, size_t max_bytes, OverflowPolicy policy) {
  // Frames already queued stay; the new bounds apply from the next push.
  max_events_ = max_events;
  max_bytes_ = max_bytes;
  policy_ = policy;
}

namespace {
// True when `events` events of `bytes` plus a frame of `more` events and
// `size` bytes stay within bounds.
bool within(size_t events, size_t bytes, size_t more, size_t size, size_t max_events,
            size_t max_bytes) {
  return more <= max_events && events <= max_events - more && size <= max_bytes &&
         bytes <= max_bytes - size;
}
} // namespace

OutQueue::PushResult OutQueue::push(OutFrame f) {
  if (f.control) {
    frames_.push_back(std::move(f));
    return PushResult::Queued;
  }
  const size_t size = f.size(), n = f.events;
  // An empty queue takes one event of any size.
  const bool alone = events_ == 0 && max_events_ > 0 && n == 1;
  if (!alone && !within(events_, bytes_, n, size, max_events_, max_bytes_)) {
    switch (policy_) {
    case OverflowPolicy::Disconnect:
      return PushResult::MustDisconnect;
    case OverflowPolicy::Lag:
    case OverflowPolicy::DropNewest:
      dropped_ += n;
      return PushResult::DroppedNewest;
    case OverflowPolicy::DropOldest:
      if (!evict_oldest_for(n, size)) {
        dropped_ += n;
        return PushResult::DroppedNewest;
      }
      events_ += n;
      bytes_ += size;
      frames_.push_back(std::move(f));
      return PushResult::DroppedOldest;
    }
  }
  events_ += n;
  bytes_ += size;
  frames_.push_back(std::move(f));
  return PushResult::Queued;
}

// Evicts the oldest evictable data frames until a frame of `size` fits. Evicts
// nothing and returns false when even an emptied queue could not take it.
bool OutQueue::evict_oldest_for(size_t n, size_t size) {
  size_t first = 0;
  size_t pinned_events = 0, pinned_bytes = 0;
  if (head_offset_ > 0) {
    first = 1;
    if (!frames_.front().control) {
      pinned_events = frames_.front().events;
      pinned_bytes = frames_.front().size();
    }
  }
  if (!within(pinned_events, pinned_bytes, n, size, max_events_, max_bytes_))
    return false;
  size_t i = first;
  while (!within(events_, bytes_, n, size, max_events_, max_bytes_)) {
    // Cannot run off the end: the check above shows the evictable frames suffice.
    if (frames_[i].control) {
      ++i;
      continue;
    }
    events_ -= frames_[i].events;
    bytes_ -= frames_[i].size();
    dropped_ += frames_[i].events;
    frames_.erase(i);
  }
  return true;
}

namespace {
// The value of the "id: " line that starts a frame's last event (head
// first, then body; a batch's last event at last_at in the body).
std::string frame_id(const OutFrame &f) {
  const std::string empty;
  const std::string &text = !f.head.empty() ? f.head : (f.body ? *f.body : empty);
  const size_t at = f.head.empty() ? f.last_at : 0;
  if (text.compare(at, 4, "id: ") != 0)
    return std::string();
  size_t end = text.find('\n', at + 4);
  return text.substr(at + 4, end == std::string::npos ? std::string::npos : end - at - 4);
}
} // namespace

size_t OutQueue::read_into(char *buf, size_t cap) {
  size_t n = 0;
  while (n < cap && !frames_.empty()) {
    const OutFrame &f = frames_.front();
    size_t off = head_offset_;
    if (off < f.head.size()) {
      const size_t k = std::min(f.head.size() - off, cap - n);
      std::memcpy(buf + n, f.head.data() + off, k);
      n += k;
      off += k;
    }
    if (f.body && off >= f.head.size()) {
      const size_t body_off = off - f.head.size();
      const size_t k = std::min(f.body->size() - body_off, cap - n);
      if (k) {
        std::memcpy(buf + n, f.body->data() + body_off, k);
        n += k;
        off += k;
      }
    }
    if (off < f.size()) {
      head_offset_ = off;
      break;
    }
    if (!f.control) {
      events_ -= f.events;
      bytes_ -= f.size();
      // Keep what holds its id: the per-connection head when it has the id
      // line, else the (shared) body. No copy, no allocation per frame.
      last_written_ = std::move(frames_.front());
      if (last_written_.head.compare(0, 4, "id: ") == 0)
        last_written_.body.reset();
    }
    ++written_;
    head_offset_ = 0;
    frames_.pop_front();
  }
  return n;
}

} // namespace pgbs

namespace pgbs {
std::string OutQueue::last_written_id() const {
  if (head_offset_ > 0 && !frames_[0].control)
    return frame_id(frames_[0]);
  return frame_id(last_written_);
}

std::string OutQueue::newest_queued_id() const {
  for (size_t i = frames_.size(); i-- > 0;)
    if (!frames_[i].control)
      return frame_id(frames_[i]);
  return std::string();
}

void FrameRing::push_back(OutFrame f) {
  if (n_ == cap_)
    grow();
  buf_[(head_ + n_) & (cap_ - 1)] = std::move(f);
  ++n_;
}

void FrameRing::pop_front() {
  buf_[head_] = OutFrame();
  head_ = (head_ + 1) & (cap_ - 1);
  if (--n_ == 0)
    emptied();
}

// Eviction takes frames at or next to the front: the ones before i move
// back by one (O(i)), or, for an index in the back half, the ones after it
// move forward.
void FrameRing::erase(size_t i) {
  if (i < n_ / 2) {
    for (size_t j = i; j > 0; --j)
      (*this)[j] = std::move((*this)[j - 1]);
    pop_front();
    return;
  }
  for (size_t j = i; j + 1 < n_; ++j)
    (*this)[j] = std::move((*this)[j + 1]);
  (*this)[n_ - 1] = OutFrame();
  if (--n_ == 0)
    emptied();
}

void FrameRing::grow() {
  const size_t ncap = cap_ ? cap_ * 2 : 2;
  std::unique_ptr<OutFrame[]> nbuf(new OutFrame[ncap]);
  for (size_t i = 0; i < n_; ++i)
    nbuf[i] = std::move((*this)[i]);
  buf_ = std::move(nbuf);
  cap_ = ncap;
  head_ = 0;
}

void FrameRing::emptied() {
  head_ = 0;
  if (cap_ > kKept) // a burst is over: give its buffer back
    release();
}

void FrameRing::release() {
  if (n_ != 0)
    return;
  buf_.reset();
  cap_ = head_ = 0;
}
} // namespace pgbs
