#include "metrics_log/step_metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace glm {
namespace {

using google::protobuf::FieldDescriptor;

// Round-trip precision; JSON has no NaN or infinity: a diverged step's loss
// is null.
std::string JsonNumber(double value) {
  return std::isfinite(value) ? absl::StrFormat("%.17g", value) : "null";
}

double NumberOf(const v1::StepMetrics& metrics, const FieldDescriptor& field) {
  const google::protobuf::Reflection& reflection = *metrics.GetReflection();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(reflection.GetInt64(metrics, &field));
    case FieldDescriptor::CPPTYPE_INT32:
      return reflection.GetInt32(metrics, &field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return reflection.GetDouble(metrics, &field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return reflection.GetFloat(metrics, &field);
    default:
      return 0;
  }
}

}  // namespace

std::string StepMetricsDir(const std::string& save_dir) {
  return save_dir + "/metrics";
}

StepMetricsLog::StepMetricsLog(std::unique_ptr<EventFileWriter> events,
                               std::string path, FILE* lines)
    : events_(std::move(events)), lines_path_(std::move(path)), lines_(lines) {}

StepMetricsLog::~StepMetricsLog() { fclose(lines_); }

absl::StatusOr<std::unique_ptr<StepMetricsLog>> StepMetricsLog::Open(
    const std::string& dir) {
  absl::StatusOr<std::unique_ptr<EventFileWriter>> events =
      EventFileWriter::Open(dir);
  if (!events.ok()) return events.status();
  const std::string path = dir + "/steps.jsonl";
  FILE* lines = fopen(path.c_str(), "a");
  if (lines == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  return std::unique_ptr<StepMetricsLog>(
      new StepMetricsLog(*std::move(events), path, lines));
}

absl::Status StepMetricsLog::Write(const v1::StepMetrics& metrics) {
  const double wall_time = absl::ToUnixMicros(absl::Now()) / 1e6;
  std::vector<std::pair<std::string, double>> scalars;
  std::vector<std::string> json = {
      absl::StrFormat("\"wall_time\":%.6f", wall_time)};
  const google::protobuf::Descriptor& descriptor = *metrics.GetDescriptor();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    if (field.is_repeated()) {
      const google::protobuf::Reflection& reflection = *metrics.GetReflection();
      std::vector<std::string> values;
      for (int j = 0; j < reflection.FieldSize(metrics, &field); ++j) {
        const double value = reflection.GetRepeatedDouble(metrics, &field, j);
        scalars.emplace_back(absl::StrCat(field.name(), "/layer_", j), value);
        values.push_back(JsonNumber(value));
      }
      json.push_back(absl::StrCat("\"", field.name(), "\":[",
                                  absl::StrJoin(values, ","), "]"));
      continue;
    }
    const double value = NumberOf(metrics, field);
    if (field.name() != "iteration") scalars.emplace_back(field.name(), value);
    const bool integer = field.cpp_type() == FieldDescriptor::CPPTYPE_INT64 ||
                         field.cpp_type() == FieldDescriptor::CPPTYPE_INT32;
    json.push_back(absl::StrCat("\"", field.name(), "\":",
                                integer
                                    ? absl::StrCat(static_cast<int64_t>(value))
                                    : JsonNumber(value)));
  }
  if (absl::Status written =
          events_->WriteScalars(metrics.iteration(), wall_time, scalars);
      !written.ok()) {
    return written;
  }
  const std::string line = absl::StrCat("{", absl::StrJoin(json, ","), "}\n");
  if (fwrite(line.data(), 1, line.size(), lines_) != line.size() ||
      fflush(lines_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write ", lines_path_, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace glm
