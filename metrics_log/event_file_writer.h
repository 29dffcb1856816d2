// TensorBoard's event files, written without TensorFlow: a TFRecord stream
// (length, masked CRC-32C of the length, the record, masked CRC-32C of the
// record) of tensorflow.Event protos, encoded here by hand since only a few
// fields are needed: wall_time, step, file_version, and a Summary of
// simple_value scalars. `tensorboard --logdir` reads the folder.
#ifndef GLM_METRICS_LOG_EVENT_FILE_WRITER_H_
#define GLM_METRICS_LOG_EVENT_FILE_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace glm {

class EventFileWriter {
 public:
  // Creates `dir` when absent and a new events.out.tfevents.<unix seconds>.
  // <host>.<pid> in it, starting with the file_version event TensorBoard
  // expects first.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(
      const std::string& dir);
  ~EventFileWriter();

  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One event at `step` holding a scalar per (tag, value), flushed to the
  // file so that a reader sees every finished step.
  absl::Status WriteScalars(
      int64_t step, double wall_time,
      const std::vector<std::pair<std::string, double>>& scalars);

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, FILE* file);
  absl::Status WriteRecord(const std::string& record);

  std::string path_;
  FILE* file_;
};

}  // namespace glm

#endif  // GLM_METRICS_LOG_EVENT_FILE_WRITER_H_
