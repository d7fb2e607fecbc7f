// Probe kernels for tests/test_cuda_emulation_mma.py: the device functions of ops/cuda/warp_mma.h (ldmatrix,
// mma.sync, cvt.rna.tf32, cp.async) called by one warp on values the test lays out, each writing what the lanes
// received so the test can check it against the PTX ISA's fragment layouts. Plain CUDA: nvcc compiles it too.
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "warp_mma.h"

namespace {

using sparseflow::cp_async_16;
using sparseflow::cp_async_commit;
using sparseflow::cp_async_wait;
using sparseflow::ldmatrix;

// `matrices`: 4 stacked 8 x 8 matrices of 16-bit values, row-major; lane l gives the address of row l % 8 of
// matrix l / 8 (a shared copy with rows 16 bytes apart plus 16 bytes of padding). out[l * 4 + i]: lane l's r[i].
template <int N, bool kTrans>
__global__ void ldmatrix_probe(const uint16_t* matrices, uint32_t* out) {
  __shared__ __align__(16) uint16_t rows[32][16];
  const int lane = threadIdx.x;
  for (int c = 0; c < 8; ++c) rows[lane][c] = matrices[lane * 8 + c];
  __syncwarp();
  uint32_t r[N];
  ldmatrix<N, kTrans>(r, &rows[lane][0]);
  for (int i = 0; i < N; ++i) out[lane * 4 + i] = r[i];
}

// Each lane passes its registers a[4], b[2] and accumulators d[4] as the test laid them out.
template <int kKind>
__global__ void mma_probe(const uint32_t* a, const uint32_t* b, float* d) {
  const int lane = threadIdx.x;
  const uint32_t fa[4] = {a[lane * 4], a[lane * 4 + 1], a[lane * 4 + 2], a[lane * 4 + 3]};
  const uint32_t fb[2] = {b[lane * 2], b[lane * 2 + 1]};
  float acc[4] = {d[lane * 4], d[lane * 4 + 1], d[lane * 4 + 2], d[lane * 4 + 3]};
  if constexpr (kKind == 0) sparseflow::mma_m16n8k16<__half>(acc, fa, fb);
  if constexpr (kKind == 1) sparseflow::mma_m16n8k16<__nv_bfloat16>(acc, fa, fb);
  if constexpr (kKind == 2) sparseflow::mma_m16n8k8_tf32(acc, fa, fb);
  for (int i = 0; i < 4; ++i) d[lane * 4 + i] = acc[i];
}

__global__ void tf32_probe(const float* in, uint32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sparseflow::to_tf32(in[i]);
}

// Thread t copies src[t] (16 bytes) in group 0 and src[32 + t] with `bytes` bytes in group 1. out (3 x 32 x 4
// words): its slot of group 0 and of group 1 after wait<1> (group 0 done, group 1 may be pending), then its slot
// of group 1 after wait<0>.
__global__ void cp_async_probe(const uint4* src, int bytes, uint32_t* out) {
  __shared__ __align__(16) uint4 slots[2][32];
  const int t = threadIdx.x;
  cp_async_16(&slots[0][t], &src[t], 16);
  cp_async_commit();
  cp_async_16(&slots[1][t], &src[32 + t], bytes);
  cp_async_commit();
  cp_async_wait<1>();
  const uint4 seen[3] = {slots[0][t], slots[1][t], {}};
  cp_async_wait<0>();
  const uint4 last = slots[1][t];
  for (int k = 0; k < 3; ++k) {
    const uint4 v = k < 2 ? seen[k] : last;
    out[(k * 32 + t) * 4] = v.x;
    out[(k * 32 + t) * 4 + 1] = v.y;
    out[(k * 32 + t) * 4 + 2] = v.z;
    out[(k * 32 + t) * 4 + 3] = v.w;
  }
}

// Lane l points at row l + 1 element: not 16-byte aligned.
__global__ void ldmatrix_misaligned(uint32_t* out) {
  __shared__ __align__(16) uint16_t rows[33][8];
  for (int c = 0; c < 8; ++c) rows[threadIdx.x][c] = 0;
  __syncwarp();
  uint32_t r[1];
  ldmatrix<1, false>(r, &rows[threadIdx.x][1]);
  out[threadIdx.x] = r[0];
}

}  // namespace

extern "C" {

int probe_ldmatrix(int n, int trans, const uint16_t* matrices, uint32_t* out) {
  if (n == 1 && !trans) ldmatrix_probe<1, false><<<1, 32>>>(matrices, out);
  if (n == 1 && trans) ldmatrix_probe<1, true><<<1, 32>>>(matrices, out);
  if (n == 2 && !trans) ldmatrix_probe<2, false><<<1, 32>>>(matrices, out);
  if (n == 2 && trans) ldmatrix_probe<2, true><<<1, 32>>>(matrices, out);
  if (n == 4 && !trans) ldmatrix_probe<4, false><<<1, 32>>>(matrices, out);
  if (n == 4 && trans) ldmatrix_probe<4, true><<<1, 32>>>(matrices, out);
  return static_cast<int>(cudaGetLastError());
}

int probe_mma(int kind, const uint32_t* a, const uint32_t* b, float* d) {
  if (kind == 0) mma_probe<0><<<1, 32>>>(a, b, d);
  if (kind == 1) mma_probe<1><<<1, 32>>>(a, b, d);
  if (kind == 2) mma_probe<2><<<1, 32>>>(a, b, d);
  return static_cast<int>(cudaGetLastError());
}

int probe_tf32(const float* in, uint32_t* out, int n) {
  tf32_probe<<<(n + 63) / 64, 64>>>(in, out, n);
  return static_cast<int>(cudaGetLastError());
}

int probe_cp_async(const void* src, int bytes, uint32_t* out) {
  cp_async_probe<<<1, 32>>>(static_cast<const uint4*>(src), bytes, out);
  return static_cast<int>(cudaGetLastError());
}

int probe_ldmatrix_misaligned(uint32_t* out) {
  ldmatrix_misaligned<<<1, 32>>>(out);
  return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
