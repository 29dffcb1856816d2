#include "parallel/ordered_work_watch.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {

OrderedWorkWatch::OrderedWorkWatch(
    absl::Duration interval, std::function<void(const absl::Status&)> give_up)
    : interval_(interval),
      give_up_(std::move(give_up)),
      thread_([this] { Loop(); }) {}

OrderedWorkWatch::~OrderedWorkWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void OrderedWorkWatch::Add(std::unique_ptr<WatchedWork> work, std::string what,
                           absl::Time deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    items_.push_back({std::move(work), std::move(what), deadline});
  }
  changed_.notify_all();
}

absl::Status OrderedWorkWatch::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

int OrderedWorkWatch::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(items_.size());
}

// Only this thread pops items, so the oldest one stays in place while it is
// polled without the lock (Add may push behind it meanwhile).
absl::Status OrderedWorkWatch::PollOldest(bool* popped) {
  *popped = false;
  WatchedWork* oldest;
  absl::Time deadline;
  {
    std::lock_guard<std::mutex> lock(mu_);
    oldest = items_.front().work.get();
    deadline = items_.front().deadline;
  }
  const absl::StatusOr<bool> done = oldest->Poll();
  std::lock_guard<std::mutex> lock(mu_);
  if (!done.ok()) {
    return absl::Status(
        done.status().code(),
        absl::StrCat(items_.front().what, ": ", done.status().message()));
  }
  if (*done) {
    items_.pop_front();
    *popped = true;
    return absl::OkStatus();
  }
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat(items_.front().what, " did not finish by its deadline"));
  }
  return absl::OkStatus();
}

void OrderedWorkWatch::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !items_.empty(); });
    if (stopping_) return;
    lock.unlock();
    bool popped = false;
    const absl::Status state = PollOldest(&popped);
    lock.lock();
    if (!state.ok()) {
      failure_ = state;
      items_.clear();
      lock.unlock();
      give_up_(state);
      lock.lock();
      continue;
    }
    // The next item right away after one finished; else wait a while.
    if (!popped) {
      changed_.wait_for(lock, absl::ToChronoMicroseconds(interval_),
                        [&] { return stopping_; });
    }
  }
}

}  // namespace glm
