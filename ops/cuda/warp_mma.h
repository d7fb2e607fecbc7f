// The warp-level tensor-core and asynchronous-copy instructions the block-sparse kernels use, each behind a small
// device function: inline PTX on the GPU (compute capability 8.0 and up), and in the CPU emulation
// (emulation/cuda_on_cpu_mma.h) an implementation of the same documented fragment layouts, so the kernels that call
// them run in the emulated tests unchanged.
//
//   ldmatrix<N, kTrans>(r, row): ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16. Lanes 8i..8i+7 give the 16-byte
//     rows 0..7 of matrix i (i < N; N = 1, 2 or 4); lane l receives in r[i] the elements (l / 4, 2 (l % 4)) and
//     (l / 4, 2 (l % 4) + 1) of matrix i, the first in the low half (with kTrans: (2 (l % 4), l / 4) and
//     (2 (l % 4) + 1, l / 4)).
//   mma_m16n8k16<T>(d, a, b): mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, d += a b. With
//     g = lane / 4, t = lane % 4: a[0] holds A(g, 2t..2t+1), a[1] A(g+8, 2t..), a[2] A(g, 2t+8..), a[3] A(g+8, 2t+8..);
//     b[0] holds B(2t..2t+1, g), b[1] B(2t+8..2t+9, g); d[0..1] D(g, 2t..2t+1), d[2..3] D(g+8, 2t..2t+1).
//   mma_m16n8k8_tf32(d, a, b): mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: a[0] A(g, t), a[1] A(g+8, t),
//     a[2] A(g, t+4), a[3] A(g+8, t+4); b[0] B(t, g), b[1] B(t+4, g); d as above. Inputs are tf32 bit patterns
//     (to_tf32: float32 rounded to 10 mantissa bits, to nearest, ties away from zero: cvt.rna.tf32.f32).
//   cp_async_16(dst, src, bytes): cp.async.cg.shared.global, 16 bytes to shared memory, the last 16 - bytes of them
//     zeros (bytes 0: no global read at all); cp_async_commit() closes the group of copies issued since the last
//     one, cp_async_wait<N>() waits until at most N groups are pending. Both addresses 16-byte aligned.
#ifndef SPARSEFLOW_WARP_MMA_H_
#define SPARSEFLOW_WARP_MMA_H_

#include <stdint.h>

#if defined(SPARSEFLOW_CUDA_ON_CPU)
#include "emulation/cuda_on_cpu_mma.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace sparseflow {

template <typename T>
struct MmaType;
template <>
struct MmaType<__half> {
  static constexpr bool kBfloat16 = false;
};
template <>
struct MmaType<__nv_bfloat16> {
  static constexpr bool kBfloat16 = true;
};

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int N, bool kTrans>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t address = shared_address(row);
  if constexpr (N == 1 && !kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(address));
  } else if constexpr (N == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(address));
  } else if constexpr (N == 2 && !kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(address));
  } else if constexpr (!kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
  }
#endif
}

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (MmaType<T>::kBfloat16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

__device__ __forceinline__ uint32_t to_tf32(float v) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
#endif
  return r;
}

__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src), "r"(bytes));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_CUDA_ON_CPU
#endif  // SPARSEFLOW_WARP_MMA_H_
