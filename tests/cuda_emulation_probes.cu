// Probe kernels for tests/test_cuda_emulation.py: each exercises one feature of the CPU emulation
// (ops/cuda/emulation/) and writes what it saw, or does something a GPU forbids, so the tests can check the
// emulation's answer or its fault. Plain CUDA: nvcc compiles it too.
#include <cub/cub.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <mma.h>

#include <stdint.h>

namespace {

// out[what * threads + t]: 0 shfl_down 3, 1 shfl_up 2 (width 8), 2 shfl_xor 5, 3 shfl lane 7 (width 16),
// 4 ballot(lane % 3 == 0), 5 any(lane == 9), 6 all(lane < 31), 7 __syncthreads_count(t % 4 == 0).
__global__ void warp_intrinsics(int* out) {
  const int t = threadIdx.x, lane = t % 32, threads = blockDim.x;
  const int v = 100 * (t / 32) + lane;
  const unsigned all = 0xffffffffu;
  out[0 * threads + t] = __shfl_down_sync(all, v, 3);
  out[1 * threads + t] = __shfl_up_sync(all, v, 2, 8);
  out[2 * threads + t] = __shfl_xor_sync(all, v, 5);
  out[3 * threads + t] = __shfl_sync(all, v, 7, 16);
  out[4 * threads + t] = static_cast<int>(__ballot_sync(all, lane % 3 == 0));
  out[5 * threads + t] = __any_sync(all, lane == 9);
  out[6 * threads + t] = __all_sync(all, lane < 31);
  out[7 * threads + t] = __syncthreads_count(t % 4 == 0);
}

// A block of 40 threads: the second warp has 8 lanes, which ballot and sum with a mask of those 8.
__global__ void partial_warp(unsigned* out) {
  const int t = threadIdx.x, lane = t % 32;
  const unsigned mask = t < 32 ? 0xffffffffu : 0xffu;
  unsigned value = static_cast<unsigned>(lane);
  for (int offset = 4; offset > 0; offset /= 2) value += __shfl_xor_sync(mask, value, offset);
  out[t] = value + (__ballot_sync(mask, 1) << 8);
}

__global__ void atomics(float* sum, unsigned long long* least, int* count) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(sum, 0.5f);
  atomicMin(least, static_cast<unsigned long long>(1000 - t));
  atomicAdd(count, 1);
}

// Shared memory, thread (x, y) of a 2-D block and grid: each block reverses its 64 values through shared memory.
__global__ void shared_reverse(const int* in, int* out) {
  __shared__ int tile[64];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int block = blockIdx.y * gridDim.x + blockIdx.x;
  tile[t] = in[block * 64 + t];
  __syncthreads();
  out[block * 64 + t] = tile[63 - t];
}

// Threads below 32 write their block's index, all 64 read: the upper half is what the block never wrote.
__global__ void shared_half_written(unsigned* out) {
  __shared__ unsigned tile[64];
  if (threadIdx.x < 32) tile[threadIdx.x] = blockIdx.x;
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = tile[threadIdx.x];
}

// d = a @ b + c for one 16x16x16 tile, the fragments loaded with the given layouts.
template <typename T, typename LayoutA, typename LayoutB>
__global__ void wmma_tile(const T* a, const T* b, const float* c, float* d, int c_row_major) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::load_matrix_sync(acc, c, 16, c_row_major ? wmma::mem_row_major : wmma::mem_col_major);
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= 2.0f;  // element-wise: the same on every layout
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

__global__ void half_convert(const float* in, uint16_t* half_bits, uint16_t* bf16_bits, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half h = __float2half_rn(in[i]);
  const __nv_bfloat16 b = __float2bfloat16_rn(in[i]);
  half_bits[i] = *reinterpret_cast<const uint16_t*>(&h);
  bf16_bits[i] = *reinterpret_cast<const uint16_t*>(&b);
  back[i] = __half2float(h);
}

// Faults: what each does wrong is in its name.
__global__ void syncthreads_after_return(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_from_returned_lane(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 8);
}

__global__ void warp_waits_for_barrier(int* out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
  }
}

__global__ void wmma_misaligned(const __half* a, float* d) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a + 1, 16);
  d[threadIdx.x] = __half2float(fa.x[0]);
}

}  // namespace

extern "C" {

int probe_warp_intrinsics(int* out, int threads) {
  warp_intrinsics<<<1, threads>>>(out);
  return static_cast<int>(cudaGetLastError());
}

int probe_partial_warp(unsigned* out) {
  partial_warp<<<1, 40>>>(out);
  return static_cast<int>(cudaGetLastError());
}

int probe_atomics(float* sum, unsigned long long* least, int* count, int blocks, int threads) {
  atomics<<<blocks, threads>>>(sum, least, count);
  return static_cast<int>(cudaGetLastError());
}

int probe_shared_reverse(const int* in, int* out) {
  shared_reverse<<<dim3(3, 2), dim3(16, 4)>>>(in, out);
  return static_cast<int>(cudaGetLastError());
}

int probe_shared_half_written(unsigned* out, int blocks) {
  shared_half_written<<<blocks, 64>>>(out);
  return static_cast<int>(cudaGetLastError());
}

// dtype 1: __half, 2: __nv_bfloat16; layouts: bit 0 a col-major, bit 1 b col-major, bit 2 c col-major.
int probe_wmma(int dtype, const void* a, const void* b, const float* c, float* d, int layouts) {
  using namespace nvcuda;
  const int c_row_major = !(layouts & 4);
  if (dtype == 1) {
    const auto* ah = static_cast<const __half*>(a);
    const auto* bh = static_cast<const __half*>(b);
    switch (layouts & 3) {
      case 0: wmma_tile<__half, wmma::row_major, wmma::row_major><<<1, 32>>>(ah, bh, c, d, c_row_major); break;
      case 1: wmma_tile<__half, wmma::col_major, wmma::row_major><<<1, 32>>>(ah, bh, c, d, c_row_major); break;
      case 2: wmma_tile<__half, wmma::row_major, wmma::col_major><<<1, 32>>>(ah, bh, c, d, c_row_major); break;
      default: wmma_tile<__half, wmma::col_major, wmma::col_major><<<1, 32>>>(ah, bh, c, d, c_row_major); break;
    }
  } else {
    const auto* ab = static_cast<const __nv_bfloat16*>(a);
    const auto* bb = static_cast<const __nv_bfloat16*>(b);
    wmma_tile<__nv_bfloat16, wmma::row_major, wmma::row_major><<<1, 32>>>(ab, bb, c, d, c_row_major);
  }
  return static_cast<int>(cudaGetLastError());
}

int probe_half_convert(const float* in, uint16_t* half_bits, uint16_t* bf16_bits, float* back, int n) {
  half_convert<<<(n + 63) / 64, 64>>>(in, half_bits, bf16_bits, back, n);
  return static_cast<int>(cudaGetLastError());
}

// which: 0 syncthreads after return, 1 shuffle from a returned lane, 2 a warp waits while a lane is at the
// barrier, 3 misaligned WMMA load, 4 a grid of 0 blocks, 5 a block of 1025 threads.
int probe_fault(int which, int* out, const __half* a, float* d) {
  switch (which) {
    case 0: syncthreads_after_return<<<1, 64>>>(out); break;
    case 1: shuffle_from_returned_lane<<<1, 32>>>(out); break;
    case 2: warp_waits_for_barrier<<<1, 32>>>(out); break;
    case 3: wmma_misaligned<<<1, 32>>>(a, d); break;
    case 4: syncthreads_after_return<<<0, 32>>>(out); break;
    default: syncthreads_after_return<<<1, 1025>>>(out); break;
  }
  return static_cast<int>(cudaGetLastError());
}

// Sorts keys on bits [begin_bit, end_bit) (stable), with temp storage of temp_bytes (0: as many as asked for).
int probe_sort_pairs(const uint64_t* keys_in, uint64_t* keys_out, const int64_t* values_in, int64_t* values_out,
                     int n, int begin_bit, int end_bit, void* temp, size_t temp_bytes, size_t* asked) {
  size_t bytes = 0;
  cudaError_t status = cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, values_in, values_out, n,
                                                       begin_bit, end_bit);
  *asked = bytes;
  if (status != cudaSuccess) return static_cast<int>(status);
  if (temp_bytes != 0) bytes = temp_bytes;
  return static_cast<int>(cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys_out, values_in, values_out, n,
                                                          begin_bit, end_bit));
}

}  // extern "C"
