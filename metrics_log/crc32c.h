// CRC-32C (Castagnoli), the checksum of TFRecord framing, and the "masked"
// form TFRecord stores (so that a CRC over data that holds CRCs stays
// well distributed).
#ifndef GLM_METRICS_LOG_CRC32C_H_
#define GLM_METRICS_LOG_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace glm {

uint32_t Crc32c(const void* data, size_t size);
uint32_t MaskedCrc32c(const void* data, size_t size);

}  // namespace glm

#endif  // GLM_METRICS_LOG_CRC32C_H_
