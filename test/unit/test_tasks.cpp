// The worker's table of periodic tasks (worker/tasks.hpp): the earliest
// deadline, due tasks run once per interval and in table order, intervals
// read afresh (a SIGHUP reload), tasks that are not wanted or do not wake
// the loop. A fake clock in milliseconds.
#include "worker/tasks.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

using pgbs::worker::earliest;
using pgbs::worker::Tasks;

namespace {

struct TaskTable : ::testing::Test {
  int64_t now = 1000;
  Tasks tasks{[this] { return now; }};
  std::vector<std::string> ran;

  std::function<void()> record(const char *name) {
    return [this, name] { ran.push_back(name); };
  }
  static Tasks::Interval every(int64_t ms) {
    return [ms] { return ms; };
  }
  // Advances the clock 1 ms at a time over `ms`, running the due tasks at each step.
  void run_for(int64_t ms) {
    for (int64_t end = now + ms; now < end; now++)
      tasks.run_due();
  }
  int count(const std::string &name) const { return (int)std::count(ran.begin(), ran.end(), name); }
};

TEST(Earliest, MinusOneMeansUntilWoken) {
  EXPECT_EQ(earliest(-1, -1), -1);
  EXPECT_EQ(earliest(-1, 7), 7);
  EXPECT_EQ(earliest(7, -1), 7);
  EXPECT_EQ(earliest(3, 7), 3);
  EXPECT_EQ(earliest(0, 7), 0);
}

TEST_F(TaskTable, NoTaskWakesTheLoop) {
  EXPECT_EQ(tasks.wait_ms(), -1);
  tasks.add("quiet", every(100), record("quiet")); // does not wake the loop
  EXPECT_EQ(tasks.wait_ms(), -1);
  tasks.run_due();
  EXPECT_EQ(tasks.wait_ms(), -1);
}

TEST_F(TaskTable, WaitsForTheEarliestDeadline) {
  tasks.add("slow", every(1000), record("slow")).wakes();
  tasks.add("fast", every(300), record("fast")).wakes();
  tasks.add("quiet", every(50), record("quiet")); // its deadline is not waited for
  EXPECT_EQ(tasks.wait_ms(), 0);                  // none ran yet: all due
  tasks.run_due();
  EXPECT_EQ(ran, (std::vector<std::string>{"slow", "fast", "quiet"}));
  EXPECT_EQ(tasks.wait_ms(), 300);
  now += 120;
  EXPECT_EQ(tasks.wait_ms(), 180);
  now += 180;
  EXPECT_EQ(tasks.wait_ms(), 0);
  now += 50; // overdue: still 0, never negative
  EXPECT_EQ(tasks.wait_ms(), 0);
  ran.clear();
  tasks.run_due();
  EXPECT_EQ(ran, (std::vector<std::string>{"fast", "quiet"}));
  EXPECT_EQ(tasks.wait_ms(), 300); // from when it ran, not from its deadline
}

TEST_F(TaskTable, DueTasksRunOncePerIntervalInTableOrder) {
  tasks.add("a", every(100), record("a"));
  tasks.add("round", every(0), record("round")); // every round
  tasks.add("b", every(250), record("b"));
  run_for(1000);
  EXPECT_EQ(count("a"), 10); // at 0, 100, ..., 900
  EXPECT_EQ(count("b"), 4);  // at 0, 250, 500, 750
  EXPECT_EQ(count("round"), 1000);
  // Within one run_due the order is the table's.
  ran.clear();
  now += 1000;
  tasks.run_due();
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "round", "b"}));
  // Looked at again at once: only the every-round task.
  ran.clear();
  tasks.run_due();
  EXPECT_EQ(ran, (std::vector<std::string>{"round"}));
}

TEST_F(TaskTable, ALateRoundRunsATaskOnceNotOncePerMissedInterval) {
  tasks.add("a", every(100), record("a"));
  tasks.run_due();
  now += 1000; // ten intervals without a round
  tasks.run_due();
  tasks.run_due();
  EXPECT_EQ(count("a"), 2);
  now += 99;
  tasks.run_due();
  EXPECT_EQ(count("a"), 2);
  now += 1;
  tasks.run_due();
  EXPECT_EQ(count("a"), 3);
}

TEST_F(TaskTable, IntervalsChangedByAReloadApplyAtOnce) {
  int64_t flush_ms = 1000; // a setting, read again after SIGHUP
  tasks
      .add(
          "flush", [&] { return flush_ms; }, record("flush"))
      .wakes();
  tasks.run_due();
  EXPECT_EQ(tasks.wait_ms(), 1000);
  now += 200;
  flush_ms = 300; // the reload
  EXPECT_EQ(tasks.wait_ms(), 100);
  now += 100;
  tasks.run_due();
  EXPECT_EQ(count("flush"), 2);
  run_for(900);                 // from 1300 to 2199
  EXPECT_EQ(count("flush"), 4); // at 1600 and 1900
  flush_ms = 5000;              // longer: the deadline moves out
  EXPECT_EQ(tasks.wait_ms(), 4700);
  run_for(4700);
  EXPECT_EQ(count("flush"), 4);
  tasks.run_due(); // at 6900
  EXPECT_EQ(count("flush"), 5);
}

TEST_F(TaskTable, FirstAfterIntervalWaitsOneInterval) {
  tasks.add("probe", every(5000), record("probe")).first_after_interval().wakes();
  EXPECT_EQ(tasks.wait_ms(), 5000);
  run_for(5000);
  EXPECT_EQ(count("probe"), 0);
  tasks.run_due();
  EXPECT_EQ(count("probe"), 1);
}

TEST_F(TaskTable, ATaskNotWantedIsNeverDueAndWakesNobody) {
  bool pending = false;
  tasks
      .add("trim", every(2000),
           [&] {
             ran.push_back("trim");
             pending = false;
           })
      .when([&] { return pending; })
      .wakes();
  EXPECT_EQ(tasks.wait_ms(), -1);
  run_for(5000);
  EXPECT_EQ(count("trim"), 0);
  // Wanted after a long while: runs at once (its clock stood still).
  pending = true;
  EXPECT_EQ(tasks.wait_ms(), 0);
  tasks.run_due();
  EXPECT_EQ(count("trim"), 1);
  EXPECT_EQ(tasks.wait_ms(), -1);
  // Wanted again soon after: waits out the rest of its interval.
  now += 500;
  pending = true;
  EXPECT_EQ(tasks.wait_ms(), 1500);
  run_for(1500);
  EXPECT_EQ(count("trim"), 1);
  tasks.run_due();
  EXPECT_EQ(count("trim"), 2);
}

TEST_F(TaskTable, WakesOnlyWhileItsConditionHolds) {
  bool connections = false, passing = false;
  tasks.add("pass", every(500), record("pass")).wakes([&] { return connections; });
  tasks.add("slice", every(0), record("slice")).wakes([&] { return passing; });
  tasks.run_due();
  EXPECT_EQ(tasks.wait_ms(), -1);
  connections = true;
  EXPECT_EQ(tasks.wait_ms(), 500);
  passing = true; // an every-round task that wakes: no wait at all
  EXPECT_EQ(tasks.wait_ms(), 0);
  // Not waking does not stop a task from running at the next round.
  connections = passing = false;
  now += 600;
  ran.clear();
  tasks.run_due();
  EXPECT_EQ(ran, (std::vector<std::string>{"pass", "slice"}));
}

TEST_F(TaskTable, ABodyThatThrowsEndsTheRunAndWaitsItsInterval) {
  bool fail = true;
  tasks.add("store", every(1000), [&] {
    ran.push_back("store");
    if (fail)
      throw std::runtime_error("lock timeout");
  });
  tasks.add("after", every(0), record("after"));
  EXPECT_THROW(tasks.run_due(), std::runtime_error);
  EXPECT_EQ(ran, (std::vector<std::string>{"store"}));
  fail = false;
  tasks.run_due(); // not again at once; the rest of the table runs
  EXPECT_EQ(ran, (std::vector<std::string>{"store", "after"}));
  now += 1000;
  tasks.run_due();
  EXPECT_EQ(count("store"), 2);
}

TEST_F(TaskTable, NamesInTableOrder) {
  tasks.add("cursor flush", every(1000), [] {});
  tasks.add("heap trim", every(2000), [] {});
  const std::vector<const char *> names = tasks.names();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_STREQ(names[0], "cursor flush");
  EXPECT_STREQ(names[1], "heap trim");
}

} // namespace
