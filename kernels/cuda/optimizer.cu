#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/optimizer.cuh"

namespace glm::cuda {
namespace {

// Elements per block: large enough that launch and table costs vanish.
constexpr int64_t kChunk = 64 * 1024;

struct Chunk {
  int32_t tensor;
  int64_t begin;
  int64_t end;
};

// One chunk table for any list of sizes.
std::vector<Chunk> ChunksOf(const std::vector<int64_t>& sizes) {
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (int64_t begin = 0; begin < sizes[t]; begin += kChunk) {
      chunks.push_back(
          {static_cast<int32_t>(t), begin, std::min(begin + kChunk, sizes[t])});
    }
  }
  return chunks;
}

// Copies `items` into scratch at `*offset` (advanced past them); returns the
// device copy.
template <typename T>
T* Upload(CudaContext& ctx, char* scratch, size_t* offset,
          const std::vector<T>& items) {
  T* device = reinterpret_cast<T*>(scratch + *offset);
  *offset += ScratchAlignUp(items.size() * sizeof(T));
  GLM_CUDA_CHECK(cudaMemcpyAsync(device, items.data(), items.size() * sizeof(T),
                                 cudaMemcpyHostToDevice, ctx.stream()));
  return device;
}

__global__ void ChunkSquaredSumKernel(const ConstFloatSpan* spans,
                                      const Chunk* chunks, double* partial) {
  const Chunk chunk = chunks[blockIdx.x];
  const float* x = spans[chunk.tensor].data;
  double sum = 0;
  for (int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += blockDim.x) {
    sum += static_cast<double>(x[i]) * x[i];
  }
  sum = BlockSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void SumPartialsKernel(const double* partial, int64_t count,
                                  double* out) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = BlockSum(sum);
  if (threadIdx.x == 0) *out = sum;
}

// Per-call constants, computed once on the host as the CPU computes them.
struct AdamWConstants {
  double beta1, one_minus_beta1, beta2, one_minus_beta2;
  double eps, grad_scale, step_size, sqrt_correction2, decay;
};

// A tensor to update and where its rounded new weights go (null: nowhere).
struct AdamWTarget {
  AdamWTensor tensor;
  __nv_bfloat16* copy;
};

// One element's update: the new moments and weight from the old ones, each
// step rounded as the CPU rounds it.
struct AdamWElement {
  float m, v, w;
};
__device__ __forceinline__ AdamWElement UpdateElement(const AdamWConstants& c,
                                                      double decay, float g,
                                                      float m0, float v0,
                                                      float w0) {
  const double grad = __dmul_rn(static_cast<double>(g), c.grad_scale);
  const float m =
      static_cast<float>(__dadd_rn(__dmul_rn(c.beta1, static_cast<double>(m0)),
                                   __dmul_rn(c.one_minus_beta1, grad)));
  const float v = static_cast<float>(
      __dadd_rn(__dmul_rn(c.beta2, static_cast<double>(v0)),
                __dmul_rn(__dmul_rn(c.one_minus_beta2, grad), grad)));
  const double denom = __dadd_rn(
      __ddiv_rn(__dsqrt_rn(static_cast<double>(v)), c.sqrt_correction2), c.eps);
  const double w = w0;
  const double decayed = __dsub_rn(w, __dmul_rn(decay, w));
  const float updated = static_cast<float>(__dsub_rn(
      decayed,
      __ddiv_rn(__dmul_rn(c.step_size, static_cast<double>(m)), denom)));
  return {m, v, updated};
}

// Four elements a thread at a time where every array of the tensor allows
// 16-byte loads (8-byte stores of the copy): four times the bytes in flight
// of one-element steps, the memory-bound update's limit. The rest (a
// tensor's last few elements, unaligned tensors) one at a time.
__global__ void AdamWKernel(const AdamWTarget* targets, const Chunk* chunks,
                            AdamWConstants c) {
  const Chunk chunk = chunks[blockIdx.x];
  const AdamWTensor t = targets[chunk.tensor].tensor;
  __nv_bfloat16* const copy = targets[chunk.tensor].copy;
  const double decay = t.weight_decay ? c.decay : 0.0;
  int64_t scalar_begin = chunk.begin;
  if (AlignedTo(t.value, 16) && AlignedTo(t.grad, 16) &&
      AlignedTo(t.exp_avg, 16) && AlignedTo(t.exp_avg_sq, 16) &&
      (copy == nullptr || AlignedTo(copy, 8))) {
    const int64_t quads = (chunk.end - chunk.begin) / 4;
    for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const int64_t i = chunk.begin + 4 * q;
      const float4 g = *reinterpret_cast<const float4*>(t.grad + i);
      const float4 m = *reinterpret_cast<const float4*>(t.exp_avg + i);
      const float4 v = *reinterpret_cast<const float4*>(t.exp_avg_sq + i);
      const float4 w = *reinterpret_cast<const float4*>(t.value + i);
      const AdamWElement e[4] = {UpdateElement(c, decay, g.x, m.x, v.x, w.x),
                                 UpdateElement(c, decay, g.y, m.y, v.y, w.y),
                                 UpdateElement(c, decay, g.z, m.z, v.z, w.z),
                                 UpdateElement(c, decay, g.w, m.w, v.w, w.w)};
      *reinterpret_cast<float4*>(t.exp_avg + i) =
          make_float4(e[0].m, e[1].m, e[2].m, e[3].m);
      *reinterpret_cast<float4*>(t.exp_avg_sq + i) =
          make_float4(e[0].v, e[1].v, e[2].v, e[3].v);
      *reinterpret_cast<float4*>(t.value + i) =
          make_float4(e[0].w, e[1].w, e[2].w, e[3].w);
      if (copy != nullptr)
        StoreBf16x4(e[0].w, e[1].w, e[2].w, e[3].w, copy + i);
    }
    scalar_begin = chunk.begin + 4 * quads;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < chunk.end; i += blockDim.x) {
    const AdamWElement e = UpdateElement(c, decay, t.grad[i], t.exp_avg[i],
                                         t.exp_avg_sq[i], t.value[i]);
    t.exp_avg[i] = e.m;
    t.exp_avg_sq[i] = e.v;
    t.value[i] = e.w;
    if (copy != nullptr) copy[i] = __float2bfloat16(e.w);
  }
}

}  // namespace

void SquaredSum(CudaContext& ctx, const std::vector<ConstFloatSpan>& spans,
                double* out) {
  std::vector<int64_t> sizes;
  for (const ConstFloatSpan& span : spans) sizes.push_back(span.size);
  const std::vector<Chunk> chunks = ChunksOf(sizes);
  if (chunks.empty()) {
    GLM_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), ctx.stream()));
    return;
  }
  char* scratch = static_cast<char*>(
      ctx.Scratch(ScratchAlignUp(spans.size() * sizeof(ConstFloatSpan)) +
                  ScratchAlignUp(chunks.size() * sizeof(Chunk)) +
                  ScratchAlignUp(chunks.size() * sizeof(double))));
  size_t offset = 0;
  const ConstFloatSpan* device_spans = Upload(ctx, scratch, &offset, spans);
  const Chunk* device_chunks = Upload(ctx, scratch, &offset, chunks);
  double* partial = reinterpret_cast<double*>(scratch + offset);
  ChunkSquaredSumKernel<<<chunks.size(), kBlockThreads, 0, ctx.stream()>>>(
      device_spans, device_chunks, partial);
  GLM_CUDA_CHECK_LAUNCH();
  SumPartialsKernel<<<1, kBlockThreads, 0, ctx.stream()>>>(
      partial, static_cast<int64_t>(chunks.size()), out);
  GLM_CUDA_CHECK_LAUNCH();
}

void AdamWStep(CudaContext& ctx, const AdamWHyperparameters& h,
               const std::vector<AdamWTensor>& tensors,
               const std::vector<__nv_bfloat16*>& copies) {
  assert(copies.size() == tensors.size());
  std::vector<int64_t> sizes;
  std::vector<AdamWTarget> targets;
  for (size_t i = 0; i < tensors.size(); ++i) {
    sizes.push_back(tensors[i].size);
    targets.push_back({tensors[i], copies[i]});
  }
  const std::vector<Chunk> chunks = ChunksOf(sizes);
  if (chunks.empty()) return;
  const double correction1 =
      1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double correction2 =
      1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  const AdamWConstants constants = {h.beta1,
                                    1.0 - h.beta1,
                                    h.beta2,
                                    1.0 - h.beta2,
                                    h.eps,
                                    h.grad_scale,
                                    h.lr / correction1,
                                    std::sqrt(correction2),
                                    h.lr * h.weight_decay};
  char* scratch = static_cast<char*>(
      ctx.Scratch(ScratchAlignUp(targets.size() * sizeof(AdamWTarget)) +
                  ScratchAlignUp(chunks.size() * sizeof(Chunk))));
  size_t offset = 0;
  const AdamWTarget* device_targets = Upload(ctx, scratch, &offset, targets);
  const Chunk* device_chunks = Upload(ctx, scratch, &offset, chunks);
  AdamWKernel<<<chunks.size(), kBlockThreads, 0, ctx.stream()>>>(
      device_targets, device_chunks, constants);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
