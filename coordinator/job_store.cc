#include "coordinator/job_store.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace glm {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kNextIdKey[] = "meta/next_job_number";
constexpr char kTagKey[] = "meta/store_tag";
constexpr char kAuditPrefix[] = "audit/";

absl::Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", status.ToString()));
}

rocksdb::WriteOptions SyncWrite() {
  rocksdb::WriteOptions options;
  options.sync = true;
  return options;
}

// The store's tag, drawn and written the first time the store is opened.
absl::StatusOr<std::string> ReadOrDrawTag(rocksdb::DB& db) {
  std::string tag;
  rocksdb::Status status = db.Get(rocksdb::ReadOptions(), kTagKey, &tag);
  if (status.ok()) return tag;
  if (!status.IsNotFound()) return FromRocks(status, "reading the store tag");
  std::random_device random;
  tag = absl::StrFormat("%06x", random() & 0xffffff);
  absl::Status written =
      FromRocks(db.Put(SyncWrite(), kTagKey, tag), "writing the store tag");
  if (!written.ok()) return written;
  return tag;
}

// Zero-padded, so that key order is sequence order.
std::string AuditKey(int64_t sequence) {
  return absl::StrFormat("%s%020d", kAuditPrefix, sequence);
}

// The newest entry's sequence number; 0 when the log is empty.
absl::StatusOr<int64_t> ReadLastAuditSequence(rocksdb::DB& db) {
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(AuditKey(std::numeric_limits<int64_t>::max()));
  if (!it->status().ok())
    return FromRocks(it->status(), "reading the audit log");
  if (!it->Valid() || !it->key().starts_with(kAuditPrefix)) return 0;
  int64_t sequence = 0;
  const rocksdb::Slice key = it->key();
  if (!absl::SimpleAtoi(absl::string_view(key.data(), key.size())
                            .substr(sizeof(kAuditPrefix) - 1),
                        &sequence)) {
    return absl::DataLossError(
        absl::StrCat("audit log key ", key.ToString(), " is corrupt"));
  }
  return sequence;
}

}  // namespace

JobStore::JobStore(std::unique_ptr<rocksdb::DB> db, std::string tag,
                   int64_t last_audit_sequence)
    : db_(std::move(db)),
      tag_(std::move(tag)),
      last_audit_sequence_(last_audit_sequence) {}
JobStore::~JobStore() = default;

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    const std::string& directory) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(options, directory, &raw);
  if (!status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open job store in ", directory, ": ", status.ToString()));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  absl::StatusOr<std::string> tag = ReadOrDrawTag(*db);
  if (!tag.ok()) return tag.status();
  absl::StatusOr<int64_t> last_audit = ReadLastAuditSequence(*db);
  if (!last_audit.ok()) return last_audit.status();
  return std::unique_ptr<JobStore>(
      new JobStore(std::move(db), *tag, *last_audit));
}

absl::StatusOr<int64_t> JobStore::NextNumber(const std::string& key,
                                             const std::string& what) {
  std::string value;
  int64_t number = 1;
  rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (status.ok()) {
    if (!absl::SimpleAtoi(value, &number)) {
      return absl::DataLossError(
          absl::StrCat("job store ", what, " is corrupt: '", value, "'"));
    }
  } else if (!status.IsNotFound()) {
    return FromRocks(status, absl::StrCat("reading the ", what));
  }
  absl::Status written =
      FromRocks(db_->Put(SyncWrite(), key, absl::StrCat(number + 1)),
                absl::StrCat("writing the ", what));
  if (!written.ok()) return written;
  return number;
}

absl::StatusOr<std::string> JobStore::AllocateJobId() {
  absl::StatusOr<int64_t> number = NextNumber(kNextIdKey, "job counter");
  if (!number.ok()) return number.status();
  return absl::StrFormat("job-%s-%06d", tag_, *number);
}

absl::Status JobStore::Put(const v1::Job& job, Durability durability) {
  rocksdb::WriteOptions options;
  options.sync = durability == Durability::kSync;
  return FromRocks(db_->Put(options, absl::StrCat(kJobPrefix, job.id()),
                            job.SerializeAsString()),
                   absl::StrCat("writing ", job.id()));
}

absl::StatusOr<v1::Job> JobStore::Get(const std::string& id) const {
  std::string value;
  rocksdb::Status status =
      db_->Get(rocksdb::ReadOptions(), absl::StrCat(kJobPrefix, id), &value);
  if (status.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  }
  if (!status.ok()) return FromRocks(status, absl::StrCat("reading ", id));
  v1::Job job;
  if (!job.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("stored job ", id, " is corrupt"));
  }
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::List() const {
  absl::StatusOr<Page> all =
      ListPage("", std::numeric_limits<size_t>::max(), nullptr);
  if (!all.ok()) return all.status();
  return std::move(all->jobs);
}

absl::StatusOr<JobStore::Page> JobStore::ListPage(
    const std::string& after_id, size_t limit,
    const std::function<bool(const v1::Job&)>& keep) const {
  Page page;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const std::string after_key = absl::StrCat(kJobPrefix, after_id);
  it->Seek(after_key);
  if (!after_id.empty() && it->Valid() && it->key() == after_key) it->Next();
  for (; it->Valid() && it->key().starts_with(kJobPrefix); it->Next()) {
    v1::Job job;
    if (!job.ParseFromArray(it->value().data(),
                            static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          absl::StrCat("stored job ", it->key().ToString(), " is corrupt"));
    }
    if (keep && !keep(job)) continue;
    if (page.jobs.size() == limit) {
      page.next_after = page.jobs.back().id();
      break;
    }
    page.jobs.push_back(std::move(job));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "listing jobs");
  return page;
}

absl::Status JobStore::AppendAudit(v1::AuditEntry& entry, int64_t max_entries,
                                   Durability durability) {
  absl::MutexLock lock(&audit_mu_);
  const int64_t sequence = last_audit_sequence_ + 1;
  entry.set_sequence(sequence);
  rocksdb::WriteBatch batch;
  batch.Put(AuditKey(sequence), entry.SerializeAsString());
  // The entry and the oldest one's removal land together: the log never
  // holds more than max_entries, whenever the process stops.
  if (sequence > max_entries) batch.Delete(AuditKey(sequence - max_entries));
  rocksdb::WriteOptions options;
  options.sync = durability == Durability::kSync;
  absl::Status written =
      FromRocks(db_->Write(options, &batch), "writing the audit log");
  if (written.ok()) last_audit_sequence_ = sequence;
  return written;
}

absl::StatusOr<std::vector<v1::AuditEntry>> JobStore::ListAudit(
    int64_t after_sequence, size_t limit) const {
  std::vector<v1::AuditEntry> entries;
  if (after_sequence == std::numeric_limits<int64_t>::max()) return entries;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(AuditKey(std::max<int64_t>(after_sequence, 0) + 1));
       it->Valid() && it->key().starts_with(kAuditPrefix) &&
       entries.size() < limit;
       it->Next()) {
    v1::AuditEntry entry;
    if (!entry.ParseFromArray(it->value().data(),
                              static_cast<int>(it->value().size()))) {
      return absl::DataLossError(absl::StrCat(
          "audit log entry ", it->key().ToString(), " is corrupt"));
    }
    entries.push_back(std::move(entry));
  }
  if (!it->status().ok()) {
    return FromRocks(it->status(), "reading the audit log");
  }
  return entries;
}

absl::Status JobStore::TrimAudit(int64_t max_entries) {
  absl::MutexLock lock(&audit_mu_);
  const int64_t keep_from = last_audit_sequence_ - max_entries + 1;
  if (keep_from <= 1) return absl::OkStatus();
  return FromRocks(db_->DeleteRange(SyncWrite(), db_->DefaultColumnFamily(),
                                    AuditKey(0), AuditKey(keep_from)),
                   "trimming the audit log");
}

}  // namespace glm
