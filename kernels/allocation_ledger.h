// The live allocations of an Allocator: how many, the bytes in use, their
// peak, and whether a pointer lies inside one (thread-safe).
#ifndef GLM_KERNELS_ALLOCATION_LEDGER_H_
#define GLM_KERNELS_ALLOCATION_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace glm {

class AllocationLedger {
 public:
  void Add(const void* data, size_t bytes);
  // Forgets the allocation at `data` and returns its size.
  size_t Remove(const void* data);
  bool Holds(const void* data) const;
  int64_t in_use() const;
  int64_t count() const;
  int64_t peak() const;
  void ResetPeak();
  // Makes the peak at least `bytes` (use that allocations made elsewhere
  // stand for, such as a captured graph's when it replays).
  void RaisePeak(int64_t bytes);

 private:
  mutable std::mutex mutex_;
  // By start address (ordered, so Holds finds the one below a pointer).
  std::map<const char*, size_t> sizes_;
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
};

}  // namespace glm

#endif  // GLM_KERNELS_ALLOCATION_LEDGER_H_
