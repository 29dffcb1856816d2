#include "coordinator/audit_log.h"

#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "coordinator/job_table.h"

namespace glm {
namespace {

// Enough of a subject or a refusal's message to recognize it; entries stay
// small whatever a caller sent.
constexpr size_t kMaxFieldBytes = 256;

// `text` cut to at most kMaxFieldBytes on a UTF-8 character boundary (the
// entry's string fields must stay valid UTF-8 to be read back).
void Bound(std::string* text) {
  if (text->size() <= kMaxFieldBytes) return;
  size_t end = kMaxFieldBytes;
  while (end > 0 && ((*text)[end] & 0xC0) == 0x80) --end;
  text->resize(end);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(JobStore* store,
                                                         int64_t max_entries) {
  if (max_entries <= 0) {
    return absl::InvalidArgumentError(
        "the audit log must keep at least one entry");
  }
  if (absl::Status trimmed = store->TrimAudit(max_entries); !trimmed.ok()) {
    return trimmed;
  }
  return std::unique_ptr<AuditLog>(new AuditLog(store, max_entries));
}

AuditLog::AuditLog(JobStore* store, int64_t max_entries)
    : store_(store), max_entries_(max_entries) {}

void AuditLog::Record(v1::AuditEntry entry, bool changed_state) {
  entry.set_unix_ms(UnixMillisNow());
  Bound(entry.mutable_subject());
  Bound(entry.mutable_message());
  if (absl::Status written =
          store_->AppendAudit(entry, max_entries_,
                              changed_state ? JobStore::Durability::kSync
                                            : JobStore::Durability::kBuffered);
      !written.ok()) {
    std::cerr << "glm-coordinator: audit log: " << written << "\n";
  }
}

absl::StatusOr<std::vector<v1::AuditEntry>> AuditLog::List(
    int64_t after_sequence, size_t limit) const {
  return store_->ListAudit(after_sequence, limit);
}

}  // namespace glm
