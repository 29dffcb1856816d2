// What every CUDA op runs with: the stream it is ordered on, the cuBLASLt
// handle, the precision of its matrix products, and a grow-only scratch buffer
// (allocated once at its largest size, so ops never allocate in steady state).
//
// All pointers handed to the ops in kernels/cuda/ are device pointers: the
// views' data, index arrays, scales and loss outputs alike.
#ifndef GLM_KERNELS_CUDA_CUDA_CONTEXT_H_
#define GLM_KERNELS_CUDA_CUDA_CONTEXT_H_

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace glm::cuda {

// Bytes at which pieces carved out of a scratch buffer start.
constexpr size_t kScratchAlign = 256;

inline size_t ScratchAlignUp(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// Carves a call's pieces out of one scratch buffer, each at kScratchAlign.
// Run once without a base to size the buffer, then on it.
class Carver {
 public:
  explicit Carver(char* base = nullptr) : base_(base) {}
  template <typename T>
  T* Take(int64_t count) {
    T* at = reinterpret_cast<T*>(base_ + used_);
    used_ += ScratchAlignUp(count * sizeof(T));
    return at;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// How matrix products round their inputs. kFp32: fp32 inputs and FMA (no
// TF32), the mode the tight equivalence tests use. kBf16: inputs rounded to
// bf16, fp32 accumulation and fp32 outputs. kTf32: fp32 operands read as TF32
// by the tensor cores, fp32 accumulation; never a backend's mode, only what
// the bf16 mode's ops choose for products that bf16 inputs would blur (the
// indexer's scores, whose ReLU kinks decide gradients) without a conversion
// pass over their operands.
enum class Precision { kFp32, kBf16, kTf32 };

class CudaContext {
 public:
  virtual ~CudaContext() = default;
  virtual cudaStream_t stream() const = 0;
  virtual cublasLtHandle_t cublas_lt() const = 0;
  virtual Precision precision() const = 0;
  // A device buffer of at least `bytes` bytes, valid until the next call on
  // this stream (ops use it for their own temporaries only).
  virtual void* Scratch(size_t bytes) = 0;
  // A second such buffer for ops built from other ops: what they keep across
  // the inner ops' calls lives here, since those take Scratch for themselves.
  virtual void* CompositeScratch(size_t bytes) = 0;
  // Where an op allocates what it leaves to its caller (IndexerTopK's kept
  // scores: indexer.cuh), ordered on the stream.
  virtual Allocator* allocator() = 0;
  // In the bf16 mode, the bf16 copy of a weight view (laid out like it, same
  // strides) when the backend keeps one (Backend::RefreshComputeCopies); null
  // for any other view, which ops convert themselves.
  virtual const __nv_bfloat16* Bf16WeightCopy(ConstMatrixView v) const = 0;
  // True while the stream's work is being captured (Backend::Record): an op
  // that would wait for the device calls FailRecording instead, and goes on
  // with what it has (nothing captured then runs).
  virtual bool recording() const = 0;
  virtual void FailRecording(const char* why) = 0;
  // Whether the largest writing products may run the cuBLASLt algorithm
  // their first call timed fastest (kernels/cuda/linear.cu); false keeps the
  // heuristic's first choice, a function of the shapes alone.
  virtual bool time_products() const { return false; }
};

// A context whose matrix products run at another precision; all else is the
// inner context's.
class WithPrecision : public CudaContext {
 public:
  WithPrecision(CudaContext& inner, Precision precision)
      : inner_(inner), precision_(precision) {}
  cudaStream_t stream() const override { return inner_.stream(); }
  cublasLtHandle_t cublas_lt() const override { return inner_.cublas_lt(); }
  Precision precision() const override { return precision_; }
  void* Scratch(size_t bytes) override { return inner_.Scratch(bytes); }
  void* CompositeScratch(size_t bytes) override {
    return inner_.CompositeScratch(bytes);
  }
  Allocator* allocator() override { return inner_.allocator(); }
  const __nv_bfloat16* Bf16WeightCopy(ConstMatrixView v) const override {
    return inner_.Bf16WeightCopy(v);
  }
  bool recording() const override { return inner_.recording(); }
  void FailRecording(const char* why) override { inner_.FailRecording(why); }
  bool time_products() const override { return inner_.time_products(); }

 private:
  CudaContext& inner_;
  Precision precision_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CUDA_CONTEXT_H_
