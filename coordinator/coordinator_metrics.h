// The coordinator's Prometheus metrics, served by prometheus-cpp on /metrics:
// jobs by state, workers registered and alive, RPC counts by method and code,
// RPC latency, and each job's latest step metrics (loss, grad norm, throughput,
// expert load imbalance). Per-job series carry the label `job_id`: Prometheus
// keeps `job` for its scrape job and would rename ours to `exported_job`.
#ifndef GLM_COORDINATOR_COORDINATOR_METRICS_H_
#define GLM_COORDINATOR_COORDINATOR_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/job_service.pb.h"
#include "proto/metrics.pb.h"

namespace prometheus {
class Exposer;
class Registry;
template <typename T>
class Family;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace glm {

class CoordinatorMetrics {
 public:
  // Serves /metrics on `listen` ("127.0.0.1:9464"; port 0 picks a free one).
  // A non-empty `token` must come as the password of HTTP Basic
  // authentication (any user name; Prometheus's basic_auth.password_file):
  // job names, ids and losses are then only for those who hold it.
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Serve(
      const std::string& listen, const std::string& token = "");
  ~CoordinatorMetrics();

  // The port /metrics is served on.
  int port() const;

  void SetJobsByState(const std::map<v1::JobState, int>& counts);
  void SetWorkers(int registered, int alive);
  // `method` as "JobService/SubmitJob", `code` as "OK", "INVALID_ARGUMENT", ...
  void RecordRpc(const std::string& method, const std::string& code,
                 double seconds);
  // Counts a call without observing its latency (long-lived streams).
  void CountRpc(const std::string& method, const std::string& code);
  void RecordStep(const std::string& job_id, const v1::StepMetrics& metrics);
  // Jobs whose latest step was recorded longer than `quiet` ago.
  std::vector<std::string> JobsQuietFor(absl::Duration quiet);
  // Drops every series of the job (it finished long enough ago that its last
  // values were scraped); a job without series is a no-op.
  void ForgetJob(const std::string& job_id);

 private:
  CoordinatorMetrics();

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Family<prometheus::Counter>* rpcs_;
  prometheus::Family<prometheus::Histogram>* rpc_latency_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> step_gauges_;
  prometheus::Family<prometheus::Gauge>* expert_imbalance_;
  // Each job's series and when its latest step came, for ForgetJob and
  // JobsQuietFor. RecordStep comes from concurrent RPC handlers.
  struct JobSeries {
    absl::Time updated;
    std::vector<
        std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Gauge*>>
        gauges;
  };
  absl::Mutex mu_;
  std::map<std::string, JobSeries> job_series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_COORDINATOR_METRICS_H_
