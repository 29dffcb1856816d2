#include "coordinator/worker_registry.h"

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "openssl/crypto.h"
#include "openssl/rand.h"

namespace glm {
namespace {

// `bytes` random bytes from OpenSSL's CSPRNG, in hex.
std::string RandomHex(int bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), bytes) != 1) {
    // Without randomness ids and secrets could be guessed: no registration is
    // safer than a predictable one.
    std::abort();
  }
  return absl::BytesToHexString(raw);
}

// A worker holds one rank at a time; late reports come only from its most
// recent ranks, so older ones need not be remembered.
constexpr size_t kRememberedAssignments = 8;

std::string DescribeAssignment(const std::string& job_id, int attempt,
                               int rank) {
  return absl::StrCat("rank ", rank, " of ", job_id, " attempt ", attempt);
}

}  // namespace

WorkerRegistry::WorkerRegistry(int64_t heartbeat_timeout_ms)
    : heartbeat_timeout_ms_(heartbeat_timeout_ms) {}

WorkerIdentity WorkerRegistry::Register(
    const v1::RegisterWorkerRequest& request, int64_t now_ms) {
  WorkerIdentity identity{absl::StrCat("worker-", RandomHex(16)),
                          RandomHex(32)};
  absl::MutexLock lock(&mu_);
  const int64_t number = next_number_++;
  WorkerRecord& record = workers_[number];
  record.id = identity.id;
  record.secret = identity.secret;
  record.info = request;
  record.last_heartbeat_ms = now_ms;
  numbers_[record.id] = number;
  return identity;
}

absl::Status WorkerRegistry::Authenticate(const std::string& worker_id,
                                          const std::string& secret) {
  absl::MutexLock lock(&mu_);
  const WorkerRecord* record = Find(worker_id);
  if (!record) {
    return absl::NotFoundError(absl::StrCat(
        "no worker '", Excerpt(worker_id),
        "' (the coordinator may have restarted since it registered); "
        "register again"));
  }
  if (record->secret.size() != secret.size() ||
      CRYPTO_memcmp(record->secret.data(), secret.data(), secret.size()) != 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        "wrong glm-worker-secret for ", worker_id,
        ": a worker's calls carry the secret its registration returned"));
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::CheckAssigned(const std::string& worker_id,
                                           const std::string& job_id,
                                           int attempt, int rank) {
  absl::MutexLock lock(&mu_);
  const WorkerRecord* record = Find(worker_id);
  if (!record) {
    return absl::NotFoundError(absl::StrCat("no worker '", worker_id, "'"));
  }
  std::string held;
  for (const RankAssignment& given : record->assignments) {
    if (given.job_id != job_id) continue;
    if (given.attempt == attempt && given.rank == rank) {
      return absl::OkStatus();
    }
    absl::StrAppend(
        &held, held.empty() ? "" : ", ",
        DescribeAssignment(given.job_id, given.attempt, given.rank));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      worker_id, " was not assigned ",
      DescribeAssignment(Excerpt(job_id), attempt, rank),
      held.empty() ? " (it holds no rank of that job)"
                   : absl::StrCat(" (it was assigned ", held, ")")));
}

absl::Status WorkerRegistry::CheckAssignedJob(const std::string& worker_id,
                                              const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  const WorkerRecord* record = Find(worker_id);
  if (!record) {
    return absl::NotFoundError(absl::StrCat("no worker '", worker_id, "'"));
  }
  for (const RankAssignment& given : record->assignments) {
    if (given.job_id == job_id) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      worker_id, " was never assigned a rank of ", Excerpt(job_id)));
}

WorkerRecord* WorkerRegistry::Find(const std::string& worker_id) {
  auto it = numbers_.find(worker_id);
  return it == numbers_.end() ? nullptr : &workers_.at(it->second);
}

absl::Status WorkerRegistry::Heartbeat(const std::string& worker_id,
                                       int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  WorkerRecord* record = Find(worker_id);
  if (!record) {
    return absl::NotFoundError(absl::StrCat("no worker '", worker_id, "'"));
  }
  if (!record->alive) {
    return absl::FailedPreconditionError(
        absl::StrCat(worker_id,
                     " missed its heartbeats and was declared dead; "
                     "register again"));
  }
  record->last_heartbeat_ms = now_ms;
  return absl::OkStatus();
}

absl::StatusOr<WorkerRecord> WorkerRegistry::Get(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  WorkerRecord* record = Find(worker_id);
  if (!record) {
    return absl::NotFoundError(absl::StrCat("no worker '", worker_id, "'"));
  }
  return *record;
}

std::vector<v1::DeviceKind> WorkerRegistry::AliveKinds() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::DeviceKind> kinds;
  for (const auto& [number, record] : workers_) {
    if (record.alive) kinds.push_back(record.info.device_kind());
  }
  return kinds;
}

std::vector<std::string> WorkerRegistry::IdleWorkers(v1::DeviceKind kind) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> idle;
  for (const auto& [number, record] : workers_) {
    if (record.alive && record.job_id.empty() &&
        record.info.device_kind() == kind) {
      idle.push_back(record.id);
    }
  }
  return idle;
}

void WorkerRegistry::Assign(const std::string& worker_id,
                            const v1::Assignment& assignment) {
  absl::MutexLock lock(&mu_);
  WorkerRecord* record = Find(worker_id);
  if (!record) return;
  record->job_id = assignment.job_id();
  record->rank = assignment.rank();
  record->assignments.push_back(
      {assignment.job_id(), assignment.attempt(), assignment.rank()});
  if (record->assignments.size() > kRememberedAssignments) {
    record->assignments.erase(record->assignments.begin());
  }
  queued_[worker_id].push_back(assignment);
}

bool WorkerRegistry::WithdrawAssignment(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = queued_.find(worker_id);
  if (it == queued_.end() || it->second.empty()) return false;
  queued_.erase(it);
  return true;
}

void WorkerRegistry::Release(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  WorkerRecord* record = Find(worker_id);
  if (!record) return;
  record->job_id.clear();
  record->rank = -1;
  queued_.erase(worker_id);
}

absl::StatusOr<WorkerRecord> WorkerRegistry::Remove(
    const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = numbers_.find(worker_id);
  if (it == numbers_.end()) {
    return absl::NotFoundError(absl::StrCat("no worker '", worker_id, "'"));
  }
  WorkerRecord removed = std::move(workers_.at(it->second));
  workers_.erase(it->second);
  numbers_.erase(it);
  queued_.erase(worker_id);
  return removed;
}

std::optional<v1::Assignment> WorkerRegistry::NextAssignment(
    const std::string& worker_id, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has_assignment = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = queued_.find(worker_id);
    return it != queued_.end() && !it->second.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has_assignment), timeout)) {
    return std::nullopt;
  }
  std::deque<v1::Assignment>& queue = queued_[worker_id];
  v1::Assignment assignment = std::move(queue.front());
  queue.pop_front();
  return assignment;
}

std::vector<WorkerRecord> WorkerRegistry::ExpireSilent(int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerRecord> expired;
  for (auto& [number, record] : workers_) {
    if (record.alive &&
        now_ms - record.last_heartbeat_ms > heartbeat_timeout_ms_) {
      record.alive = false;
      expired.push_back(record);
      queued_.erase(record.id);
    }
  }
  return expired;
}

int WorkerRegistry::RegisteredCount() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

int WorkerRegistry::AliveCount() {
  absl::MutexLock lock(&mu_);
  int alive = 0;
  for (const auto& [number, record] : workers_) alive += record.alive;
  return alive;
}

}  // namespace glm
