// The coordinator's audit log: who (credential role, worker id, client host)
// called what, when, and with what outcome, for every state-changing call and
// every refused call, kept in the job store so that it survives restarts. The
// newest entries are kept, up to a bound.
#ifndef GLM_COORDINATOR_AUDIT_LOG_H_
#define GLM_COORDINATOR_AUDIT_LOG_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job_store.h"
#include "proto/job_service.pb.h"

namespace glm {

class AuditLog {
 public:
  // `store` must outlive the log. Drops what an earlier start with a larger
  // bound left beyond `max_entries`.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(JobStore* store,
                                                        int64_t max_entries);

  // Stores `entry` (its time and sequence number filled in). A call that
  // changed state is synced to disk before the call answers, like the change
  // itself; a refused one survives a process crash but not a machine crash,
  // so that a flood of refused calls cannot make the store fsync for each.
  // Never fails the call: a store error is printed.
  void Record(v1::AuditEntry entry, bool changed_state);

  // Up to `limit` entries after `after_sequence`, oldest first.
  absl::StatusOr<std::vector<v1::AuditEntry>> List(int64_t after_sequence,
                                                   size_t limit) const;

 private:
  AuditLog(JobStore* store, int64_t max_entries);

  JobStore* const store_;
  const int64_t max_entries_;
};

}  // namespace glm

#endif  // GLM_COORDINATOR_AUDIT_LOG_H_
