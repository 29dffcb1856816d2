#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace glm {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
// magic, version, dtype code, sequence count, document index count.
constexpr uint64_t kHeaderSize = 9 + 8 + 1 + 8 + 8;

bool IsKnownDtype(uint8_t code) { return code >= 1 && code <= 8; }

template <typename T>
bool Fits(int32_t value) {
  return value >= std::numeric_limits<T>::lowest() &&
         static_cast<double>(value) <= std::numeric_limits<T>::max();
}

template <typename T>
absl::Status EncodeAs(absl::Span<const int32_t> values, TokenDtype dtype,
                      std::string* bytes) {
  bytes->resize(values.size() * sizeof(T));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!Fits<T>(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("value ", values[i], " at position ", i,
                       " does not fit dtype ", DtypeName(dtype)));
    }
    const T value = static_cast<T>(values[i]);
    std::memcpy(bytes->data() + i * sizeof(T), &value, sizeof(T));
  }
  return absl::OkStatus();
}

absl::Status Encode(absl::Span<const int32_t> values, TokenDtype dtype,
                    std::string* bytes) {
  switch (dtype) {
    case TokenDtype::kUint8:
      return EncodeAs<uint8_t>(values, dtype, bytes);
    case TokenDtype::kInt8:
      return EncodeAs<int8_t>(values, dtype, bytes);
    case TokenDtype::kInt16:
      return EncodeAs<int16_t>(values, dtype, bytes);
    case TokenDtype::kInt32:
      return EncodeAs<int32_t>(values, dtype, bytes);
    case TokenDtype::kInt64:
      return EncodeAs<int64_t>(values, dtype, bytes);
    case TokenDtype::kFloat64:
      return EncodeAs<double>(values, dtype, bytes);
    case TokenDtype::kFloat32:
      return EncodeAs<float>(values, dtype, bytes);
    case TokenDtype::kUint16:
      return EncodeAs<uint16_t>(values, dtype, bytes);
  }
  return absl::InvalidArgumentError("unknown dtype");
}

template <typename T>
void DecodeAs(const uint8_t* bytes, int64_t count, int32_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, bytes + i * sizeof(T), sizeof(T));
    // Converting a float no int32 holds (or NaN) is undefined: such a value
    // reads as -1, which no token id, loss mask or offset is.
    if constexpr (std::is_floating_point_v<T>) {
      // 2^31 itself, exact in float where int32's maximum is not.
      constexpr T kBound = T{2147483648.0};
      if (!(value >= -kBound && value < kBound)) {
        out[i] = -1;
        continue;
      }
    }
    out[i] = static_cast<int32_t>(value);
  }
}

template <typename T>
void AppendPod(const T& value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
void AppendArray(const std::vector<T>& values, std::string* out) {
  out->append(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(T));
}

// Reads a little-endian POD at `*offset` and advances it; the caller has
// checked the size.
template <typename T>
T ReadPod(const std::string& bytes, uint64_t* offset) {
  T value;
  std::memcpy(&value, bytes.data() + *offset, sizeof(T));
  *offset += sizeof(T);
  return value;
}

template <typename T>
std::vector<T> ReadArray(const std::string& bytes, uint64_t count,
                         uint64_t* offset) {
  std::vector<T> values(count);
  // An empty vector's data() may be null, which memcpy may not be given.
  if (count > 0) {
    std::memcpy(values.data(), bytes.data() + *offset, count * sizeof(T));
  }
  *offset += count * sizeof(T);
  return values;
}

}  // namespace

int DtypeSize(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8:
    case TokenDtype::kInt8:
      return 1;
    case TokenDtype::kInt16:
    case TokenDtype::kUint16:
      return 2;
    case TokenDtype::kInt32:
    case TokenDtype::kFloat32:
      return 4;
    case TokenDtype::kInt64:
    case TokenDtype::kFloat64:
      return 8;
  }
  return 0;
}

std::string DtypeName(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8:
      return "uint8";
    case TokenDtype::kInt8:
      return "int8";
    case TokenDtype::kInt16:
      return "int16";
    case TokenDtype::kInt32:
      return "int32";
    case TokenDtype::kInt64:
      return "int64";
    case TokenDtype::kFloat64:
      return "float64";
    case TokenDtype::kFloat32:
      return "float32";
    case TokenDtype::kUint16:
      return "uint16";
  }
  return absl::StrCat("unknown(", static_cast<int>(dtype), ")");
}

TokenDtype DtypeForVocabSize(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDtype::kUint16 : TokenDtype::kInt32;
}

std::string BinPath(const std::string& prefix) { return prefix + ".bin"; }
std::string IdxPath(const std::string& prefix) { return prefix + ".idx"; }

// ---------------------------------------------------------------- builder

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix,
                                             TokenDtype dtype,
                                             std::unique_ptr<AtomicFile> bin)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(std::move(bin)) {}

absl::StatusOr<std::unique_ptr<IndexedDatasetBuilder>>
IndexedDatasetBuilder::Create(const std::string& prefix, TokenDtype dtype) {
  if (DtypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype code ", static_cast<int>(dtype)));
  }
  absl::StatusOr<std::unique_ptr<AtomicFile>> bin =
      AtomicFile::Create(BinPath(prefix));
  if (!bin.ok()) return bin.status();
  return std::unique_ptr<IndexedDatasetBuilder>(
      new IndexedDatasetBuilder(prefix, dtype, std::move(*bin)));
}

absl::Status IndexedDatasetBuilder::AddSequence(
    absl::Span<const int32_t> values) {
  if (finished_) return absl::FailedPreconditionError("builder is finished");
  if (values.size() >
      static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError("sequence longer than 2^31-1 elements");
  }
  std::string bytes;
  if (absl::Status status = Encode(values, dtype_, &bytes); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, " sequence ",
                                                   sequence_lengths_.size(),
                                                   ": ", status.message()));
  }
  if (absl::Status status = bin_->Append(bytes); !status.ok()) return status;
  sequence_lengths_.push_back(static_cast<int32_t>(values.size()));
  element_count_ += values.size();
  return absl::OkStatus();
}

void IndexedDatasetBuilder::EndDocument() {
  document_indices_.push_back(sequence_lengths_.size());
}

absl::Status IndexedDatasetBuilder::AddDocument(
    absl::Span<const int32_t> values) {
  if (absl::Status status = AddSequence(values); !status.ok()) return status;
  EndDocument();
  return absl::OkStatus();
}

absl::Status IndexedDatasetBuilder::Finish() {
  if (finished_) return absl::FailedPreconditionError("builder is finished");
  if (document_indices_.back() != static_cast<int64_t>(sequence_count())) {
    EndDocument();  // sequences after the last EndDocument form a document
  }
  finished_ = true;
  std::vector<int64_t> pointers(sequence_lengths_.size());
  int64_t offset = 0;
  for (size_t i = 0; i < sequence_lengths_.size(); ++i) {
    pointers[i] = offset;
    offset += static_cast<int64_t>(sequence_lengths_[i]) * DtypeSize(dtype_);
  }
  std::string idx(kMagic, sizeof(kMagic));
  AppendPod(kVersion, &idx);
  AppendPod(static_cast<uint8_t>(dtype_), &idx);
  AppendPod(static_cast<uint64_t>(sequence_lengths_.size()), &idx);
  AppendPod(static_cast<uint64_t>(document_indices_.size()), &idx);
  AppendArray(sequence_lengths_, &idx);
  AppendArray(pointers, &idx);
  AppendArray(document_indices_, &idx);
  if (absl::Status status = bin_->Commit(); !status.ok()) return status;
  return WriteFileAtomically(IdxPath(prefix_), idx);
}

// ---------------------------------------------------------------- reader

IndexedDataset::~IndexedDataset() {
  if (bin_ != nullptr) munmap(const_cast<uint8_t*>(bin_), bin_size_);
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(
    const std::string& prefix) {
  std::unique_ptr<IndexedDataset> dataset(new IndexedDataset());
  dataset->prefix_ = prefix;
  const std::string bin_path = BinPath(prefix);
  struct stat bin_stat;
  if (stat(bin_path.c_str(), &bin_stat) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", bin_path, ": ", std::strerror(errno)));
  }
  if (absl::Status status =
          dataset->LoadIndex(IdxPath(prefix), bin_stat.st_size);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = dataset->MapBin(bin_path); !status.ok()) {
    return status;
  }
  return dataset;
}

absl::Status IndexedDataset::LoadIndex(const std::string& idx_path,
                                       uint64_t bin_size) {
  absl::StatusOr<std::string> bytes = ReadFile(idx_path);
  if (!bytes.ok()) return bytes.status();
  auto corrupt = [&idx_path](auto&&... what) {
    return absl::DataLossError(absl::StrCat(idx_path, ": ", what...));
  };
  if (bytes->size() < kHeaderSize) {
    return corrupt("file is ", bytes->size(), " bytes, shorter than the ",
                   kHeaderSize, "-byte header");
  }
  if (std::memcmp(bytes->data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt(
        "bad magic (expected MMIDIDX\\0\\0): not a Megatron "
        "indexed dataset index");
  }
  uint64_t offset = sizeof(kMagic);
  const uint64_t version = ReadPod<uint64_t>(*bytes, &offset);
  if (version != kVersion) {
    return corrupt("version ", version, ", expected ", kVersion);
  }
  const uint8_t dtype_code = ReadPod<uint8_t>(*bytes, &offset);
  if (!IsKnownDtype(dtype_code)) {
    return corrupt("unknown dtype code ", static_cast<int>(dtype_code));
  }
  dtype_ = static_cast<TokenDtype>(dtype_code);
  const uint64_t sequence_count = ReadPod<uint64_t>(*bytes, &offset);
  const uint64_t document_index_count = ReadPod<uint64_t>(*bytes, &offset);
  const uint64_t body = bytes->size() - kHeaderSize;
  // Checked before multiplying so that huge counts cannot overflow.
  if (sequence_count > body / 12 || document_index_count > body / 8 ||
      sequence_count * 12 + document_index_count * 8 != body) {
    return corrupt("file is ", bytes->size(), " bytes but its header says ",
                   sequence_count, " sequences and ", document_index_count,
                   " document indices (expected ", kHeaderSize,
                   " + 12 * sequences + 8 * document indices)");
  }
  sequence_lengths_ = ReadArray<int32_t>(*bytes, sequence_count, &offset);
  sequence_pointers_ = ReadArray<int64_t>(*bytes, sequence_count, &offset);
  document_indices_ = ReadArray<int64_t>(*bytes, document_index_count, &offset);

  const int item_size = DtypeSize(dtype_);
  element_count_ = 0;
  for (uint64_t i = 0; i < sequence_count; ++i) {
    const int64_t length = sequence_lengths_[i];
    const int64_t pointer = sequence_pointers_[i];
    if (length < 0) return corrupt("sequence ", i, " has length ", length);
    if (pointer < 0 || static_cast<uint64_t>(pointer) > bin_size ||
        static_cast<uint64_t>(length) * item_size >
            bin_size - static_cast<uint64_t>(pointer)) {
      return corrupt("sequence ", i, " (", length, " x ", DtypeName(dtype_),
                     " at byte ", pointer, ") runs past the end of ",
                     BinPath(prefix_), " (", bin_size, " bytes)");
    }
    element_count_ += length;
  }
  if (document_index_count == 0 || document_indices_[0] != 0) {
    return corrupt("document indices must start with 0");
  }
  for (uint64_t d = 1; d < document_index_count; ++d) {
    if (document_indices_[d] < document_indices_[d - 1]) {
      return corrupt("document index ", d, " (", document_indices_[d],
                     ") is smaller than the one before it");
    }
  }
  if (document_indices_.back() != static_cast<int64_t>(sequence_count)) {
    return corrupt("last document index is ", document_indices_.back(),
                   " but there are ", sequence_count, " sequences");
  }
  return absl::OkStatus();
}

absl::Status IndexedDataset::MapBin(const std::string& bin_path) {
  const int fd = open(bin_path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", bin_path, ": ", std::strerror(errno)));
  }
  struct stat file_stat;
  if (fstat(fd, &file_stat) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", bin_path));
  }
  bin_size_ = file_stat.st_size;
  if (bin_size_ > 0) {
    void* mapped = mmap(nullptr, bin_size_, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      close(fd);
      return absl::InternalError(
          absl::StrCat("cannot mmap ", bin_path, ": ", std::strerror(errno)));
    }
    bin_ = static_cast<const uint8_t*>(mapped);
  }
  close(fd);
  return absl::OkStatus();
}

void IndexedDataset::Read(int64_t sequence, int64_t offset, int64_t count,
                          int32_t* out) const {
  const uint8_t* start =
      bin_ + sequence_pointers_[sequence] + offset * DtypeSize(dtype_);
  switch (dtype_) {
    case TokenDtype::kUint8:
      return DecodeAs<uint8_t>(start, count, out);
    case TokenDtype::kInt8:
      return DecodeAs<int8_t>(start, count, out);
    case TokenDtype::kInt16:
      return DecodeAs<int16_t>(start, count, out);
    case TokenDtype::kInt32:
      return DecodeAs<int32_t>(start, count, out);
    case TokenDtype::kInt64:
      return DecodeAs<int64_t>(start, count, out);
    case TokenDtype::kFloat64:
      return DecodeAs<double>(start, count, out);
    case TokenDtype::kFloat32:
      return DecodeAs<float>(start, count, out);
    case TokenDtype::kUint16:
      return DecodeAs<uint16_t>(start, count, out);
  }
}

std::vector<int32_t> IndexedDataset::Sequence(int64_t sequence) const {
  std::vector<int32_t> values(sequence_lengths_[sequence]);
  Read(sequence, 0, values.size(), values.data());
  return values;
}

}  // namespace glm
