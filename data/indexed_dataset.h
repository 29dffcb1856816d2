// Megatron's indexed dataset: PREFIX.bin holds the tokens of every sequence
// back to back; PREFIX.idx says where each sequence starts and which
// sequences form each document. Files written here load in Megatron-LM
// (megatron/core/datasets/indexed_dataset.py) and files Megatron writes load
// here.
//
// .idx layout (little-endian):
//   magic "MMIDIDX\0\0" (9 bytes) | u64 version = 1 | u8 dtype code |
//   u64 sequence_count | u64 document_index_count |
//   int32 sequence_lengths[sequence_count] |
//   int64 sequence_pointers[sequence_count] (byte offsets into .bin) |
//   int64 document_indices[document_index_count]
// As in Megatron, document_indices starts with 0 and has one more entry than
// there are documents: document d is sequences
// [document_indices[d], document_indices[d + 1]).
#ifndef GLM_DATA_INDEXED_DATASET_H_
#define GLM_DATA_INDEXED_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/atomic_file.h"

namespace glm {

// Megatron's dtype codes (DType in indexed_dataset.py).
enum class TokenDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

// Bytes per element; 0 for a code that is not a Megatron dtype.
int DtypeSize(TokenDtype dtype);
std::string DtypeName(TokenDtype dtype);
// Megatron's choice: uint16 while the vocabulary fits (< 65500), else int32.
TokenDtype DtypeForVocabSize(int64_t vocab_size);

std::string BinPath(const std::string& prefix);
std::string IdxPath(const std::string& prefix);

// Writes PREFIX.bin and PREFIX.idx. Nothing appears under the final names
// until Finish(): .bin is renamed into place first, .idx last, so a complete
// .idx always describes a complete .bin.
class IndexedDatasetBuilder {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDatasetBuilder>> Create(
      const std::string& prefix, TokenDtype dtype);

  // Appends one sequence to the current document.
  // InvalidArgument when a value does not fit the dtype.
  absl::Status AddSequence(absl::Span<const int32_t> values);
  // Closes the current document (Megatron's end_document).
  void EndDocument();
  // One document made of one sequence: what `data preprocess` writes.
  absl::Status AddDocument(absl::Span<const int32_t> values);

  absl::Status Finish();

  int64_t sequence_count() const { return sequence_lengths_.size(); }
  int64_t document_count() const { return document_indices_.size() - 1; }
  int64_t element_count() const { return element_count_; }

 private:
  IndexedDatasetBuilder(std::string prefix, TokenDtype dtype,
                        std::unique_ptr<AtomicFile> bin);

  std::string prefix_;
  TokenDtype dtype_;
  std::unique_ptr<AtomicFile> bin_;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_ = {0};
  int64_t element_count_ = 0;
  bool finished_ = false;
};

// Reads a dataset written by IndexedDatasetBuilder or Megatron. Open()
// validates the whole index against the .bin size, so reads after it cannot
// go out of bounds.
class IndexedDataset {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> Open(
      const std::string& prefix);
  ~IndexedDataset();

  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDtype dtype() const { return dtype_; }
  int64_t sequence_count() const { return sequence_lengths_.size(); }
  int64_t document_count() const { return document_indices_.size() - 1; }
  int32_t sequence_length(int64_t sequence) const {
    return sequence_lengths_[sequence];
  }
  const std::vector<int32_t>& sequence_lengths() const {
    return sequence_lengths_;
  }
  const std::vector<int64_t>& document_indices() const {
    return document_indices_;
  }
  int64_t element_count() const { return element_count_; }

  // Elements [offset, offset + count) of `sequence`, converted to int32
  // (token ids, loss masks and offsets all fit) and written to `out`. The
  // range must lie within the sequence.
  void Read(int64_t sequence, int64_t offset, int64_t count,
            int32_t* out) const;
  std::vector<int32_t> Sequence(int64_t sequence) const;

 private:
  IndexedDataset() = default;
  absl::Status LoadIndex(const std::string& idx_path, uint64_t bin_size);
  absl::Status MapBin(const std::string& bin_path);

  std::string prefix_;
  TokenDtype dtype_ = TokenDtype::kUint16;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> sequence_pointers_;
  std::vector<int64_t> document_indices_;
  int64_t element_count_ = 0;
  const uint8_t* bin_ = nullptr;
  size_t bin_size_ = 0;
};

}  // namespace glm

#endif  // GLM_DATA_INDEXED_DATASET_H_
