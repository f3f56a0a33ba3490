// The worker's periodic duties as a table of named tasks (docs/ARCHITECTURE.md,
// "The worker's loop"). Each task has an interval, read afresh at every look
// (so a SIGHUP reload changes it at once), and a body. The loop waits until
// the earliest deadline of the tasks that wake it, runs its I/O round, then
// run_due(): every task that is due, in the order they were added.
// PostgreSQL-free (test/unit/test_tasks.cpp).
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace pgbs::worker {

class Tasks {
public:
  using Clock = std::function<int64_t()>; // milliseconds
  using Interval = std::function<int64_t()>;
  using Predicate = std::function<bool()>;

  class Task {
  public:
    // Only while `wanted` holds: otherwise the task is never due, wakes
    // nobody, and its clock stands still (so it runs at once when wanted
    // again, if its interval has passed).
    Task &when(Predicate wanted);
    // Its deadline bounds the loop's wait (while `wakes` holds, when given).
    // A task that does not wake the loop runs at the first wake-up after its
    // deadline.
    Task &wakes(Predicate wakes = nullptr);
    // The first run comes one interval after now, not at the first look.
    Task &first_after_interval();

  private:
    friend class Tasks;
    Task(const char *name, Interval interval, std::function<void()> run, const Clock &clock)
        : name_(name), interval_(std::move(interval)), run_(std::move(run)), clock_(&clock) {}
    bool wanted() const { return !wanted_ || wanted_(); }
    int64_t deadline() const;

    const char *name_;
    Interval interval_;
    std::function<void()> run_;
    const Clock *clock_;
    Predicate wanted_;
    bool wakes_ = false;
    Predicate wakes_when_;
    bool ran_ = false;
    int64_t last_ms_ = 0; // when it last started
  };

  explicit Tasks(Clock clock) : clock_(std::move(clock)) {}
  Tasks(const Tasks &) = delete;
  Tasks &operator=(const Tasks &) = delete;

  // Adds a task after the others; interval 0: every round.
  Task &add(const char *name, Interval interval_ms, std::function<void()> run);
  // Milliseconds until the earliest deadline of a task that wakes the loop:
  // 0 when one is due, -1 when none wakes it.
  long wait_ms() const;
  // Runs every due task, in table order. A task's clock moves as its body
  // starts, so a body that throws waits for its next interval rather than
  // running again at every wake-up; the exception ends the run (the tasks
  // after it wait for the next one).
  void run_due();
  // The names of the tasks, in table order.
  std::vector<const char *> names() const;

private:
  Clock clock_;
  std::deque<Task> tasks_; // a Task & stays valid as more are added
};

// The shorter of two waits in milliseconds, where -1 means "until woken".
inline long earliest(long a, long b) {
  if (a < 0)
    return b;
  if (b < 0)
    return a;
  return a < b ? a : b;
}

} // namespace pgbs::worker
