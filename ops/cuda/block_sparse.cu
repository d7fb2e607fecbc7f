// Block-sparse matmul kernels behind the C interface of sparseflow_kernels.h.
//
// product (y = x @ W, dx = dy @ W^T): one thread block per (tile of rows, output block column), numbered
// output-fastest so the blocks sharing a row tile of `a` run together. It walks the output's plan members; each
// step stages the member's input block column of `a` (a tile of rows x block) and its weight block in shared
// memory, then multiplies them:
//   float32 (and 8-blocks of every type): product_simt, 256 threads, each holding a 4 x 4 patch of the output
//     tile in registers (4096 / block rows per tile), float32 accumulation on CUDA cores;
//   float16 / bfloat16 with blocks of 16-64, and float32 with TF32 asked for at blocks 16 and 32: product_mma,
//     8 warps of mma.sync tensor-core products (128 rows per tile, 64 for 64-blocks), 16-bit fragments loaded
//     with ldmatrix, tiles copied with cp.async into two stages so the next member's copy overlaps this member's
//     products; float32 accumulators, converted once at the end.
// weight_grad (dw = x^T @ dy per block): one thread block per weight block, walking the rows of x and dy in
// chunks staged in shared memory. weight_grad_simt (float32, 8-blocks): each thread accumulates a 4 x 4 patch of
// the block over its share of the rows, the shares are added at the end; weight_grad_mma (16-bit types and TF32
// at blocks 16-64): tensor-core tiles over cp.async double-buffered chunks. float32 accumulation for every type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "block_plan.h"
#include "sparseflow_kernels.h"
#include "mma_tiles.h"
#include "warp_mma.h"

namespace sparseflow {
namespace {

constexpr int kThreads = 256;
// Resident blocks per SM each kernel is built for (benchmarks/cuda_resources.py OCCUPANCY states the same and the
// compile checks hold the kernels to the registers and shared memory it allows).
constexpr int kSimtBlocksPerSm = 3;
constexpr int kTensorCoreBlocksPerSm = 2;

// Rows of `a` per tensor-core product tile: two stages of the tile and of the weight block fit 48 KiB of static
// shared memory (float32 runs on these kernels for blocks of 16 and 32 only).
__host__ __device__ constexpr int tensor_core_tile_rows(int block) { return block == 64 ? 64 : 128; }
// Rows of x and dy per tensor-core weight-gradient chunk, two stages of both within 48 KiB.
__host__ __device__ constexpr int weight_grad_chunk_rows(int block, int element_bytes) {
  return block == 64 ? (element_bytes == 4 ? 32 : 64) : block == 32 ? (element_bytes == 4 ? 64 : 128) : 128;
}

// Blocks are numbered output-fastest: the blocks of one row tile run together and share its rows of `a` in L2,
// instead of each output column re-reading all of `a` (a 1-D grid also lifts the 65535 limit of gridDim.y).
__device__ __forceinline__ void grid_position(int32_t outputs, int64_t* tile, int* output) {
  *tile = static_cast<int64_t>(blockIdx.x) / outputs;
  *output = static_cast<int>(static_cast<int64_t>(blockIdx.x) % outputs);
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// CUDA-core product: tile of TM = 4096 / BS rows; thread (ty, tx) holds rows ty*4..+3, columns tx*4..+3.
template <typename T, int BS>
__global__ void __launch_bounds__(kThreads, kSimtBlocksPerSm)
    product_simt(const T* __restrict__ a, int64_t m, int32_t a_blocks, const T* __restrict__ w,
                 const int32_t* __restrict__ offsets, const int32_t* __restrict__ partners,
                 const int32_t* __restrict__ slots, int transpose_blocks, T* __restrict__ out, int32_t outputs) {
  constexpr int TM = 4096 / BS;
  constexpr int TX = BS / 4;  // threads across the block's columns
  // a_tile is stored k-major with one float of padding, so the staging stores (consecutive k) hit
  // consecutive banks.
  __shared__ float a_tile[BS][TM + 1];
  __shared__ __align__(16) float w_tile[BS][BS];
  const int tx = threadIdx.x % TX;
  const int ty = threadIdx.x / TX;
  int64_t tile;
  int o;
  grid_position(outputs, &tile, &o);
  const int64_t row0 = tile * TM;
  const int64_t a_cols = static_cast<int64_t>(a_blocks) * BS;
  float acc[4][4] = {};
  for (int e = offsets[o]; e < offsets[o + 1]; ++e) {
    const int64_t col0 = static_cast<int64_t>(partners[e]) * BS;
    const T* block = w + static_cast<int64_t>(slots[e]) * BS * BS;
    __syncthreads();  // the previous member's tiles are no longer read
    for (int i = threadIdx.x; i < TM * BS; i += kThreads) {
      const int r = i / BS, k = i % BS;
      const int64_t row = row0 + r;
      a_tile[k][r] = row < m ? to_float(a[row * a_cols + col0 + k]) : 0.0f;
    }
    for (int i = threadIdx.x; i < BS * BS; i += kThreads) {
      const int k = i / BS, n = i % BS;
      w_tile[k][n] = to_float(transpose_blocks ? block[n * BS + k] : block[k * BS + n]);
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < BS; ++k) {
      const float4 wv = *reinterpret_cast<const float4*>(&w_tile[k][tx * 4]);
      const float wk[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float av = a_tile[k][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av * wk[j];
      }
    }
  }
  const int64_t out_cols = static_cast<int64_t>(outputs) * BS;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = row0 + ty * 4 + i;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) out[row * out_cols + static_cast<int64_t>(o) * BS + tx * 4 + j] = from_float<T>(acc[i][j]);
  }
}

// Tensor-core product (float32 accumulators): mma.sync m16n8k16 for 16-bit types, TF32 m16n8k8 for float32 when
// asked for. A tile of TM rows (tensor_core_tile_rows) x BS columns; the 8 warps form WM x WN, each computing 16
// rows x WC columns (16 or 32) as WC / 8 accumulator fragments. Each plan member's a tile and weight block are
// copied into shared memory with cp.async while the previous member's are multiplied (two stages); 16-bit
// fragments come from shared memory through ldmatrix (the weight block through its .trans form unless it is stored
// transposed, dx = dy @ W^T, when the plain form reads it as B's columns). Rows are padded by 16 bytes so the 8
// rows an ldmatrix reads fall in distinct banks.
template <typename T, int BS>
__global__ void __launch_bounds__(kThreads, kTensorCoreBlocksPerSm)
    product_mma(const T* __restrict__ a, int64_t m, int32_t a_blocks, const T* __restrict__ w,
                const int32_t* __restrict__ offsets, const int32_t* __restrict__ partners,
                const int32_t* __restrict__ slots, int transpose_blocks, T* __restrict__ out, int32_t outputs) {
  constexpr int TM = tensor_core_tile_rows(BS);
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte copy
  constexpr int LD = BS + kVec;
  constexpr int WM = TM / 16, WN = 8 / WM, WC = BS / WN, TILES = WC / 8;
  static_assert(TILES % 2 == 0, "warps take pairs of 8-column tiles");
  __shared__ __align__(128) T a_tile[2][TM * LD];
  __shared__ __align__(128) T w_tile[2][BS * LD];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wr = (warp % WM) * 16, wc = (warp / WM) * WC;
  int64_t tile;
  int o;
  grid_position(outputs, &tile, &o);
  const int64_t row0 = tile * TM;
  const int64_t a_cols = static_cast<int64_t>(a_blocks) * BS;
  const int begin = offsets[o], members = offsets[o + 1] - begin;
  float acc[TILES][4] = {};

  auto stage = [&](int e, int buffer) {
    const int64_t col0 = static_cast<int64_t>(partners[e]) * BS;
    const T* block = w + static_cast<int64_t>(slots[e]) * BS * BS;
    for (int i = threadIdx.x; i < TM * BS / kVec; i += kThreads) {
      const int r = i / (BS / kVec), k = (i % (BS / kVec)) * kVec;
      const int64_t row = row0 + r;
      // Rows past m are zero-filled without reading (source size 0); their address stays inside `a`.
      cp_async_16(&a_tile[buffer][r * LD + k], a + (row < m ? row : 0) * a_cols + col0 + k, row < m ? 16 : 0);
    }
    for (int i = threadIdx.x; i < BS * BS / kVec; i += kThreads) {
      const int r = i / (BS / kVec), k = (i % (BS / kVec)) * kVec;
      cp_async_16(&w_tile[buffer][r * LD + k], block + r * BS + k, 16);
    }
    cp_async_commit();
  };

  if (members > 0) stage(begin, 0);
  for (int i = 0; i < members; ++i) {
    const int buffer = i & 1;
    if (i + 1 < members) {
      stage(begin + i + 1, buffer ^ 1);  // its buffer was last read in step i - 1, before that step's barrier
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BS; kk += 16) {
      uint32_t fa[8];
      load_a16<T, false>(fa, a_tile[buffer] + wr * LD + kk, LD, lane);
#pragma unroll
      for (int j = 0; j < TILES; j += 2) {
        const T* b = transpose_blocks ? w_tile[buffer] + (wc + j * 8) * LD + kk : w_tile[buffer] + kk * LD + wc + j * 8;
        mma_n16<T>(acc[j], acc[j + 1], fa, b, LD, transpose_blocks != 0, lane);
      }
    }
    __syncthreads();  // this buffer is refilled in step i + 1
  }
  const int64_t out_cols = static_cast<int64_t>(outputs) * BS;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < TILES; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + wr + g + 8 * h;
      if (row >= m) continue;
      T* dst = out + row * out_cols + static_cast<int64_t>(o) * BS + wc + j * 8 + 2 * t;
      dst[0] = from_float<T>(acc[j][2 * h]);
      dst[1] = from_float<T>(acc[j][2 * h + 1]);
    }
  }
}

// Tensor-core weight gradient, dw = x^T dy for one weight block per thread block (types as product_mma). The rows
// of x and dy are walked in chunks of KC, copied with cp.async into two stages; A = x^T is read from the staged
// x chunk as stored ([k][row]: ldmatrix .trans), B = dy as stored ([k][n]). The 8 warps cover the block with
// 16 x WC tiles, KSPLIT warps per tile taking alternate 16-row steps of each chunk; their partial sums are added
// through shared memory at the end.
template <typename T, int BS>
__global__ void __launch_bounds__(kThreads, kTensorCoreBlocksPerSm)
    weight_grad_mma(const T* __restrict__ x, const T* __restrict__ dy, int64_t m, int32_t k_blocks, int32_t n_blocks,
                    const int32_t* __restrict__ blocks, T* __restrict__ dw) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int LD = BS + kVec;
  constexpr int KC = weight_grad_chunk_rows(BS, sizeof(T));
  constexpr int WC = BS == 64 ? 32 : 16, TILES = WC / 8;
  constexpr int WARP_TILES = (BS / 16) * (BS / WC), KSPLIT = 8 / WARP_TILES;
  constexpr size_t kStageBytes = sizeof(T) * 2 * 2 * KC * LD;
  constexpr size_t kSumBytes = sizeof(float) * KSPLIT * BS * BS;
  static_assert(KC / 16 >= KSPLIT, "every warp has a step of each chunk");
  __shared__ __align__(128) unsigned char smem[kStageBytes > kSumBytes ? kStageBytes : kSumBytes];
  T* xs = reinterpret_cast<T*>(smem);  // [2][KC][LD]
  T* ds = xs + 2 * KC * LD;            // [2][KC][LD]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int tile = warp % WARP_TILES, split = warp / WARP_TILES;
  const int wr = (tile / (BS / WC)) * 16, wc = (tile % (BS / WC)) * WC;
  const int i_block = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blocks[2 * i_block]) * BS;
  const int64_t c0 = static_cast<int64_t>(blocks[2 * i_block + 1]) * BS;
  const int64_t x_cols = static_cast<int64_t>(k_blocks) * BS;
  const int64_t dy_cols = static_cast<int64_t>(n_blocks) * BS;
  const int64_t chunks = (m + KC - 1) / KC;
  float acc[TILES][4] = {};

  auto stage = [&](int64_t chunk, int buffer) {
    for (int i = threadIdx.x; i < KC * BS / kVec; i += kThreads) {
      const int r = i / (BS / kVec), k = (i % (BS / kVec)) * kVec;
      const int64_t row = chunk * KC + r;
      const int64_t safe = row < m ? row : 0;
      cp_async_16(xs + (buffer * KC + r) * LD + k, x + safe * x_cols + r0 + k, row < m ? 16 : 0);
      cp_async_16(ds + (buffer * KC + r) * LD + k, dy + safe * dy_cols + c0 + k, row < m ? 16 : 0);
    }
    cp_async_commit();
  };

  if (chunks > 0) stage(0, 0);
  for (int64_t c = 0; c < chunks; ++c) {
    const int buffer = static_cast<int>(c & 1);
    if (c + 1 < chunks) {
      stage(c + 1, buffer ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* xb = xs + buffer * KC * LD;
    const T* db = ds + buffer * KC * LD;
#pragma unroll
    for (int kk = split * 16; kk < KC; kk += 16 * KSPLIT) {
      uint32_t fa[8];
      load_a16<T, true>(fa, xb + kk * LD + wr, LD, lane);
#pragma unroll
      for (int j = 0; j < TILES; j += 2) mma_n16<T>(acc[j], acc[j + 1], fa, db + kk * LD + wc + j * 8, LD, false, lane);
    }
    __syncthreads();
  }
  // Each split parks its tile's sums; thread e then adds the KSPLIT of element e.
  float* sums = reinterpret_cast<float*>(smem);  // [KSPLIT][BS][BS]; the stages are no longer read
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < TILES; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = wr + g + 8 * (i / 2), n = wc + j * 8 + 2 * t + i % 2;
      sums[(split * BS + r) * BS + n] = acc[j][i];
    }
  }
  __syncthreads();
  T* out = dw + static_cast<int64_t>(i_block) * BS * BS;
  for (int e = threadIdx.x; e < BS * BS; e += kThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < KSPLIT; ++q) sum += sums[q * BS * BS + e];
    out[e] = from_float<T>(sum);
  }
}

// dw for one block per thread block: PATCHES = BS*BS/16 patches of 4 x 4; the 256 threads are PHASES =
// 256 / PATCHES groups, group p taking rows p, p + PHASES, ... of each staged chunk.
template <typename T, int BS>
__global__ void __launch_bounds__(kThreads, kSimtBlocksPerSm)
    weight_grad_simt(const T* __restrict__ x, const T* __restrict__ dy, int64_t m, int32_t k_blocks,
                     int32_t n_blocks, const int32_t* __restrict__ blocks, T* __restrict__ dw) {
  constexpr int CHUNK = 4096 / BS;
  constexpr int PATCHES = BS * BS / 16;
  constexpr int PHASES = kThreads / PATCHES > 0 ? kThreads / PATCHES : 1;
  constexpr int PX = BS / 4;
  __shared__ __align__(16) float xs[CHUNK][BS];
  __shared__ __align__(16) float ds[CHUNK][BS];
  const int i_block = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blocks[2 * i_block]) * BS;
  const int64_t c0 = static_cast<int64_t>(blocks[2 * i_block + 1]) * BS;
  const int64_t x_cols = static_cast<int64_t>(k_blocks) * BS;
  const int64_t dy_cols = static_cast<int64_t>(n_blocks) * BS;
  const int patch = threadIdx.x % PATCHES;
  const int phase = threadIdx.x / PATCHES;
  const int pr = (patch / PX) * 4, pc = (patch % PX) * 4;
  float acc[4][4] = {};
  for (int64_t start = 0; start < m; start += CHUNK) {
    __syncthreads();
    for (int i = threadIdx.x; i < CHUNK * BS; i += kThreads) {
      const int r = i / BS, k = i % BS;
      const int64_t row = start + r;
      xs[r][k] = row < m ? to_float(x[row * x_cols + r0 + k]) : 0.0f;
      ds[r][k] = row < m ? to_float(dy[row * dy_cols + c0 + k]) : 0.0f;
    }
    __syncthreads();
    if (phase < PHASES) {
      for (int r = phase; r < CHUNK; r += PHASES) {
        const float4 xv = *reinterpret_cast<const float4*>(&xs[r][pr]);
        const float4 dv = *reinterpret_cast<const float4*>(&ds[r][pc]);
        const float xa[4] = {xv.x, xv.y, xv.z, xv.w};
        const float da[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += xa[i] * da[j];
        }
      }
    }
  }
  // Add the phases' shares: each thread parks its patch in the (now free) staging memory.
  __syncthreads();
  float* park = &xs[0][0];  // kThreads * 16 floats = 4096 = CHUNK * BS
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) park[(i * 4 + j) * kThreads + threadIdx.x] = acc[i][j];
  }
  __syncthreads();
  T* out = dw + static_cast<int64_t>(i_block) * BS * BS;
  for (int e = threadIdx.x; e < BS * BS; e += kThreads) {
    const int row = e / BS, col = e % BS;
    const int p = (row / 4) * PX + col / 4;
    const int slot = (row % 4) * 4 + col % 4;
    float sum = 0.0f;
    for (int q = 0; q < PHASES; ++q) sum += park[slot * kThreads + q * PATCHES + p];
    out[e] = from_float<T>(sum);
  }
}

int status() { return static_cast<int>(cudaGetLastError()); }

// Which (type, block) pairs have tensor-core kernels: 16-bit types for blocks of 16-64, float32 (TF32) for the
// weight gradient at 16-64 and the products at 16 and 32.
template <typename T, int BS, bool kProduct>
constexpr bool has_tensor_core_kernel() {
  if (BS == 8) return false;
  return !std::is_same<T, float>::value || !kProduct || BS != 64;
}

template <typename T, int BS>
int launch_product(const void* a, int64_t m, int32_t a_blocks, int32_t outputs, const void* w, const int32_t* offsets,
                   const int32_t* partners, const int32_t* slots, int transpose_blocks, void* out, bool tensor_cores,
                   cudaStream_t stream) {
  const T* a_t = static_cast<const T*>(a);
  const T* w_t = static_cast<const T*>(w);
  T* out_t = static_cast<T*>(out);
  constexpr bool kHasMma = has_tensor_core_kernel<T, BS, true>();
  const int64_t tm = kHasMma && tensor_cores ? tensor_core_tile_rows(BS) : 4096 / BS;
  const int64_t blocks = (m + tm - 1) / tm * outputs;
  if (blocks > 0x7fffffff) return SPARSEFLOW_E_ARGUMENT;  // gridDim.x's limit
  const unsigned grid = static_cast<unsigned>(blocks);
  // 16-bit types always take tensor cores where there is a kernel; float32 only when TF32 is asked for.
  if constexpr (kHasMma) {
    if (!std::is_same<T, float>::value || tensor_cores) {
      product_mma<T, BS><<<grid, kThreads, 0, stream>>>(a_t, m, a_blocks, w_t, offsets, partners, slots,
                                                        transpose_blocks, out_t, outputs);
      return status();
    }
  }
  if constexpr (!kHasMma || std::is_same<T, float>::value) {
    product_simt<T, BS><<<grid, kThreads, 0, stream>>>(a_t, m, a_blocks, w_t, offsets, partners, slots,
                                                       transpose_blocks, out_t, outputs);
  }
  return status();
}

template <typename T>
int product_for_type(int32_t block, const void* a, int64_t m, int32_t a_blocks, int32_t outputs, const void* w,
                     const int32_t* offsets, const int32_t* partners, const int32_t* slots, int transpose_blocks,
                     void* out, bool tensor_cores, cudaStream_t stream) {
  switch (block) {
    case 8:
      return launch_product<T, 8>(a, m, a_blocks, outputs, w, offsets, partners, slots, transpose_blocks, out,
                                  tensor_cores, stream);
    case 16:
      return launch_product<T, 16>(a, m, a_blocks, outputs, w, offsets, partners, slots, transpose_blocks, out,
                                   tensor_cores, stream);
    case 32:
      return launch_product<T, 32>(a, m, a_blocks, outputs, w, offsets, partners, slots, transpose_blocks, out,
                                   tensor_cores, stream);
    case 64:
      return launch_product<T, 64>(a, m, a_blocks, outputs, w, offsets, partners, slots, transpose_blocks, out,
                                   tensor_cores, stream);
    default:
      return SPARSEFLOW_E_ARGUMENT;
  }
}

template <typename T, int BS>
int launch_weight_grad(const void* x, const void* dy, int64_t m, int32_t k_blocks, int32_t n_blocks,
                       const int32_t* blocks, int32_t nnz, void* dw, bool tensor_cores, cudaStream_t stream) {
  const T* x_t = static_cast<const T*>(x);
  const T* dy_t = static_cast<const T*>(dy);
  T* dw_t = static_cast<T*>(dw);
  constexpr bool kHasMma = has_tensor_core_kernel<T, BS, false>();
  if constexpr (kHasMma) {
    if (!std::is_same<T, float>::value || tensor_cores) {
      weight_grad_mma<T, BS><<<nnz, kThreads, 0, stream>>>(x_t, dy_t, m, k_blocks, n_blocks, blocks, dw_t);
      return status();
    }
  }
  if constexpr (!kHasMma || std::is_same<T, float>::value) {
    weight_grad_simt<T, BS><<<nnz, kThreads, 0, stream>>>(x_t, dy_t, m, k_blocks, n_blocks, blocks, dw_t);
  }
  return status();
}

template <typename T>
int weight_grad_for_type(int32_t block, const void* x, const void* dy, int64_t m, int32_t k_blocks, int32_t n_blocks,
                         const int32_t* blocks, int32_t nnz, void* dw, bool tensor_cores, cudaStream_t stream) {
  switch (block) {
    case 8:
      return launch_weight_grad<T, 8>(x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores, stream);
    case 16:
      return launch_weight_grad<T, 16>(x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores, stream);
    case 32:
      return launch_weight_grad<T, 32>(x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores, stream);
    case 64:
      return launch_weight_grad<T, 64>(x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores, stream);
    default:
      return SPARSEFLOW_E_ARGUMENT;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The tensor-core kernels are compiled for compute capability 8.0 and up only (bfloat16 mma, cp.async); on an older
// device their bodies are empty, so they are refused rather than run. 0 when they run here,
// SPARSEFLOW_E_ARGUMENT on an older device, the runtime's error when the device cannot be queried.
int tensor_core_kernels_status() {
  int device = 0, major = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (error != cudaSuccess) return static_cast<int>(error);
  return major >= 8 ? 0 : SPARSEFLOW_E_ARGUMENT;
}

}  // namespace
}  // namespace sparseflow

using namespace sparseflow;

namespace sparseflow {
namespace {

// Whether (dtype, block) runs on tensor cores, and if so whether it can here: 0 and *tensor_cores set when it
// can or need not; SPARSEFLOW_E_ALIGNMENT when the tensor-core kernels' 16-byte copies would be misaligned;
// SPARSEFLOW_E_ARGUMENT on a device older than compute capability 8.0; the runtime's error when the device cannot
// be queried.
int choose_tensor_cores(int dtype, int32_t block, bool product, const void* p, const void* q, bool* tensor_cores) {
  const bool half = dtype == SPARSEFLOW_FLOAT16 || dtype == SPARSEFLOW_BFLOAT16;
  const bool tf32_blocks = block == 16 || block == 32 || (!product && block == 64);
  *tensor_cores = block != 8 && (half || (dtype == SPARSEFLOW_FLOAT32_TF32 && tf32_blocks));
  // 16-bit products are refused misaligned at every block size, as they always were.
  if (product && half && (!aligned16(p) || !aligned16(q))) return SPARSEFLOW_E_ALIGNMENT;
  if (!*tensor_cores) return 0;
  if (!aligned16(p) || !aligned16(q)) return SPARSEFLOW_E_ALIGNMENT;
  return tensor_core_kernels_status();
}

}  // namespace
}  // namespace sparseflow

extern "C" int sparseflow_block_sparse_product(int dtype, const void* a, int64_t m, int32_t a_blocks, int32_t outputs,
                                               int32_t block, const void* w, const int32_t* offsets,
                                               const int32_t* partners, const int32_t* slots, int transpose_blocks,
                                               void* out, cudaStream_t stream) {
  if (m < 0 || a_blocks <= 0 || outputs <= 0) return SPARSEFLOW_E_ARGUMENT;
  if (dtype < SPARSEFLOW_FLOAT32 || dtype > SPARSEFLOW_FLOAT32_TF32) return SPARSEFLOW_E_ARGUMENT;
  if (m == 0) return 0;
  bool tensor_cores = false;
  const int supported = choose_tensor_cores(dtype, block, true, a, w, &tensor_cores);
  if (supported != 0) return supported;
  switch (dtype) {
    case SPARSEFLOW_FLOAT32:
    case SPARSEFLOW_FLOAT32_TF32:
      return product_for_type<float>(block, a, m, a_blocks, outputs, w, offsets, partners, slots, transpose_blocks, out,
                                     tensor_cores, stream);
    case SPARSEFLOW_FLOAT16:
      return product_for_type<__half>(block, a, m, a_blocks, outputs, w, offsets, partners, slots, transpose_blocks,
                                      out, tensor_cores, stream);
    default:
      return product_for_type<__nv_bfloat16>(block, a, m, a_blocks, outputs, w, offsets, partners, slots,
                                             transpose_blocks, out, tensor_cores, stream);
  }
}

extern "C" int sparseflow_block_sparse_weight_grad(int dtype, const void* x, const void* dy, int64_t m,
                                                   int32_t k_blocks, int32_t n_blocks, int32_t block,
                                                   const int32_t* blocks, int32_t nnz, void* dw, cudaStream_t stream) {
  if (m < 0 || k_blocks <= 0 || n_blocks <= 0 || nnz < 0) return SPARSEFLOW_E_ARGUMENT;
  if (dtype < SPARSEFLOW_FLOAT32 || dtype > SPARSEFLOW_FLOAT32_TF32) return SPARSEFLOW_E_ARGUMENT;
  if (nnz == 0) return 0;
  bool tensor_cores = false;
  const int supported = choose_tensor_cores(dtype, block, false, x, dy, &tensor_cores);
  if (supported != 0) return supported;
  switch (dtype) {
    case SPARSEFLOW_FLOAT32:
    case SPARSEFLOW_FLOAT32_TF32:
      return weight_grad_for_type<float>(block, x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores, stream);
    case SPARSEFLOW_FLOAT16:
      return weight_grad_for_type<__half>(block, x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores, stream);
    default:
      return weight_grad_for_type<__nv_bfloat16>(block, x, dy, m, k_blocks, n_blocks, blocks, nnz, dw, tensor_cores,
                                                 stream);
  }
}

extern "C" int32_t sparseflow_block_plan(const uint8_t* layout, int32_t k_blocks, int32_t n_blocks, int by_column,
                                         int32_t* offsets, int32_t* partners, int32_t* slots) {
  return build_block_plan(layout, k_blocks, n_blocks, by_column != 0, offsets, partners, slots);
}

extern "C" int sparseflow_block_sparse_check_plan(const int32_t* offsets, const int32_t* partners,
                                                  const int32_t* slots, int32_t members, int32_t outputs,
                                                  int32_t a_blocks, int32_t w_blocks) {
  if (offsets == nullptr || outputs <= 0 || members < 0 || a_blocks <= 0 || w_blocks < 0) return SPARSEFLOW_E_PLAN;
  if (offsets[0] != 0 || offsets[outputs] != w_blocks || w_blocks > members) return SPARSEFLOW_E_PLAN;
  for (int32_t o = 0; o < outputs; ++o) {
    if (offsets[o + 1] < offsets[o]) return SPARSEFLOW_E_PLAN;
  }
  if (w_blocks > 0 && (partners == nullptr || slots == nullptr)) return SPARSEFLOW_E_PLAN;
  for (int32_t e = 0; e < w_blocks; ++e) {
    if (partners[e] < 0 || partners[e] >= a_blocks || slots[e] < 0 || slots[e] >= w_blocks) return SPARSEFLOW_E_PLAN;
  }
  return 0;
}

extern "C" int sparseflow_block_sparse_check_blocks(const int32_t* blocks, int32_t nnz, int32_t k_blocks,
                                                    int32_t n_blocks) {
  if (nnz < 0 || (nnz > 0 && blocks == nullptr)) return SPARSEFLOW_E_PLAN;
  for (int32_t i = 0; i < nnz; ++i) {
    const int32_t r = blocks[2 * i], c = blocks[2 * i + 1];
    if (r < 0 || r >= k_blocks || c < 0 || c >= n_blocks) return SPARSEFLOW_E_PLAN;
  }
  return 0;
}
