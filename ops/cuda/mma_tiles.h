// Warp tiles of the block-sparse tensor-core kernels: a 16-row x 16-k A fragment and its product with a 16-k x
// 16-column piece of B, both read from shared memory, for 16-bit types (ldmatrix + mma.sync m16n8k16) and for
// float32 on TF32 tensor cores (scalar shared loads rounded with cvt.rna.tf32 + two mma.sync m16n8k8 per k16).
//
// Tiles are stored either row by row ([row][k] for A, [k][n] for B) or transposed ([k][row], [n][k]); ld is the
// stored row length in elements and keeps every stored row 16-byte aligned. Lane l of the warp calls each function
// with the same arguments except its lane; acc0 and acc1 are the m16n8 accumulators of columns n..n+7 and n+8..n+15
// (warp_mma.h gives their layout).
#ifndef SPARSEFLOW_MMA_TILES_H_
#define SPARSEFLOW_MMA_TILES_H_

#include <stdint.h>

#include <type_traits>

#include "warp_mma.h"

namespace sparseflow {

// 16-bit types: a[0..3] as mma_m16n8k16 wants them. float32: a[0..3] and a[4..7], the m16n8k8 fragments of k 0..7
// and 8..15.
template <typename T, bool kTransposed>
__device__ __forceinline__ void load_a16(uint32_t (&a)[8], const T* s, int ld, int lane) {
  if constexpr (std::is_same<T, float>::value) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = g + 8 * (i % 2), k = 8 * h + t + 4 * (i / 2);
        a[4 * h + i] = to_tf32(kTransposed ? s[k * ld + r] : s[r * ld + k]);
      }
    }
  } else {
    uint32_t r[4];
    if constexpr (kTransposed) {
      ldmatrix<4, true>(r, s + (lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8);
    } else {
      ldmatrix<4, false>(r, s + (lane % 16) * ld + (lane / 16) * 8);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = r[i];
  }
}

// acc0 += A B[:, 0..7], acc1 += A B[:, 8..15] for the 16 k of `a`; s points at B's element (k 0, column 0).
template <typename T>
__device__ __forceinline__ void mma_n16(float (&acc0)[4], float (&acc1)[4], const uint32_t (&a)[8], const T* s, int ld,
                                        bool transposed, int lane) {
  if constexpr (std::is_same<T, float>::value) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t fa[4] = {a[4 * h], a[4 * h + 1], a[4 * h + 2], a[4 * h + 3]};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t fb[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int k = 8 * h + t + 4 * i, n = 8 * j + g;
          fb[i] = to_tf32(transposed ? s[n * ld + k] : s[k * ld + n]);
        }
        mma_m16n8k8_tf32(j == 0 ? acc0 : acc1, fa, fb);
      }
    }
  } else {
    uint32_t fb[4];  // fb[0..1]: columns 0..7, fb[2..3]: columns 8..15
    if (transposed) {
      ldmatrix<4, false>(fb, s + (lane % 8 + (lane / 16) * 8) * ld + ((lane / 8) % 2) * 8);
    } else {
      ldmatrix<4, true>(fb, s + (lane % 8 + ((lane / 8) % 2) * 8) * ld + (lane / 16) * 8);
    }
    const uint32_t fa[4] = {a[0], a[1], a[2], a[3]};
    const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
    mma_m16n8k16<T>(acc0, fa, b0);
    mma_m16n8k16<T>(acc1, fa, b1);
  }
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_MMA_TILES_H_
