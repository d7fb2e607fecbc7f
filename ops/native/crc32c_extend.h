// CRC-32C extended over a buffer, as `tsl::crc32c::Extend` computes it, with the SSE4.2 crc32
// instruction where the CPU has one: the op checks a record batch's checksum at its first read,
// before that batch's first rows are delivered, and TensorFlow's own Extend runs its portable
// table code in the pinned build (~1.5 GB/s here, the instruction ~8 GB/s), which made the check
// most of a fresh dataset's first batch. `tsl::crc32c::Extend` stays the fallback and the reference.
#ifndef SPARSEFLOW_NATIVE_CRC32C_EXTEND_H_
#define SPARSEFLOW_NATIVE_CRC32C_EXTEND_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xla/tsl/lib/hash/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sparseflow {

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) inline uint32_t Crc32cSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}
#endif

// `crc` extended by the n bytes at p (the same value as tsl::crc32c::Extend).
inline uint32_t Crc32cExtend(uint32_t crc, const uint8_t* p, size_t n) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return Crc32cSse42(crc, p, n);
#endif
  return tsl::crc32c::Extend(crc, reinterpret_cast<const char*>(p), n);
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_CRC32C_EXTEND_H_
