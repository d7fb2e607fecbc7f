// float16 (__half) and bfloat16 (__nv_bfloat16) for the CPU emulation: 16-bit storage types with the
// conversions CUDA's headers give them, rounding to nearest even (subnormals, infinities and NaN kept).
#ifndef SPARSEFLOW_CUDA_ON_CPU_HALF_H_
#define SPARSEFLOW_CUDA_ON_CPU_HALF_H_

#include <cstdint>
#include <cstring>

#include "cuda_on_cpu.h"

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};

namespace cuda_on_cpu {

inline uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

inline float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline uint16_t half_from_float(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, infinity
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent > 15) return sign | 0x7c00u;
  if (exponent < -25) return sign;
  if (exponent < -14) {  // a half subnormal: m * 2^-24
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const int shift = -(exponent + 1);  // 14..24
    uint32_t q = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (static_cast<uint32_t>(exponent + 15) << 10) | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right, up to infinity
  return static_cast<uint16_t>(sign | h);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t bfloat16_from_float(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace cuda_on_cpu

inline float __half2float(__half h) { return cuda_on_cpu::half_to_float(h.bits); }
inline __half __float2half_rn(float f) { return __half{cuda_on_cpu::half_from_float(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return cuda_on_cpu::bits_float(static_cast<uint32_t>(h.bits) << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{cuda_on_cpu::bfloat16_from_float(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

#endif  // SPARSEFLOW_CUDA_ON_CPU_HALF_H_
