#include "coordinator/coordinator_metrics.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "openssl/crypto.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace glm {
namespace {

// Per-job gauges: metric name suffix, help, and the field of StepMetrics it
// shows.
struct StepGauge {
  const char* name;
  const char* help;
  double (*value)(const v1::StepMetrics&);
};

const StepGauge kStepGauges[] = {
    {"glm_job_iteration", "Latest reported training iteration.",
     [](const v1::StepMetrics& m) { return double(m.iteration()); }},
    {"glm_job_lm_loss", "Language-model loss of the latest step.",
     [](const v1::StepMetrics& m) { return m.lm_loss(); }},
    {"glm_job_mtp_loss", "MTP loss of the latest step.",
     [](const v1::StepMetrics& m) { return m.mtp_loss(); }},
    {"glm_job_indexer_loss", "DSA indexer loss of the latest step.",
     [](const v1::StepMetrics& m) { return m.indexer_loss(); }},
    {"glm_job_grad_norm", "Gradient norm of the latest step.",
     [](const v1::StepMetrics& m) { return m.grad_norm(); }},
    {"glm_job_tokens_per_second_per_device", "Tokens/s per device.",
     [](const v1::StepMetrics& m) { return m.tokens_per_sec_per_device(); }},
    {"glm_job_tflops_per_device", "Model TFLOP/s per device.",
     [](const v1::StepMetrics& m) { return m.tflops_per_device(); }},
    {"glm_job_step_time_seconds", "Time of the latest step.",
     [](const v1::StepMetrics& m) { return m.step_time_ms() / 1000.0; }},
    {"glm_job_learning_rate", "Learning rate of the latest step.",
     [](const v1::StepMetrics& m) { return m.learning_rate(); }},
};

}  // namespace

CoordinatorMetrics::CoordinatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()) {
  jobs_ = &prometheus::BuildGauge()
               .Name("glm_jobs")
               .Help("Jobs by state.")
               .Register(*registry_);
  workers_ = &prometheus::BuildGauge()
                  .Name("glm_workers")
                  .Help("Workers by status (registered, alive).")
                  .Register(*registry_);
  rpcs_ = &prometheus::BuildCounter()
               .Name("glm_rpcs_total")
               .Help("RPCs served, by method and status code.")
               .Register(*registry_);
  rpc_latency_ = &prometheus::BuildHistogram()
                      .Name("glm_rpc_latency_seconds")
                      .Help("RPC handling time, by method.")
                      .Register(*registry_);
  for (const StepGauge& gauge : kStepGauges) {
    step_gauges_[gauge.name] = &prometheus::BuildGauge()
                                    .Name(gauge.name)
                                    .Help(gauge.help)
                                    .Register(*registry_);
  }
  expert_imbalance_ =
      &prometheus::BuildGauge()
           .Name("glm_job_expert_load_imbalance")
           .Help("Max over mean tokens per expert, by MoE layer.")
           .Register(*registry_);
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Serve(
    const std::string& listen, const std::string& token) {
  std::unique_ptr<CoordinatorMetrics> metrics(new CoordinatorMetrics());
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
  if (!token.empty()) {
    metrics->exposer_->RegisterAuth(
        [token](const std::string& /*user*/, const std::string& password) {
          // Constant time, so the answer's timing does not tell how much of
          // a guess was right.
          return password.size() == token.size() &&
                 CRYPTO_memcmp(password.data(), token.data(), token.size()) ==
                     0;
        },
        "glm-coordinator");
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  return metrics;
}

int CoordinatorMetrics::port() const {
  std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void CoordinatorMetrics::SetJobsByState(
    const std::map<v1::JobState, int>& counts) {
  for (int state = v1::PENDING; state <= v1::CANCELLED; ++state) {
    auto it = counts.find(static_cast<v1::JobState>(state));
    jobs_->Add({{"state", v1::JobState_Name(state)}})
        .Set(it == counts.end() ? 0 : it->second);
  }
}

void CoordinatorMetrics::SetWorkers(int registered, int alive) {
  workers_->Add({{"status", "registered"}}).Set(registered);
  workers_->Add({{"status", "alive"}}).Set(alive);
}

void CoordinatorMetrics::CountRpc(const std::string& method,
                                  const std::string& code) {
  rpcs_->Add({{"method", method}, {"code", code}}).Increment();
}

void CoordinatorMetrics::RecordRpc(const std::string& method,
                                   const std::string& code, double seconds) {
  CountRpc(method, code);
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5};
  rpc_latency_->Add({{"method", method}}, kBuckets).Observe(seconds);
}

void CoordinatorMetrics::RecordStep(const std::string& job_id,
                                    const v1::StepMetrics& metrics) {
  absl::MutexLock lock(&mu_);
  JobSeries& series = job_series_[job_id];
  series.updated = absl::Now();
  series.gauges.clear();
  auto set = [&](prometheus::Family<prometheus::Gauge>* family,
                 const std::map<std::string, std::string>& labels,
                 double value) {
    prometheus::Gauge& gauge = family->Add(labels);
    gauge.Set(value);
    series.gauges.emplace_back(family, &gauge);
  };
  for (const StepGauge& gauge : kStepGauges) {
    set(step_gauges_.at(gauge.name), {{"job_id", job_id}},
        gauge.value(metrics));
  }
  for (int i = 0; i < metrics.expert_load_imbalance_size(); ++i) {
    set(expert_imbalance_, {{"job_id", job_id}, {"moe_layer", absl::StrCat(i)}},
        metrics.expert_load_imbalance(i));
  }
}

std::vector<std::string> CoordinatorMetrics::JobsQuietFor(
    absl::Duration quiet) {
  const absl::Time before = absl::Now() - quiet;
  absl::MutexLock lock(&mu_);
  std::vector<std::string> jobs;
  for (const auto& [job_id, series] : job_series_) {
    if (series.updated < before) jobs.push_back(job_id);
  }
  return jobs;
}

void CoordinatorMetrics::ForgetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = job_series_.find(job_id);
  if (it == job_series_.end()) return;
  for (const auto& [family, gauge] : it->second.gauges) family->Remove(gauge);
  job_series_.erase(it);
}

}  // namespace glm
