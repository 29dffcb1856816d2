// Shuffles that give the same order on every platform for the same seed.
// std::mt19937_64 is fully specified by the standard, but std::shuffle and
// std::uniform_int_distribution are not, so both are written out here.
#ifndef GLM_DATA_SEEDED_SHUFFLE_H_
#define GLM_DATA_SEEDED_SHUFFLE_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace glm {

// Uniform in [0, bound) without modulo bias: draws below 2^64 mod bound are
// rejected so that every residue is equally likely. `bound` must be > 0.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound);

// Fisher-Yates: for i from the last index down to 1, swap element i with a
// uniform element in [0, i].
template <typename T>
void SeededShuffle(std::mt19937_64& rng, std::vector<T>* values) {
  for (size_t i = values->size(); i > 1; --i) {
    const size_t j = UniformBelow(rng, i);
    std::swap((*values)[i - 1], (*values)[j]);
  }
}

}  // namespace glm

#endif  // GLM_DATA_SEEDED_SHUFFLE_H_
