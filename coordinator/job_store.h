// Durable job storage on RocksDB: every glm.v1.Job (spec, state, history,
// checkpoints) keyed by its id, plus the counter that makes new job ids, the
// store's random tag, and the audit log (the newest entries, up to a bound). A
// coordinator reopening the same directory has every job back.
#ifndef GLM_COORDINATOR_JOB_STORE_H_
#define GLM_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/job_service.pb.h"

namespace rocksdb {
class DB;
}

namespace glm {

class JobStore {
 public:
  // Opens (creating when absent) the store in `directory`.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(
      const std::string& directory);
  ~JobStore();

  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // A new id, "job-TAG-000001", "job-TAG-000002", ... with this store's tag:
  // sortable and never reused, since the counter is written before the id is
  // handed out; unlike a bare counter, not reused by another coordinator
  // either (each new store draws its own tag), so that ids stay unique in
  // shared outputs and dashboards.
  absl::StatusOr<std::string> AllocateJobId();
  // Six hex digits drawn when the store was created, kept across reopens.
  const std::string& tag() const { return tag_; }

  // kSync: the write survives a machine crash once Put returns (state changes,
  // checkpoints). kBuffered: survives a process crash only; for the frequent,
  // replaceable updates (latest step metrics) where an fsync per rank per step
  // would cost more than the data is worth.
  enum class Durability { kSync, kBuffered };

  absl::Status Put(const v1::Job& job,
                   Durability durability = Durability::kSync);
  // NOT_FOUND naming the id when there is no such job.
  absl::StatusOr<v1::Job> Get(const std::string& id) const;
  // Every job, in id order.
  absl::StatusOr<std::vector<v1::Job>> List() const;

  struct Page {
    std::vector<v1::Job> jobs;
    // The last job's id when more jobs `keep` accepts follow; empty
    // otherwise.
    std::string next_after;
  };
  // The first `limit` jobs after `after_id` (from the first when empty), in
  // id order, that `keep` accepts (all when null). Reads only as far as it
  // needs to.
  absl::StatusOr<Page> ListPage(
      const std::string& after_id, size_t limit,
      const std::function<bool(const v1::Job&)>& keep) const;

  // Stores `entry` under the next sequence number (set in it), dropping the
  // entry `max_entries` older, so that at most that many stay.
  absl::Status AppendAudit(v1::AuditEntry& entry, int64_t max_entries,
                           Durability durability);
  // Up to `limit` entries after `after_sequence`, oldest first.
  absl::StatusOr<std::vector<v1::AuditEntry>> ListAudit(int64_t after_sequence,
                                                        size_t limit) const;
  // Drops every entry but the newest `max_entries` (a smaller bound than a
  // previous start's).
  absl::Status TrimAudit(int64_t max_entries);

 private:
  JobStore(std::unique_ptr<rocksdb::DB> db, std::string tag,
           int64_t last_audit_sequence);
  // Returns the counter under `key` (1 when absent) after storing its
  // successor, synced.
  absl::StatusOr<int64_t> NextNumber(const std::string& key,
                                     const std::string& what);
  std::unique_ptr<rocksdb::DB> db_;
  const std::string tag_;
  absl::Mutex audit_mu_;
  int64_t last_audit_sequence_ ABSL_GUARDED_BY(audit_mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_STORE_H_
