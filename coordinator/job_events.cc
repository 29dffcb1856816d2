#include "coordinator/job_events.h"

#include <algorithm>

namespace glm {

void JobSubscription::Push(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(event);
}

std::optional<v1::JobEvent> JobSubscription::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has_event = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !queue_.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has_event), timeout)) {
    return std::nullopt;
  }
  v1::JobEvent event = std::move(queue_.front());
  queue_.pop_front();
  return event;
}

std::shared_ptr<JobSubscription> JobEventHub::Subscribe(
    const std::string& job_id) {
  auto subscription = std::make_shared<JobSubscription>();
  absl::MutexLock lock(&mu_);
  subscribers_[job_id].push_back(subscription);
  return subscription;
}

void JobEventHub::Publish(const std::string& job_id,
                          const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  auto it = subscribers_.find(job_id);
  if (it == subscribers_.end()) return;
  std::vector<std::weak_ptr<JobSubscription>>& list = it->second;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](const std::weak_ptr<JobSubscription>& weak) {
                              return weak.expired();
                            }),
             list.end());
  for (const std::weak_ptr<JobSubscription>& weak : list) {
    if (std::shared_ptr<JobSubscription> subscription = weak.lock()) {
      subscription->Push(event);
    }
  }
  if (list.empty()) subscribers_.erase(it);
}

}  // namespace glm
