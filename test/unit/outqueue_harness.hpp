// Drives an OutQueue with an operation sequence decoded from bytes and checks
// its invariants; shared by the unit tests (random bytes) and fuzz_outqueue.
//
// Frames carry their serial number and end with the only "\n\n" they contain,
// so the bytes read out can be cut back into frames and compared, one by one,
// with a model of the queue. Checked:
// - bounds: after a push the queue is within max_events/max_bytes, or (when
//   limits were lowered) is still over them but did not grow;
// - each PushResult matches the policy and the counters move accordingly;
// - output is whole frames, byte-exact, in push order; control frames are
//   never lost; DropOldest evicts exactly the oldest evictable data frames
//   (never a control frame, never the partially written one);
// - events()/bytes()/empty() match a model of the queue after every
//   operation, and frames_written()/dropped() match at the end.
#pragma once
#include "core/outqueue.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>

namespace pgbs::test {

class OutQueueHarness {
public:
  // Returns "" when every invariant held, else a description of the first failure.
  std::string run(const uint8_t *data, size_t size) {
    pos_ = data;
    end_ = data + size;
    const uint8_t setup = next();
    max_events_ = next() % 12;
    max_bytes_ = static_cast<size_t>(next()) * 4;
    policy_ = static_cast<OverflowPolicy>(setup % 3);
    OutQueue q(max_events_, max_bytes_, policy_);
    while (pos_ < end_ && error_.empty()) {
      switch (next() % 6) {
      case 0:
      case 1:
        push_data(q);
        break;
      case 2:
        push_control(q);
        break;
      case 3:
      case 4:
        read(q, 1 + next() % 97);
        break;
      case 5:
        max_events_ = next() % 12;
        max_bytes_ = static_cast<size_t>(next()) * 4;
        policy_ = static_cast<OverflowPolicy>(next() % 3);
        q.set_limits(max_events_, max_bytes_, policy_);
        break;
      }
      check_counters(q);
    }
    if (!error_.empty())
      return error_;
    // Drain: everything still queued must come out whole.
    for (int guard = 0; !q.empty() && guard < 100000; ++guard) {
      read(q, 1 + guard % 200);
      check_counters(q);
    }
    if (!error_.empty())
      return error_;
    if (!q.empty() || q.events() != 0 || q.bytes() != 0)
      return "queue not empty after draining";
    if (!partial_.empty())
      return "bytes left over after the last whole frame: " + partial_;
    if (!pending_.empty())
      return "queued frame never written: serial " + std::to_string(pending_.begin()->first);
    if (q.frames_written() != frames_out_)
      return "frames_written " + std::to_string(q.frames_written()) + " != frames read " +
             std::to_string(frames_out_);
    if (q.dropped() != dropped_expected_ + evicted_)
      return "dropped() does not match the frames that vanished";
    return "";
  }

  uint64_t frames_out() const { return frames_out_; }
  // How often push() returned each PushResult (indexed by its value).
  const uint64_t *results() const { return results_; }

private:
  struct Expected {
    std::string bytes;
    bool control;
  };

  uint8_t next() { return pos_ < end_ ? *pos_++ : 0; }

  void fail(std::string msg) {
    if (error_.empty())
      error_ = std::move(msg);
  }

  bool within(const OutQueue &q) const {
    // A lone frame may be larger than the byte bound (no message is too large to deliver).
    return q.events() <= max_events_ && (q.bytes() <= max_bytes_ || q.events() == 1);
  }

  void push_data(OutQueue &q) {
    const uint64_t serial = ++serial_;
    const uint8_t shape = next();
    const size_t fill = shape % 64 + (shape & 0x40 ? static_cast<size_t>(next()) * 2 : 0);
    OutFrame f;
    const std::string id_line = "id: " + std::to_string(serial) + "\n";
    const std::string body = "data: " + std::string(fill, 'x') + "\n\n";
    if (shape & 0x80) { // everything in the shared body, no head
      f.body = std::make_shared<const std::string>(id_line + body);
    } else {
      f.head = id_line;
      f.body = std::make_shared<const std::string>(body);
    }
    const std::string bytes = f.head + *f.body;
    const size_t events = q.events(), qbytes = q.bytes();
    const uint64_t dropped = q.dropped();
    const bool was_within = within(q);
    const bool fits =
        events < max_events_ && (qbytes + bytes.size() <= max_bytes_ || events == 0);
    const OutQueue::PushResult r = q.push(std::move(f));
    ++results_[static_cast<int>(r)];
    switch (r) {
    case OutQueue::PushResult::Queued:
      if (!fits)
        fail("Queued a frame that does not fit");
      if (q.events() != events + 1 || q.bytes() != qbytes + bytes.size())
        fail("Queued: counters did not grow by one frame");
      pending_[serial] = {bytes, false};
      break;
    case OutQueue::PushResult::DroppedNewest:
      if (fits)
        fail("DroppedNewest although the frame fits");
      if (policy_ == OverflowPolicy::Disconnect)
        fail("DroppedNewest under the disconnect policy");
      if (policy_ == OverflowPolicy::DropOldest && could_make_room(bytes.size()))
        fail("DroppedNewest under drop_oldest although evicting would make room");
      if (q.events() != events || q.bytes() != qbytes || q.dropped() != dropped + 1)
        fail("DroppedNewest changed the queue or miscounted");
      ++dropped_expected_;
      break;
    case OutQueue::PushResult::DroppedOldest: {
      if (policy_ != OverflowPolicy::DropOldest)
        fail("DroppedOldest under another policy");
      if (fits)
        fail("DroppedOldest although the frame fits");
      if (q.dropped() <= dropped)
        fail("DroppedOldest without counting a drop");
      evict_in_model(q.dropped() - dropped);
      pending_[serial] = {bytes, false};
      if (!within(q))
        fail("DroppedOldest left the queue over its bounds");
      break;
    }
    case OutQueue::PushResult::MustDisconnect:
      if (policy_ != OverflowPolicy::Disconnect || fits)
        fail("MustDisconnect unexpected");
      if (q.events() != events || q.bytes() != qbytes || q.dropped() != dropped)
        fail("MustDisconnect changed the queue");
      break;
    }
    if (was_within && !within(q))
      fail("push took the queue over its bounds");
    if (!was_within && !within(q) && (q.events() > events || q.bytes() > qbytes))
      fail("push grew a queue already over its (lowered) bounds: " + std::to_string(events) + "/" +
           std::to_string(qbytes) + " -> " + std::to_string(q.events()) + "/" +
           std::to_string(q.bytes()) + " max " + std::to_string(max_events_) + "/" +
           std::to_string(max_bytes_) + " result " + std::to_string(static_cast<int>(r)));
  }

  void push_control(OutQueue &q) {
    const uint64_t serial = ++serial_;
    OutFrame f;
    f.control = true;
    f.head = ": control " + std::to_string(serial) + "\n\n";
    const size_t events = q.events(), qbytes = q.bytes();
    const std::string bytes = f.head;
    if (q.push(std::move(f)) != OutQueue::PushResult::Queued)
      fail("control frame not queued");
    if (q.events() != events || q.bytes() != qbytes)
      fail("control frame counted against the bounds");
    pending_[serial] = {bytes, true};
  }

  void read(OutQueue &q, size_t cap) {
    char buf[256];
    const bool was_empty = q.empty();
    const size_t n = q.read_into(buf, cap);
    if (n > cap)
      fail("read_into overran its buffer");
    if (n == 0 && !was_empty && !q.empty())
      fail("read_into returned 0 with frames queued");
    partial_.append(buf, n);
    size_t cut;
    while ((cut = partial_.find("\n\n")) != std::string::npos) {
      const std::string frame = partial_.substr(0, cut + 2);
      partial_.erase(0, cut + 2);
      check_frame(frame);
    }
  }

  void check_frame(const std::string &frame) {
    if (pending_.empty()) {
      fail("output frame while nothing is queued");
      return;
    }
    auto front = pending_.begin();
    if (front->second.bytes != frame) {
      fail("expected frame " + std::to_string(front->first) + ", got: " + frame.substr(0, 40));
      return;
    }
    pending_.erase(front);
    ++frames_out_;
  }

  // DropOldest must have evicted the oldest data frames, skipping control
  // frames and a partially written front frame: remove the same from the model.
  void evict_in_model(uint64_t count) {
    auto it = pending_.begin();
    if (!partial_.empty() && it != pending_.end())
      ++it;
    while (count > 0 && it != pending_.end()) {
      if (it->second.control) {
        ++it;
        continue;
      }
      it = pending_.erase(it);
      --count;
      ++evicted_;
    }
    if (count > 0)
      fail("DroppedOldest counted more drops than there were evictable frames");
  }

  // Whether evicting every evictable data frame would let a frame of `size` in.
  bool could_make_room(size_t size) const {
    size_t events = 0, bytes = 0;
    if (!partial_.empty() && !pending_.empty() && !pending_.begin()->second.control) {
      events = 1;
      bytes = pending_.begin()->second.bytes.size();
    }
    return events < max_events_ && bytes + size <= max_bytes_;
  }

  // The queue's counters must match the frames the model says are queued.
  void check_counters(const OutQueue &q) {
    size_t events = 0, bytes = 0;
    for (const auto &entry : pending_) {
      if (!entry.second.control) {
        ++events;
        bytes += entry.second.bytes.size();
      }
    }
    if (q.events() != events || q.bytes() != bytes)
      fail("counters " + std::to_string(q.events()) + "/" + std::to_string(q.bytes()) +
           " but model has " + std::to_string(events) + "/" + std::to_string(bytes));
    if (q.empty() != pending_.empty())
      fail("empty() disagrees with the model");
  }

  const uint8_t *pos_ = nullptr, *end_ = nullptr;
  size_t max_events_ = 0, max_bytes_ = 0;
  OverflowPolicy policy_ = OverflowPolicy::DropOldest;
  uint64_t serial_ = 0;
  std::map<uint64_t, Expected> pending_; // the model: frames queued, not yet fully read
  std::string partial_;                  // output bytes after the last whole frame
  uint64_t frames_out_ = 0, dropped_expected_ = 0, evicted_ = 0;
  uint64_t results_[4] = {0, 0, 0, 0};
  std::string error_;
};

} // namespace pgbs::test
