// Unit tests for core/outqueue: the three overflow policies, bounds, control
// frames and partial reads, plus a randomised run of the shared harness.
#include "core/outqueue.hpp"
#include "outqueue_harness.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using pgbs::OutFrame;
using pgbs::OutQueue;
using pgbs::OverflowPolicy;
using Result = OutQueue::PushResult;

namespace {

// A data frame of exactly `size` bytes: "id: <n>\n" head + shared body.
OutFrame data_frame(int n, size_t size = 20) {
  OutFrame f;
  f.head = "id: " + std::to_string(n) + "\n";
  std::string body = "data: ";
  while (f.head.size() + body.size() + 2 < size)
    body.push_back('x');
  body += "\n\n";
  f.body = std::make_shared<const std::string>(body);
  return f;
}

OutFrame control_frame(const std::string &text) {
  OutFrame f;
  f.control = true;
  f.head = ": " + text + "\n\n";
  return f;
}

std::string drain(OutQueue &q, size_t chunk = 4096) {
  std::string out;
  std::vector<char> buf(chunk);
  size_t n;
  while ((n = q.read_into(buf.data(), buf.size())) > 0)
    out.append(buf.data(), n);
  return out;
}

// The ids of data frames and texts of control frames, in output order.
std::vector<std::string> frames_of(const std::string &out) {
  std::vector<std::string> names;
  size_t start = 0, cut;
  while ((cut = out.find("\n\n", start)) != std::string::npos) {
    std::string frame = out.substr(start, cut - start);
    if (frame.rfind("id: ", 0) == 0)
      names.push_back(frame.substr(4, frame.find('\n') - 4));
    else
      names.push_back(frame.substr(2));
    start = cut + 2;
  }
  EXPECT_EQ(start, out.size()) << "output ends inside a frame";
  return names;
}

using Names = std::vector<std::string>;

} // namespace

TEST(OverflowPolicy, Parse) {
  OverflowPolicy p = OverflowPolicy::Disconnect;
  EXPECT_TRUE(pgbs::parse_overflow_policy("drop_oldest", &p));
  EXPECT_EQ(p, OverflowPolicy::DropOldest);
  EXPECT_TRUE(pgbs::parse_overflow_policy("drop_newest", &p));
  EXPECT_EQ(p, OverflowPolicy::DropNewest);
  EXPECT_TRUE(pgbs::parse_overflow_policy("disconnect", &p));
  EXPECT_EQ(p, OverflowPolicy::Disconnect);
  for (const char *bad : {"", "DROP_OLDEST", "drop-oldest", "drop_oldest ", "block"})
    EXPECT_FALSE(pgbs::parse_overflow_policy(bad, &p)) << bad;
  EXPECT_EQ(p, OverflowPolicy::Disconnect);
}

TEST(OutQueue, QueuesAndCounts) {
  OutQueue q(10, 1000, OverflowPolicy::DropOldest);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.push(data_frame(1, 20)), Result::Queued);
  EXPECT_EQ(q.push(data_frame(2, 30)), Result::Queued);
  EXPECT_FALSE(q.empty());
  EXPECT_EQ(q.events(), 2u);
  EXPECT_EQ(q.bytes(), 50u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"1", "2"}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.events(), 0u);
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_EQ(q.frames_written(), 2u);
  EXPECT_EQ(q.dropped(), 0u);
}

TEST(OutQueue, ReadFromEmptyQueue) {
  OutQueue q(1, 100, OverflowPolicy::DropOldest);
  char buf[8];
  EXPECT_EQ(q.read_into(buf, sizeof buf), 0u);
  q.push(data_frame(1));
  EXPECT_EQ(q.read_into(buf, 0), 0u);
  EXPECT_EQ(q.events(), 1u);
}

TEST(OutQueue, DropNewestOnEventBound) {
  OutQueue q(3, 1000, OverflowPolicy::DropNewest);
  for (int i = 1; i <= 3; ++i)
    EXPECT_EQ(q.push(data_frame(i)), Result::Queued);
  EXPECT_EQ(q.push(data_frame(4)), Result::DroppedNewest);
  EXPECT_EQ(q.push(data_frame(5)), Result::DroppedNewest);
  EXPECT_EQ(q.events(), 3u);
  EXPECT_EQ(q.dropped(), 2u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"1", "2", "3"}));
}

TEST(OutQueue, DropNewestOnByteBound) {
  OutQueue q(100, 55, OverflowPolicy::DropNewest);
  EXPECT_EQ(q.push(data_frame(1, 20)), Result::Queued);
  EXPECT_EQ(q.push(data_frame(2, 20)), Result::Queued);
  EXPECT_EQ(q.push(data_frame(3, 20)), Result::DroppedNewest);
  EXPECT_EQ(q.push(data_frame(4, 15)), Result::Queued); // exactly 55
  EXPECT_EQ(q.bytes(), 55u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"1", "2", "4"}));
}

TEST(OutQueue, DropOldestOnEventBound) {
  OutQueue q(3, 1000, OverflowPolicy::DropOldest);
  for (int i = 1; i <= 3; ++i)
    q.push(data_frame(i));
  EXPECT_EQ(q.push(data_frame(4)), Result::DroppedOldest);
  EXPECT_EQ(q.push(data_frame(5)), Result::DroppedOldest);
  EXPECT_EQ(q.events(), 3u);
  EXPECT_EQ(q.dropped(), 2u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"3", "4", "5"}));
}

TEST(OutQueue, DropOldestEvictsAsManyAsNeededForBytes) {
  OutQueue q(100, 100, OverflowPolicy::DropOldest);
  for (int i = 1; i <= 5; ++i)
    q.push(data_frame(i, 20));
  EXPECT_EQ(q.bytes(), 100u);
  EXPECT_EQ(q.push(data_frame(6, 55)), Result::DroppedOldest);
  EXPECT_EQ(q.dropped(), 3u);
  EXPECT_EQ(q.events(), 3u);
  EXPECT_EQ(q.bytes(), 95u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"4", "5", "6"}));
}

TEST(OutQueue, DropOldestNeverEvictsAPartiallyWrittenFrame) {
  OutQueue q(2, 1000, OverflowPolicy::DropOldest);
  q.push(data_frame(1));
  q.push(data_frame(2));
  char buf[3];
  ASSERT_EQ(q.read_into(buf, sizeof buf), 3u); // "id:" of frame 1
  EXPECT_EQ(q.push(data_frame(3)), Result::DroppedOldest);
  EXPECT_EQ(q.dropped(), 1u);
  const std::string rest = std::string(buf, 3) + drain(q);
  EXPECT_EQ(frames_of(rest), (Names{"1", "3"}));
}

TEST(OutQueue, DropOldestCannotMakeRoomNextToAPartialFrame) {
  OutQueue q(1, 1000, OverflowPolicy::DropOldest);
  q.push(data_frame(1));
  char buf[3];
  ASSERT_EQ(q.read_into(buf, sizeof buf), 3u);
  EXPECT_EQ(q.push(data_frame(2)), Result::DroppedNewest);
  EXPECT_EQ(q.dropped(), 1u);
  EXPECT_EQ(frames_of(std::string(buf, 3) + drain(q)), (Names{"1"}));
}

TEST(OutQueue, DisconnectLeavesQueueUntouched) {
  OutQueue q(2, 1000, OverflowPolicy::Disconnect);
  q.push(data_frame(1));
  q.push(data_frame(2));
  EXPECT_EQ(q.push(data_frame(3)), Result::MustDisconnect);
  EXPECT_EQ(q.events(), 2u);
  EXPECT_EQ(q.dropped(), 0u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"1", "2"}));
}

TEST(OutQueue, DisconnectOnByteBound) {
  OutQueue q(100, 30, OverflowPolicy::Disconnect);
  q.push(data_frame(1, 20));
  EXPECT_EQ(q.push(data_frame(2, 20)), Result::MustDisconnect);
  EXPECT_EQ(q.bytes(), 20u);
}

TEST(OutQueue, OversizedFrameOverflowsUnlessAlone) {
  OutQueue oldest(10, 50, OverflowPolicy::DropOldest);
  oldest.push(data_frame(1, 20));
  EXPECT_EQ(oldest.push(data_frame(2, 51)), Result::DroppedNewest);
  EXPECT_EQ(oldest.events(), 1u); // nothing evicted for a frame that cannot fit anyway
  EXPECT_EQ(frames_of(drain(oldest)), (Names{"1"}));

  for (auto policy : {OverflowPolicy::DropOldest, OverflowPolicy::DropNewest,
                      OverflowPolicy::Disconnect, OverflowPolicy::Lag}) {
    // An empty queue takes one frame of any size: no message is too large.
    OutQueue q(10, 50, policy);
    EXPECT_EQ(q.push(control_frame("connected")), Result::Queued);
    EXPECT_EQ(q.push(data_frame(1, 51)), Result::Queued);
    EXPECT_EQ(q.push(data_frame(2, 51)), policy == OverflowPolicy::Disconnect
                                             ? Result::MustDisconnect
                                             : Result::DroppedNewest);
    EXPECT_EQ(frames_of(drain(q)), (Names{"connected", "1"}));
  }
}

TEST(OutQueue, LagRefusesWhatDoesNotFit) {
  OutQueue q(2, 1000, OverflowPolicy::Lag);
  EXPECT_EQ(q.push(data_frame(1)), Result::Queued);
  EXPECT_EQ(q.push(data_frame(2)), Result::Queued);
  EXPECT_EQ(q.push(data_frame(3)), Result::DroppedNewest);
  EXPECT_EQ(frames_of(drain(q)), (Names{"1", "2"}));
  OverflowPolicy p;
  ASSERT_TRUE(parse_overflow_policy("lag", &p));
  EXPECT_EQ(p, OverflowPolicy::Lag);
  EXPECT_STREQ(overflow_policy_name(p), "lag");
}

TEST(OutQueue, ZeroBoundsRejectEveryDataFrame) {
  OutQueue q(0, 1000, OverflowPolicy::DropOldest);
  EXPECT_EQ(q.push(data_frame(1)), Result::DroppedNewest);
  EXPECT_EQ(q.push(control_frame("gap")), Result::Queued);
  EXPECT_EQ(frames_of(drain(q)), (Names{"gap"}));
}

TEST(OutQueue, ControlFramesNeverDroppedNorCounted) {
  for (auto policy :
       {OverflowPolicy::DropOldest, OverflowPolicy::DropNewest, OverflowPolicy::Disconnect}) {
    OutQueue q(2, 40, policy);
    EXPECT_EQ(q.push(control_frame("connected")), Result::Queued);
    q.push(data_frame(1, 20));
    q.push(data_frame(2, 20));
    for (int i = 0; i < 50; ++i)
      EXPECT_EQ(q.push(control_frame("c" + std::to_string(i))), Result::Queued);
    EXPECT_EQ(q.events(), 2u);
    EXPECT_EQ(q.bytes(), 40u);
    q.push(data_frame(3, 20)); // overflow: under drop_oldest evicts 1, not a control frame
    const Names out = frames_of(drain(q));
    EXPECT_EQ(out.size(), 53u); // 51 control + 2 data frames whatever the policy
    EXPECT_EQ(out.front(), "connected");
    EXPECT_EQ(std::count(out.begin(), out.end(), "c49"), 1);
    if (policy == OverflowPolicy::DropOldest) {
      EXPECT_EQ(out[1], "2");
      EXPECT_EQ(out.back(), "3");
    } else {
      EXPECT_EQ(out[1], "1");
      EXPECT_EQ(out[2], "2");
    }
  }
}

TEST(OutQueue, PartialReadsByteByByte) {
  OutQueue q(10, 1000, OverflowPolicy::DropOldest);
  q.push(control_frame("hello"));
  q.push(data_frame(1, 25));
  OutFrame body_only;
  body_only.body = std::make_shared<const std::string>("id: 2\ndata: b\n\n");
  q.push(body_only);
  OutFrame head_only;
  head_only.head = "id: 3\ndata: h\n\n";
  q.push(head_only);
  const size_t total_bytes = q.bytes();
  std::string out;
  char c;
  size_t reads = 0;
  while (q.read_into(&c, 1) == 1) {
    out.push_back(c);
    ++reads;
    // Counters drop only when a frame is complete.
    if (q.frames_written() < 2) {
      EXPECT_EQ(q.bytes(), total_bytes);
    }
  }
  EXPECT_EQ(frames_of(out), (Names{"hello", "1", "2", "3"}));
  EXPECT_EQ(q.frames_written(), 4u);
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_EQ(reads, out.size());
}

TEST(OutQueue, ReadSpansFramesAndStopsMidFrame) {
  OutQueue q(10, 1000, OverflowPolicy::DropOldest);
  q.push(data_frame(1, 20));
  q.push(data_frame(2, 20));
  q.push(data_frame(3, 20));
  char buf[30];
  ASSERT_EQ(q.read_into(buf, sizeof buf), 30u);
  EXPECT_EQ(q.frames_written(), 1u);
  EXPECT_EQ(q.events(), 2u);
  std::string out(buf, 30);
  out += drain(q, 7);
  EXPECT_EQ(frames_of(out), (Names{"1", "2", "3"}));
  EXPECT_EQ(out.size(), 60u);
}

TEST(OutQueue, BodyIsSharedNotCopied) {
  auto body = std::make_shared<const std::string>("data: shared\n\n");
  OutQueue a(10, 1000, OverflowPolicy::DropOldest), b(10, 1000, OverflowPolicy::DropOldest);
  OutFrame f;
  f.head = "id: 1\n";
  f.body = body;
  a.push(f);
  b.push(f);
  EXPECT_EQ(body.use_count(), 4); // body, f, a, b
  drain(a);
  drain(b);
  EXPECT_EQ(body.use_count(), 2);
}

TEST(OutQueue, SetLimitsAppliesToNextPush) {
  OutQueue q(10, 1000, OverflowPolicy::DropNewest);
  for (int i = 1; i <= 5; ++i)
    q.push(data_frame(i));
  q.set_limits(2, 1000, OverflowPolicy::DropOldest);
  EXPECT_EQ(q.events(), 5u); // nothing evicted by set_limits itself
  EXPECT_EQ(q.push(data_frame(6)), Result::DroppedOldest);
  EXPECT_EQ(q.events(), 2u);
  EXPECT_EQ(q.dropped(), 4u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"5", "6"}));
  q.set_limits(2, 1000, OverflowPolicy::Disconnect);
  q.push(data_frame(7));
  q.push(data_frame(8));
  EXPECT_EQ(q.push(data_frame(9)), Result::MustDisconnect);
}

TEST(OutQueue, RandomOperationsKeepInvariants) {
  std::mt19937 rng(777);
  uint64_t frames = 0;
  uint64_t results[4] = {0, 0, 0, 0};
  for (int round = 0; round < 3000; ++round) {
    std::vector<uint8_t> bytes(rng() % 400);
    for (auto &b : bytes)
      b = static_cast<uint8_t>(rng());
    pgbs::test::OutQueueHarness h;
    const std::string err = h.run(bytes.data(), bytes.size());
    ASSERT_EQ(err, "") << "round " << round;
    frames += h.frames_out();
    for (int i = 0; i < 4; ++i)
      results[i] += h.results()[i];
  }
  // The harness did exercise the queue, and every outcome of push().
  EXPECT_GT(frames, 10000u);
  for (int i = 0; i < 4; ++i)
    EXPECT_GT(results[i], 100u) << "PushResult " << i;
}

TEST(OutQueue, ResumeIdsComeFromFrames) {
  OutQueue q(10, 1000, OverflowPolicy::DropOldest);
  EXPECT_EQ(q.last_written_id(), "");
  EXPECT_EQ(q.newest_queued_id(), "");
  OutFrame a; // id in the head
  a.head = "id: 7~1\n";
  a.body = std::make_shared<const std::string>("data: a\n\n");
  OutFrame b; // id inside a shared body (the fan-out fast path)
  b.body = std::make_shared<const std::string>("id: 7~2\ndata: b\n\n");
  OutFrame c; // control frames have no id and never count
  c.body = std::make_shared<const std::string>("event: pgbus:gap-detected\ndata: {}\n\n");
  c.control = true;
  q.push(a);
  q.push(b);
  q.push(c);
  EXPECT_EQ(q.newest_queued_id(), "7~2");
  char buf[64];
  ASSERT_EQ(q.read_into(buf, a.size()), a.size());
  EXPECT_EQ(q.last_written_id(), "7~1");
  // b partly copied out: the client will get all of it, so it is the resume point
  ASSERT_EQ(q.read_into(buf, 3), 3u);
  EXPECT_EQ(q.last_written_id(), "7~2");
  char rest[256];
  q.read_into(rest, sizeof(rest));
  EXPECT_EQ(q.last_written_id(), "7~2");
  EXPECT_EQ(q.newest_queued_id(), "");
}

// The queue's circular buffer wraps, grows while wrapped, evicts from the
// middle and gives its storage back when a burst is over, without losing or
// reordering a frame; the last written id survives each of these.
TEST(OutQueue, FramesSurviveWrapGrowthAndEviction) {
  OutQueue q(1000, 1 << 20, OverflowPolicy::DropOldest);
  Names want, got;
  int next = 1;
  for (int round = 0; round < 50; ++round) {
    const int pushes = 1 + (round * 7) % 23; // 1..23 frames: crosses 2, 4, 8, 16, 32
    for (int i = 0; i < pushes; ++i) {
      want.push_back(std::to_string(next));
      q.push(data_frame(next++));
    }
    // read about half of what is queued, one frame at a time
    const size_t keep = q.events() / 2;
    while (q.events() > keep) {
      char buf[20];
      ASSERT_EQ(q.read_into(buf, sizeof buf), 20u);
      Names one = frames_of(std::string(buf, 20));
      ASSERT_EQ(one.size(), 1u);
      got.push_back(one[0]);
      EXPECT_EQ(q.last_written_id(), one[0]);
    }
  }
  for (const std::string &n : frames_of(drain(q)))
    got.push_back(n);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.last_written_id(), want.back());

  // eviction from the middle (a control frame stays) after a wrap
  OutQueue e(3, 1 << 20, OverflowPolicy::DropOldest);
  e.push(data_frame(1));
  e.push(data_frame(2));
  char buf[20];
  ASSERT_EQ(e.read_into(buf, sizeof buf), 20u); // 1 written, head moves
  e.push(control_frame("c"));
  e.push(data_frame(3));
  e.push(data_frame(4));
  EXPECT_EQ(e.push(data_frame(5)), Result::DroppedOldest); // drops 2, keeps "c"
  EXPECT_EQ(frames_of(drain(e)), (Names{"c", "3", "4", "5"}));
  EXPECT_EQ(e.last_written_id(), "5");
}

// Eviction behind a partly written frame (index 1) and from the back half of
// the buffer keeps every other frame in order.
TEST(OutQueue, EvictionBehindAPartlyWrittenFrame) {
  OutQueue q(4, 1 << 20, OverflowPolicy::DropOldest);
  for (int i = 1; i <= 4; ++i)
    q.push(data_frame(i));
  char buf[10];
  ASSERT_EQ(q.read_into(buf, sizeof buf), 10u);            // frame 1 half written: pinned
  EXPECT_EQ(q.push(data_frame(5)), Result::DroppedOldest); // evicts 2 (index 1)
  EXPECT_EQ(q.push(data_frame(6)), Result::DroppedOldest); // evicts 3
  std::string rest = std::string(buf, 10) + drain(q);
  EXPECT_EQ(frames_of(rest), (Names{"1", "4", "5", "6"}));
  EXPECT_EQ(q.dropped(), 2u);
}

// A stream that gets a few frames per write round keeps its buffer between
// rounds (no allocation and regrowth per round); trim() (an idle connection)
// and a drained burst larger than the kept size give it back.
TEST(OutQueue, BufferKeptBetweenRoundsAndGivenBackWhenIdle) {
  OutQueue q(1000, 1 << 20, OverflowPolicy::Lag);
  EXPECT_EQ(q.buffer_capacity(), 0u); // nothing allocated before the first frame
  for (int round = 0; round < 3; ++round) {
    for (int i = 1; i <= 12; ++i)
      ASSERT_EQ(q.push(data_frame(round * 12 + i)), Result::Queued);
    drain(q);
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.buffer_capacity(), 16u) << "round " << round;
  }
  q.trim();
  EXPECT_EQ(q.buffer_capacity(), 0u);
  q.push(data_frame(100));
  q.trim(); // not while a frame is queued
  EXPECT_EQ(q.buffer_capacity(), 2u);
  EXPECT_EQ(frames_of(drain(q)), (Names{"100"}));
  for (int i = 0; i < 100; ++i)
    q.push(data_frame(200 + i));
  drain(q);
  EXPECT_EQ(q.buffer_capacity(), 0u); // a burst's buffer goes as it empties
}

// A batch: several events of one stream in one frame (the engine's run of
// rows for connections in step with the stream). It counts as that many
// events against the bound and in the figures, is never taken alone beyond
// the bounds, and its id is its last event's.
namespace {
OutFrame batch_frame(int first, int count) {
  auto text = std::make_shared<std::string>();
  OutFrame f;
  for (int i = first; i < first + count; ++i) {
    f.last_at = (uint32_t)text->size();
    *text += "id: 9~" + std::to_string(i) + "\ndata: x\n\n";
  }
  f.body = text;
  f.events = (uint32_t)count;
  return f;
}
} // namespace

TEST(OutQueue, BatchCountsItsEventsAndCarriesItsLastId) {
  OutQueue q(5, 1000, OverflowPolicy::Lag);
  EXPECT_EQ(q.push(batch_frame(1, 3)), OutQueue::PushResult::Queued);
  EXPECT_EQ(q.events(), 3u);
  EXPECT_EQ(q.newest_queued_id(), "9~3");
  // Three more would make six: refused whole, counted as three dropped.
  EXPECT_EQ(q.push(batch_frame(4, 3)), OutQueue::PushResult::DroppedNewest);
  EXPECT_EQ(q.dropped(), 3u);
  EXPECT_EQ(q.push(batch_frame(4, 2)), OutQueue::PushResult::Queued);
  EXPECT_EQ(q.events(), 5u);
  char buf[256];
  const size_t n = q.read_into(buf, 10); // inside the first batch
  EXPECT_EQ(n, 10u);
  EXPECT_EQ(q.last_written_id(), "9~3"); // it will be completed: its last id is the resume point
  const size_t m = q.read_into(buf + n, sizeof(buf) - n);
  EXPECT_EQ(q.events(), 0u);
  EXPECT_EQ(q.last_written_id(), "9~5");
  EXPECT_EQ(frames_of(std::string(buf, n + m)),
            (std::vector<std::string>{"9~1", "9~2", "9~3", "9~4", "9~5"}));
}

TEST(OutQueue, BatchIsNotTakenAloneBeyondTheBounds) {
  OutQueue q(2, 1000, OverflowPolicy::DropNewest);
  EXPECT_EQ(q.push(batch_frame(1, 3)), OutQueue::PushResult::DroppedNewest);
  EXPECT_EQ(q.events(), 0u);
  EXPECT_EQ(q.dropped(), 3u);
  EXPECT_EQ(q.push(batch_frame(1, 2)), OutQueue::PushResult::Queued);
}

TEST(OutQueue, EvictingABatchCountsEachOfItsEvents) {
  OutQueue q(4, 1000, OverflowPolicy::DropOldest);
  ASSERT_EQ(q.push(batch_frame(1, 3)), OutQueue::PushResult::Queued);
  ASSERT_EQ(q.push(data_frame(4)), OutQueue::PushResult::Queued);
  EXPECT_EQ(q.push(data_frame(5)), OutQueue::PushResult::DroppedOldest);
  EXPECT_EQ(q.dropped(), 3u);
  EXPECT_EQ(q.events(), 2u);
}
