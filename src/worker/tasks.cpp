// The table of the worker's periodic tasks (worker/tasks.hpp).
#include "worker/tasks.hpp"

#include <algorithm>

namespace pgbs::worker {

Tasks::Task &Tasks::Task::when(Predicate wanted) {
  wanted_ = std::move(wanted);
  return *this;
}

Tasks::Task &Tasks::Task::wakes(Predicate wakes) {
  wakes_ = true;
  wakes_when_ = std::move(wakes);
  return *this;
}

Tasks::Task &Tasks::Task::first_after_interval() {
  ran_ = true;
  last_ms_ = (*clock_)();
  return *this;
}

// When the task is next due: at once if it never ran.
int64_t Tasks::Task::deadline() const {
  if (!ran_)
    return INT64_MIN;
  return last_ms_ + std::max<int64_t>(interval_(), 0);
}

Tasks::Task &Tasks::add(const char *name, Interval interval_ms, std::function<void()> run) {
  tasks_.push_back(Task(name, std::move(interval_ms), std::move(run), clock_));
  return tasks_.back();
}

long Tasks::wait_ms() const {
  long wait = -1;
  const int64_t now = clock_();
  for (const Task &t : tasks_) {
    if (!t.wakes_ || (t.wakes_when_ && !t.wakes_when_()) || !t.wanted())
      continue;
    const int64_t deadline = t.deadline();
    wait = earliest(wait, deadline <= now ? 0 : (long)(deadline - now));
  }
  return wait;
}

void Tasks::run_due() {
  for (Task &t : tasks_) {
    if (!t.wanted())
      continue;
    const int64_t now = clock_();
    if (now < t.deadline())
      continue;
    t.ran_ = true;
    t.last_ms_ = now;
    t.run_();
  }
}

std::vector<const char *> Tasks::names() const {
  std::vector<const char *> out;
  for (const Task &t : tasks_)
    out.push_back(t.name_);
  return out;
}

} // namespace pgbs::worker
