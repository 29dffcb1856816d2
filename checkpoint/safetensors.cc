#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"
#include "base/bf16.h"
#include "base/file_util.h"
#include "base/quote.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

using nlohmann::json;

// Safetensors' own limit on the header size.
constexpr uint64_t kMaxHeaderBytes = 100 << 20;
// A header nests three deep (object, tensor entry, shape list).
constexpr int kMaxHeaderDepth = 8;
// Elements of one tensor (zero dimensions aside): its bytes then fit in 63
// bits whatever the dtype.
constexpr uint64_t kMaxTensorElements = uint64_t{1} << 60;

struct DTypeEntry {
  DType dtype;
  const char* name;
  int64_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},   {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},     {DType::kBool, "BOOL", 1},
};

const DTypeEntry& Entry(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];
}

uint64_t ReadLittleEndian64(const char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  return bytes;
}

float Float16ToFloat32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// The header's tensor entries, validated one by one; `file` prefixes errors.
class HeaderParser {
 public:
  HeaderParser(std::string file, uint64_t data_size)
      : file_(std::move(file)), data_size_(data_size) {}

  absl::Status Parse(std::string_view text, std::vector<TensorInfo>* tensors,
                     std::map<std::string, std::string>* metadata) {
    json header;
    std::string duplicate;
    std::set<std::string> keys;
    bool too_deep = false;
    // nlohmann keeps the last of duplicate keys silently; catch them here.
    // Values nested too deep are dropped as they are read.
    json::parser_callback_t on_key = [&](int depth, json::parse_event_t event,
                                         json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key &&
          !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
      too_deep |= depth > kMaxHeaderDepth;
      return depth <= kMaxHeaderDepth;
    };
    try {
      header = json::parse(text.begin(), text.end(), on_key);
    } catch (const json::exception& error) {
      return Error(
          absl::StrCat("header is not valid JSON: ", Quote(error.what(), 200)));
    }
    if (too_deep) {
      return Error(absl::StrCat("header nests more than ", kMaxHeaderDepth,
                                " levels deep"));
    }
    if (!duplicate.empty()) {
      return Error(absl::StrCat("tensor ", Quote(duplicate),
                                " appears twice in the header"));
    }
    if (!header.is_object()) return Error("header is not a JSON object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        absl::Status status = ParseMetadata(it.value(), metadata);
        if (!status.ok()) return status;
        continue;
      }
      absl::StatusOr<TensorInfo> info = ParseTensor(it.key(), it.value());
      if (!info.ok()) return info.status();
      tensors->push_back(*std::move(info));
    }
    return CheckLayout(tensors);
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", what));
  }
  absl::Status TensorError(const std::string& name,
                           const std::string& what) const {
    return Error(absl::StrCat("tensor ", Quote(name), ": ", what));
  }

  absl::Status ParseMetadata(const json& value,
                             std::map<std::string, std::string>* metadata) {
    if (!value.is_object()) return Error("__metadata__ is not an object");
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!it.value().is_string()) {
        return Error(absl::StrCat("__metadata__ value for ", Quote(it.key()),
                                  " is not a string"));
      }
      (*metadata)[it.key()] = it.value().get<std::string>();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TensorInfo> ParseTensor(const std::string& name,
                                         const json& entry) const {
    if (!entry.is_object()) return TensorError(name, "entry is not an object");
    TensorInfo info;
    info.name = name;
    auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string()) {
      return TensorError(name, "missing string field 'dtype'");
    }
    absl::StatusOr<DType> parsed = DTypeFromName(dtype->get<std::string>());
    if (!parsed.ok())
      return TensorError(name, std::string(parsed.status().message()));
    info.dtype = *parsed;
    auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) {
      return TensorError(name, "missing list field 'shape'");
    }
    uint64_t elements = 1;  // of the dimensions that are not 0
    for (const json& dim : *shape) {
      if (!dim.is_number_unsigned()) {
        return TensorError(name, absl::StrCat("shape ", Excerpt(shape->dump()),
                                              " has a non-integer or negative "
                                              "dimension"));
      }
      const uint64_t size = dim.get<uint64_t>();
      if (size > 0 && (__builtin_mul_overflow(elements, size, &elements) ||
                       elements > kMaxTensorElements)) {
        return TensorError(name, absl::StrCat("shape ", Excerpt(shape->dump()),
                                              " has more than ",
                                              kMaxTensorElements, " elements"));
      }
      info.shape.push_back(static_cast<int64_t>(size));
    }
    auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() ||
        offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return TensorError(name, "'data_offsets' must be [begin, end]");
    }
    info.begin = (*offsets)[0].get<uint64_t>();
    info.end = (*offsets)[1].get<uint64_t>();
    if (info.begin > info.end || info.end > data_size_) {
      return TensorError(name, absl::StrCat("data_offsets [", info.begin, ", ",
                                            info.end, "] out of range of the ",
                                            data_size_, "-byte data section"));
    }
    const uint64_t expected =
        static_cast<uint64_t>(info.NumElements()) * DTypeSize(info.dtype);
    if (info.NumBytes() != expected) {
      return TensorError(
          name, absl::StrCat("shape ", ShapeString(info.shape), " of ",
                             DTypeName(info.dtype), " needs ", expected,
                             " bytes but data_offsets span ", info.NumBytes()));
    }
    return info;
  }

  // Tensors must tile the data section: no gap, no overlap, nothing after.
  absl::Status CheckLayout(std::vector<TensorInfo>* tensors) const {
    std::stable_sort(tensors->begin(), tensors->end(),
                     [](const TensorInfo& a, const TensorInfo& b) {
                       return std::make_pair(a.begin, a.end) <
                              std::make_pair(b.begin, b.end);
                     });
    uint64_t position = 0;
    const TensorInfo* previous = nullptr;
    for (const TensorInfo& info : *tensors) {
      if (info.begin < position) {
        return TensorError(
            info.name,
            absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                         "] overlap tensor ", Quote(previous->name)));
      }
      if (info.begin > position) {
        return TensorError(info.name,
                           absl::StrCat("data_offsets begin at ", info.begin,
                                        " leaving a gap after byte ", position,
                                        " (tensors must be contiguous)"));
      }
      position = info.end;
      previous = &info;
    }
    if (position != data_size_) {
      return Error(absl::StrCat("tensors cover ", position, " of the ",
                                data_size_,
                                " bytes after the header (trailing data)"));
    }
    return absl::OkStatus();
  }

  std::string file_;
  uint64_t data_size_;
};

// Header JSON for `tensors` in order, padded with spaces to a multiple of 8.
absl::StatusOr<std::string> SerializeHeader(
    const std::vector<TensorBytes>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorBytes& tensor : tensors) {
    if (tensor.name == "__metadata__" || header.contains(tensor.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor name '", tensor.name, "' used twice"));
    }
    TensorInfo info{tensor.name, tensor.dtype, tensor.shape, 0, 0};
    const uint64_t expected =
        static_cast<uint64_t>(info.NumElements()) * DTypeSize(tensor.dtype);
    if (tensor.bytes.size() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name, "': shape ", ShapeString(tensor.shape),
          " of ", DTypeName(tensor.dtype), " needs ", expected, " bytes, got ",
          tensor.bytes.size()));
    }
    header[tensor.name] = {{"dtype", DTypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// weight_map of an index file: tensor name -> shard file name.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  json index;
  try {
    index = json::parse(*text);
  } catch (const json::parse_error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not valid JSON: ", error.what()));
  }
  auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || weight_map == index.end() ||
      !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": missing object 'weight_map'"));
  }
  std::map<std::string, std::string> result;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it.value().is_string() ||
        it.value().get<std::string>().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": weight_map entry for '", it.key(),
                       "' must be a file name in the folder"));
    }
    result[it.key()] = it.value().get<std::string>();
  }
  return result;
}

}  // namespace

const char* DTypeName(DType dtype) { return Entry(dtype).name; }

int64_t DTypeSize(DType dtype) { return Entry(dtype).size; }

absl::StatusOr<DType> DTypeFromName(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (name == entry.name) return entry.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(name),
                   "' (known: F32, F16, BF16, I64, I32, I8, U8, BOOL)"));
}

int64_t TensorInfo::NumElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

SafetensorsFile::SafetensorsFile(std::string path, const char* map, size_t size)
    : path_(std::move(path)), map_(map), size_(size) {}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(const_cast<char*>(map_), size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated: ", size,
                     " bytes, fewer than the 8-byte header length"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(path, static_cast<const char*>(map), size));
  const uint64_t header_size = ReadLittleEndian64(file->map_);
  if (header_size > size - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header length ", header_size,
                     " goes beyond the end of the file (", size,
                     " bytes): truncated or not a safetensors file"));
  }
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ",
                                                   header_size, " exceeds ",
                                                   kMaxHeaderBytes, " bytes"));
  }
  file->data_start_ = 8 + header_size;
  HeaderParser parser(path, size - file->data_start_);
  absl::Status status =
      parser.Parse(std::string_view(file->map_ + 8, header_size),
                   &file->tensors_, &file->metadata_);
  if (!status.ok()) return status;
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->by_name_[file->tensors_[i].name] = i;
  }
  return file;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::string_view> SafetensorsFile::Bytes(
    const std::string& name) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  }
  return std::string_view(map_ + data_start_ + info->begin, info->NumBytes());
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadFloat32(
    const std::string& name) const {
  absl::StatusOr<std::string_view> bytes = Bytes(name);
  if (!bytes.ok()) return bytes.status();
  const TensorInfo& info = *Find(name);
  std::vector<float> values(info.NumElements());
  absl::Status status = ConvertToFloat32(info.dtype, bytes->data(),
                                         info.NumElements(), values.data());
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", name, "': ", status.message()));
  }
  return values;
}

absl::Status ConvertToFloat32(DType dtype, const char* bytes, int64_t count,
                              float* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, bytes, count * sizeof(float));
      return absl::OkStatus();
    case DType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t half;
        std::memcpy(&half, bytes + 2 * i, 2);
        out[i] = Bfloat16ToFloat32(half);
      }
      return absl::OkStatus();
    case DType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t half;
        std::memcpy(&half, bytes + 2 * i, 2);
        out[i] = Float16ToFloat32(half);
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype ", DTypeName(dtype), " is not a floating-point type"));
  }
}

absl::Status WriteSafetensors(
    const std::string& path, const std::vector<TensorBytes>& tensors,
    const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = SerializeHeader(tensors, metadata);
  if (!header.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", header.status().message()));
  }
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  absl::Status status = (*file)->Append(LittleEndian64(header->size()));
  if (status.ok()) status = (*file)->Append(*header);
  for (const TensorBytes& tensor : tensors) {
    if (status.ok()) status = (*file)->Append(tensor.bytes);
  }
  if (status.ok()) status = (*file)->Commit();
  return status;
}

absl::StatusOr<SafetensorsFolder> SafetensorsFolder::Open(
    const std::string& dir) {
  SafetensorsFolder folder;
  const std::string index_path = JoinPath(dir, kSafetensorsIndexName);
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> file_names;
  if (FileExists(index_path)) {
    absl::StatusOr<std::map<std::string, std::string>> read =
        ReadWeightMap(index_path);
    if (!read.ok()) return read.status();
    weight_map = *std::move(read);
    std::set<std::string> unique;
    for (const auto& [name, file] : weight_map) unique.insert(file);
    file_names.assign(unique.begin(), unique.end());
    folder.sharded_ = true;
  } else {
    file_names.push_back(kSafetensorsSingleName);
  }
  for (const std::string& file_name : file_names) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::Open(JoinPath(dir, file_name));
    if (!file.ok()) return file.status();
    const size_t file_index = folder.files_.size();
    for (const TensorInfo& info : (*file)->tensors()) {
      if (folder.sharded_) {
        auto mapped = weight_map.find(info.name);
        if (mapped == weight_map.end() || mapped->second != file_name) {
          return absl::InvalidArgumentError(absl::StrCat(
              (*file)->path(), ": tensor '", info.name, "' is not mapped to ",
              file_name, " by ", index_path));
        }
      }
      if (!folder.file_of_.emplace(info.name, file_index).second) {
        return absl::InvalidArgumentError(
            absl::StrCat((*file)->path(), ": tensor '", info.name,
                         "' is also in another shard"));
      }
    }
    folder.files_.push_back(std::shared_ptr<SafetensorsFile>(*std::move(file)));
  }
  for (const auto& [name, file] : weight_map) {
    if (!folder.file_of_.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor '", name, "' is mapped to ", file,
                       ", which does not hold it"));
    }
  }
  return folder;
}

std::vector<std::string> SafetensorsFolder::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : file_of_) names.push_back(name);
  return names;
}

const SafetensorsFile* SafetensorsFolder::FileOf(
    const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : files_[it->second].get();
}

const TensorInfo* SafetensorsFolder::Find(const std::string& name) const {
  const SafetensorsFile* file = FileOf(name);
  return file == nullptr ? nullptr : file->Find(name);
}

absl::Status WriteSafetensorsIndex(
    const std::string& dir,
    const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
  json index = {{"metadata", {{"total_size", total_size}}},
                {"weight_map", weight_map}};
  return WriteFileAtomically(JoinPath(dir, kSafetensorsIndexName),
                             index.dump(2) + "\n");
}

absl::Status WriteSafetensorsFolder(const std::string& dir,
                                    const std::vector<TensorBytes>& tensors,
                                    uint64_t max_shard_bytes) {
  std::vector<std::vector<TensorBytes>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_size = 0;
  for (const TensorBytes& tensor : tensors) {
    if (shard_bytes > 0 &&
        shard_bytes + tensor.bytes.size() > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(tensor);
    shard_bytes += tensor.bytes.size();
    total_size += tensor.bytes.size();
  }
  if (shards.size() == 1) {
    return WriteSafetensors(JoinPath(dir, kSafetensorsSingleName), tensors);
  }
  std::map<std::string, std::string> weight_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file_name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    absl::Status status = WriteSafetensors(JoinPath(dir, file_name), shards[i]);
    if (!status.ok()) return status;
    for (const TensorBytes& tensor : shards[i]) {
      weight_map[tensor.name] = file_name;
    }
  }
  // The index goes last: a folder without it is not yet a sharded checkpoint.
  return WriteSafetensorsIndex(dir, weight_map, total_size);
}

}  // namespace glm
