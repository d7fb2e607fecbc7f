// CRC-32C extended over a buffer, as `tsl::crc32c::Extend` computes it, with the SSE4.2 crc32
// instruction where the CPU has one: the op checks a record batch's checksum at its first read,
// before that batch's first rows are delivered, and TensorFlow's own Extend runs its portable
// table code in the pinned build (~1.5 GB/s here; the instruction, three streams at once, ~20),
// which made the check most of a fresh dataset's first batch. `tsl::crc32c::Extend` stays the
// fallback and the reference.
#ifndef SPARSEFLOW_NATIVE_CRC32C_EXTEND_H_
#define SPARSEFLOW_NATIVE_CRC32C_EXTEND_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xla/tsl/lib/hash/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sparseflow {

// The CRC of A then B from the CRCs of A and B alone (zlib's crc32_combine, for CRC-32C's reflected
// polynomial): A's CRC times x^(8 |B|) mod P, plus B's.
constexpr uint32_t kCrc32cPolynomial = 0x82F63B78;

inline uint32_t MultiplyModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kCrc32cPolynomial : b >> 1;
  }
  return product;
}

inline uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  static const auto powers = [] {  // x^(2^k) mod P
    std::array<uint32_t, 64> p{};
    p[0] = 1u << 30;  // x
    for (size_t k = 1; k < p.size(); ++k) p[k] = MultiplyModP(p[k - 1], p[k - 1]);
    return p;
  }();
  uint32_t shift = 1u << 31;  // x^0
  for (uint64_t n = length_b, k = 3; n != 0; n >>= 1, ++k) {  // x^(8 n): k from 3, 2^3 bits a byte
    if (n & 1) shift = MultiplyModP(powers[k], shift);
  }
  return MultiplyModP(shift, crc_a) ^ crc_b;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) inline uint64_t Crc32cWords(uint64_t c, const uint8_t* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return c;
}

// The instruction's latency is three cycles and it issues one a cycle, so three streams over the
// buffer's thirds run about three times as fast as one; their CRCs are combined after.
__attribute__((target("sse4.2"))) inline uint32_t Crc32cSse42(uint32_t crc, const uint8_t* p, size_t n) {
  if (n < 3 * 4096) return ~static_cast<uint32_t>(Crc32cWords(static_cast<uint32_t>(~crc), p, n));
  const size_t third = (n / 3) & ~static_cast<size_t>(7);
  const uint8_t* b = p + third;
  const uint8_t* c = p + 2 * third;
  uint64_t ca = static_cast<uint32_t>(~crc), cb = 0xFFFFFFFFu, cc = 0xFFFFFFFFu;  // B and C from crc 0
  for (size_t i = 0; i < third; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, b + i, 8);
    std::memcpy(&wc, c + i, 8);
    ca = _mm_crc32_u64(ca, wa);
    cb = _mm_crc32_u64(cb, wb);
    cc = _mm_crc32_u64(cc, wc);
  }
  cc = Crc32cWords(cc, c + third, n - 3 * third);
  const uint32_t ab = Crc32cCombine(~static_cast<uint32_t>(ca), ~static_cast<uint32_t>(cb), third);
  return Crc32cCombine(ab, ~static_cast<uint32_t>(cc), n - 2 * third);
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
