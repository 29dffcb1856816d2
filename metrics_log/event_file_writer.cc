#include "metrics_log/event_file_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "metrics_log/crc32c.h"

namespace glm {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendTag(int field, int wire_type, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | wire_type, out);
}

template <typename T>
void AppendLittleEndian(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and ARM Linux: little-endian
  out->append(bytes, sizeof(T));
}

void AppendBytes(int field, const std::string& bytes, std::string* out) {
  AppendTag(field, kLengthDelimited, out);
  AppendVarint(bytes.size(), out);
  out->append(bytes);
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3
// (string), summary = 5 (Summary).
std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  AppendTag(1, kFixed64, &event);
  AppendLittleEndian(wall_time, &event);
  AppendTag(2, kVarint, &event);
  AppendVarint(static_cast<uint64_t>(step), &event);
  return event;
}

// tensorflow.Summary: repeated Value value = 1; Value: tag = 1 (string),
// simple_value = 2 (float).
std::string SummaryOf(
    const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    AppendBytes(1, tag, &entry);
    AppendTag(2, kFixed32, &entry);
    AppendLittleEndian(static_cast<float>(value), &entry);
    AppendBytes(1, entry, &summary);
  }
  return summary;
}

}  // namespace

EventFileWriter::EventFileWriter(std::string path, FILE* file)
    : path_(std::move(path)), file_(file) {}

EventFileWriter::~EventFileWriter() { fclose(file_); }

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(
    const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const double now = absl::ToUnixMicros(absl::Now()) / 1e6;
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".",
                   host, ".", getpid());
  FILE* file = fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  std::string version = EventHeader(now, 0);
  AppendBytes(3, "brain.Event:2", &version);
  if (absl::Status written = writer->WriteRecord(version); !written.ok()) {
    return written;
  }
  return writer;
}

absl::Status EventFileWriter::WriteScalars(
    int64_t step, double wall_time,
    const std::vector<std::pair<std::string, double>>& scalars) {
  std::string event = EventHeader(wall_time, step);
  AppendBytes(5, SummaryOf(scalars), &event);
  return WriteRecord(event);
}

absl::Status EventFileWriter::WriteRecord(const std::string& record) {
  std::string framed;
  AppendLittleEndian(static_cast<uint64_t>(record.size()), &framed);
  AppendLittleEndian(MaskedCrc32c(framed.data(), 8), &framed);
  framed.append(record);
  AppendLittleEndian(MaskedCrc32c(record.data(), record.size()), &framed);
  if (fwrite(framed.data(), 1, framed.size(), file_) != framed.size() ||
      fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write ", path_, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace glm
