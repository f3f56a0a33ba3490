// A connection's bounded outbound queue and its overflow policy (DESIGN §4).
// Pure C++, no PostgreSQL.
#pragma once
#include "core/no_postgres.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pgbs {

enum class OverflowPolicy { DropOldest, DropNewest, Disconnect };

// Parses "drop_oldest" | "drop_newest" | "disconnect".
bool parse_overflow_policy(const std::string &s, OverflowPolicy *out);

// One queued SSE event: a small per-connection head (usually "id: ...\n")
// followed by a body shared by every connection that receives the event
// ("event: ...\ndata: ...\n\n"), so the payload is stored once per stream.
struct OutFrame {
  std::string head;
  std::shared_ptr<const std::string> body;
  bool control = false; // connected/gap/shutdown frames: never dropped, not counted
  size_t size() const { return head.size() + (body ? body->size() : 0); }
};

// A FIFO of frames in one growable circular buffer. Nothing is allocated
// while it has never held a frame, and a buffer that grew past a few frames is
// released when it empties, so an idle connection costs almost nothing (a
// std::deque allocates a 512-byte node even when empty).
class FrameRing {
public:
  bool empty() const { return n_ == 0; }
  size_t size() const { return n_; }
  OutFrame &operator[](size_t i) { return buf_[(head_ + i) & (cap_ - 1)]; }
  const OutFrame &operator[](size_t i) const { return buf_[(head_ + i) & (cap_ - 1)]; }
  OutFrame &front() { return (*this)[0]; }
  void push_back(OutFrame f);
  void pop_front();
  void erase(size_t i); // shifts the frames after i forward

private:
  void grow();
  void emptied();
  std::unique_ptr<OutFrame[]> buf_;
  size_t cap_ = 0, head_ = 0, n_ = 0; // cap_ is 0 or a power of two
};

class OutQueue {
public:
  OutQueue(size_t max_events, size_t max_bytes, OverflowPolicy policy);

  enum class PushResult { Queued, DroppedOldest, DroppedNewest, MustDisconnect };

  // Appends a frame, applying the policy when the bound would be exceeded.
  // DropOldest evicts queued (not partially written) data frames until the new
  // one fits (when even that cannot make room, it discards the new one and
  // returns DroppedNewest); DropNewest discards the new one; Disconnect leaves
  // the queue untouched and tells the caller to close the connection. A frame
  // larger than max_bytes on its own is treated as overflow. Control frames are
  // always queued and not counted against the bound. dropped() counts frames
  // discarded by either drop policy.
  PushResult push(OutFrame f);

  // Copies up to `cap` bytes of queued frames into `buf`, consuming them;
  // remembers a partial frame's offset. Returns bytes copied (0 when empty).
  size_t read_into(char *buf, size_t cap);

  bool empty() const { return frames_.empty(); }
  size_t events() const { return events_; } // data frames queued
  // Data bytes queued; a frame counts whole until its last byte is read out.
  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t frames_written() const { return written_; } // frames fully copied out
  void set_limits(size_t max_events, size_t max_bytes, OverflowPolicy policy);

  // The SSE id of the last data frame copied out (a frame partly copied out
  // counts: it stays first and is always completed, so the client gets all
  // of it), and of the newest data frame still queued ("" when there is
  // none, or it has no id line): where a client told of dropped frames
  // resumes from.
  std::string last_written_id() const;
  std::string newest_queued_id() const;

private:
  bool evict_oldest_for(size_t size);

  FrameRing frames_;
  size_t head_offset_ = 0; // bytes of frames_.front() already copied
  size_t events_ = 0, bytes_ = 0;
  size_t max_events_, max_bytes_;
  OverflowPolicy policy_;
  uint64_t dropped_ = 0, written_ = 0;
  OutFrame last_written_; // the last data frame copied out (its id is read on demand)
};

} // namespace pgbs
