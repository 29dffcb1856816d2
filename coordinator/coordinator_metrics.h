// The coordinator's Prometheus metrics, served by prometheus-cpp on /metrics:
// jobs by state, workers registered and alive, RPC counts by method and code,
// RPC latency, and each job's latest step metrics (loss, grad norm, throughput,
// expert load imbalance).
#ifndef GLM_COORDINATOR_COORDINATOR_METRICS_H_
#define GLM_COORDINATOR_COORDINATOR_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
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
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Serve(
      const std::string& listen);
  ~CoordinatorMetrics();

  // The port /metrics is served on.
  int port() const;

  void SetJobsByState(const std::map<v1::JobState, int>& counts);
  void SetWorkers(int registered, int alive);
  // `method` as "JobService/SubmitJob", `code` as "OK", "INVALID_ARGUMENT", ...
  void RecordRpc(const std::string& method, const std::string& code,
                 double seconds);
  void RecordStep(const std::string& job_id, const v1::StepMetrics& metrics);

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
};

}  // namespace glm

#endif  // GLM_COORDINATOR_COORDINATOR_METRICS_H_
