// An Allocator on host memory that counts its live bytes and their peak:
// tensors made under its AllocatorScope are measured exactly, which lets
// the planner's tests compare predictions with what the trainer and the
// model really allocate.
#ifndef GLM_PLANNER_COUNTING_ALLOCATOR_H_
#define GLM_PLANNER_COUNTING_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <string>

#include "kernels/device_memory.h"

namespace glm {

class CountingAllocator : public Allocator {
 public:
  std::string Name() const override { return "counting host allocator"; }
  void* Allocate(size_t bytes) override;
  void Free(void* data) override;
  void Fill(void* data, int byte, size_t bytes) override;
  void CopyWithin(void* dst, const void* src, size_t bytes) override;
  void CopyFromHost(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  int64_t bytes_in_use() const override { return in_use_; }
  int64_t peak_bytes() const override { return peak_; }
  void ResetPeak() override { peak_ = in_use_; }

 private:
  std::map<void*, size_t> sizes_;
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
};

}  // namespace glm

#endif  // GLM_PLANNER_COUNTING_ALLOCATOR_H_
