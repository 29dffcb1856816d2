// bfloat16 values as their 16 bits: the upper half of a float32. One rounding
// for everything that narrows on the host (checkpoint exports, the CPU's
// emulation of bf16 activations, the GPU checks' operands), the one a GPU's
// conversion applies.
#ifndef GLM_BASE_BF16_H_
#define GLM_BASE_BF16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace glm {

// float32 to bfloat16 bits, rounding to nearest even (NaN stays NaN).
inline uint16_t Float32ToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// bfloat16 bits to the float32 they are the upper half of (exact).
inline float Bfloat16ToFloat32(uint16_t half) {
  const uint32_t bits = uint32_t{half} << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace glm

#endif  // GLM_BASE_BF16_H_
