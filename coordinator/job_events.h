// Fan-out of job events (state changes and step metrics) to WatchJob streams.
#ifndef GLM_COORDINATOR_JOB_EVENTS_H_
#define GLM_COORDINATOR_JOB_EVENTS_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/job_service.pb.h"

namespace glm {

// The events of one job that one watcher has not read yet.
class JobSubscription {
 public:
  void Push(const v1::JobEvent& event);
  // The oldest unread event, or nullopt when none arrives within `timeout`.
  std::optional<v1::JobEvent> Next(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  std::deque<v1::JobEvent> queue_ ABSL_GUARDED_BY(mu_);
};

class JobEventHub {
 public:
  // The subscription lives as long as the caller holds it.
  std::shared_ptr<JobSubscription> Subscribe(const std::string& job_id);
  void Publish(const std::string& job_id, const v1::JobEvent& event);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::weak_ptr<JobSubscription>>>
      subscribers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_EVENTS_H_
