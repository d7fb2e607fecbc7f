// 16-bit tables for the embedding-bag kernels: Eigen::half (float16) and Eigen::bfloat16 rows are
// widened to float32, summed in float32, and each output element is rounded to the table's type once,
// at the end (round to nearest even). A sum therefore differs from the float32 sum of the same values
// only by that one rounding, where a composition of 16-bit ops (tf.nn.embedding_lookup_sparse) rounds
// after every product and every addition.
#ifndef SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_HALF_H_
#define SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_HALF_H_

#include <cstdint>
#include <cstring>

#if defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "embedding_bag_kernels.h"
#include "unsupported/Eigen/CXX11/Tensor"  // Eigen::half, Eigen::bfloat16

namespace sparseflow {

template <>
struct Accumulation<Eigen::half> {
  using Acc = float;
  static float Load(Eigen::half value) { return static_cast<float>(value); }
  static Eigen::half Store(float value) { return Eigen::half(value); }
  static void AddScaled(float* __restrict acc, float gain, const Eigen::half* __restrict src, int64_t dim) {
    int64_t d = 0;
#if defined(__F16C__) && defined(__FMA__)
    // Eight halves at a time through the F16C conversion; the scalar tail below does the same sums.
    const __m256 scale = _mm256_set1_ps(gain);
    for (; d + 8 <= dim; d += 8) {
      const __m256 row = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d)));
      _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(scale, row, _mm256_loadu_ps(acc + d)));
    }
#endif
    for (; d < dim; ++d) acc[d] += gain * static_cast<float>(src[d]);
  }
};

template <>
struct Accumulation<Eigen::bfloat16> {
  using Acc = float;
  static float Load(Eigen::bfloat16 value) { return static_cast<float>(value); }
  static Eigen::bfloat16 Store(float value) { return Eigen::bfloat16(value); }
  static void AddScaled(float* __restrict acc, float gain, const Eigen::bfloat16* __restrict src, int64_t dim) {
    // A bfloat16 is the top half of a float32: the widening is a shift, which the compiler vectorises.
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
    for (int64_t d = 0; d < dim; ++d) {
      const uint32_t word = static_cast<uint32_t>(bits[d]) << 16;
      float value;
      std::memcpy(&value, &word, sizeof(value));
      acc[d] += gain * value;
    }
  }
};

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_HALF_H_
