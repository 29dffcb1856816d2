#include "kernels/allocation_ledger.h"

#include <algorithm>

namespace glm {

void AllocationLedger::Add(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  sizes_[static_cast<const char*>(data)] = bytes;
  in_use_ += static_cast<int64_t>(bytes);
  peak_ = std::max(peak_, in_use_);
}

size_t AllocationLedger::Remove(const void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sizes_.find(static_cast<const char*>(data));
  const size_t bytes = it->second;
  in_use_ -= static_cast<int64_t>(bytes);
  sizes_.erase(it);
  return bytes;
}

bool AllocationLedger::Holds(const void* data) const {
  const char* p = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sizes_.upper_bound(p);
  if (it == sizes_.begin()) return false;
  --it;
  // An empty allocation still owns the byte its address names.
  return p < it->first + std::max<size_t>(it->second, 1);
}

int64_t AllocationLedger::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(sizes_.size());
}

int64_t AllocationLedger::in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

int64_t AllocationLedger::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void AllocationLedger::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = in_use_;
}

void AllocationLedger::RaisePeak(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > peak_) peak_ = bytes;
}

}  // namespace glm
