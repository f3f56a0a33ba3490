// A connection's bounded outbound queue and its overflow policy (docs/ARCHITECTURE.md, "Delivery:
// live, lag and replay"). Pure C++, no PostgreSQL.
#pragma once
#include "core/no_postgres.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pgbs {

// Lag: the engine never queues a data frame that does not fit (it pages it
// later); should one arrive anyway it is refused like DropNewest. The drop
// policies are the live-only modes.
enum class OverflowPolicy { DropOldest, DropNewest, Disconnect, Lag };

// Parses "drop_oldest" | "drop_newest" | "disconnect" | "lag".
bool parse_overflow_policy(const std::string &s, OverflowPolicy *out);
const char *overflow_policy_name(OverflowPolicy p);

// One queued SSE event: a small per-connection head (usually "id: ...\n")
// followed by a body shared by every connection that receives the event
// ("event: ...\ndata: ...\n\n"), so the payload is stored once per stream.
//
// A data frame may carry several events of one stream back to back in its
// body (the engine's batch of a stream's rows for connections in step with
// it, engine/delivery.cpp): `events` counts them against the bound, and the
// last one, whose id is the frame's, starts at `last_at` in the body.
struct OutFrame {
  std::string head;
  std::shared_ptr<const std::string> body;
  bool control = false; // connected/gap/shutdown frames: never dropped, not counted
  uint32_t events = 1;  // data events in the frame (a batch: more than one)
  uint32_t last_at = 0; // where the last of them starts in the body
  size_t size() const { return head.size() + (body ? body->size() : 0); }
};

// A FIFO of frames in one growable circular buffer. Nothing is allocated
// while it has never held a frame (a std::deque allocates a 512-byte node
// even when empty). A buffer of up to kKept frames is kept when it empties,
// so a stream that gets a few frames per write round does not allocate and
// grow it again every round; release() gives it back once the connection is
// idle, and a larger one (a burst) goes as soon as it empties.
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
  void release();       // the buffer, while empty
  size_t capacity() const { return cap_; }
  static constexpr size_t kKept = 64;

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

  // Appends a frame, applying the policy when the bound would be exceeded
  // (a frame of several events counts as that many, and is never taken
  // alone beyond the bounds).
  // DropOldest evicts queued (not partially written) data frames until the new
  // one fits (when even that cannot make room, it discards the new one and
  // returns DroppedNewest); DropNewest (and Lag) discards the new one;
  // Disconnect leaves the queue untouched and tells the caller to close the
  // connection. A queue without data frames takes one frame of any size, so
  // no message is too large to be delivered. Control frames are
  // always queued and not counted against the bound. dropped() counts frames
  // discarded by either drop policy.
  PushResult push(OutFrame f);

  // Copies up to `cap` bytes of queued frames into `buf`, consuming them;
  // remembers a partial frame's offset. Returns bytes copied (0 when empty).
  size_t read_into(char *buf, size_t cap);

  bool empty() const { return frames_.empty(); }
  // Gives the frame buffer back while nothing is queued (an idle connection).
  void trim() { frames_.release(); }
  size_t buffer_capacity() const { return frames_.capacity(); }
  size_t events() const { return events_; } // data events queued
  // Data bytes queued; a frame counts whole until its last byte is read out.
  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }        // events
  uint64_t frames_written() const { return written_; } // frames fully copied out
  void set_limits(size_t max_events, size_t max_bytes, OverflowPolicy policy);
  // What last_written_id() says before any data frame was written: the
  // cursor the connection started from.
  void set_start_id(const std::string &id);

  // The SSE id of the last data frame copied out (a frame partly copied out
  // counts: it stays first and is always completed, so the client gets all
  // of it), and of the newest data frame still queued ("" when there is
  // none, or it has no id line): where a client told of dropped frames
  // resumes from.
  std::string last_written_id() const;
  std::string newest_queued_id() const;

private:
  bool evict_oldest_for(size_t events, size_t size);

  FrameRing frames_;
  size_t head_offset_ = 0; // bytes of frames_.front() already copied
  size_t events_ = 0, bytes_ = 0;
  size_t max_events_, max_bytes_;
  OverflowPolicy policy_;
  uint64_t dropped_ = 0, written_ = 0;
  OutFrame last_written_; // the last data frame copied out (its id is read on demand)
};

} // namespace pgbs
