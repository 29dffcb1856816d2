#include "data/seeded_shuffle.h"

namespace glm {

uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  // 2^64 mod bound, computed in 64 bits as (2^64 - bound) mod bound.
  const uint64_t rejected = (0 - bound) % bound;
  while (true) {
    const uint64_t draw = rng();
    if (draw >= rejected) return draw % bound;
  }
}

}  // namespace glm
