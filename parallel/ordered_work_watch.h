// Watching work that the host queued and no longer waits for (a group's
// exchanges queued on a device stream): a thread of the watch's own polls the
// oldest unfinished item and gives the work up, once, when an item fails or is
// still running past its deadline. Items finish in the order they were added
// (one stream runs them), so only the oldest one is polled.
#ifndef GLM_PARALLEL_ORDERED_WORK_WATCH_H_
#define GLM_PARALLEL_ORDERED_WORK_WATCH_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace glm {

// One queued piece of work as the watch sees it.
class WatchedWork {
 public:
  virtual ~WatchedWork() = default;
  // True once done; an error once it has failed; false while it runs.
  virtual absl::StatusOr<bool> Poll() = 0;
};

class OrderedWorkWatch {
 public:
  // `give_up` is called at most once, on the watch's thread and holding none
  // of its locks, with the first failure (an item's error, or
  // DeadlineExceeded naming the item's `what`); the watch then drops every
  // item and takes no more. `interval`: the time between polls.
  OrderedWorkWatch(absl::Duration interval,
                   std::function<void(const absl::Status&)> give_up);
  // Stops the thread (items still running are left to their owner).
  ~OrderedWorkWatch();
  OrderedWorkWatch(const OrderedWorkWatch&) = delete;
  OrderedWorkWatch& operator=(const OrderedWorkWatch&) = delete;

  // Watches `work` until it is done or `deadline` passes.
  void Add(std::unique_ptr<WatchedWork> work, std::string what,
           absl::Time deadline);
  // The failure the watch gave up on; ok while none.
  absl::Status failure() const;
  // Items not yet seen done.
  int pending() const;

 private:
  struct Item {
    std::unique_ptr<WatchedWork> work;
    std::string what;
    absl::Time deadline;
  };

  void Loop();
  // The oldest item's state: done (popped), failed, or still running.
  absl::Status PollOldest(bool* popped);

  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> give_up_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Item> items_;
  absl::Status failure_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_ORDERED_WORK_WATCH_H_
