// Block-sparse matmul kernels, independent of TensorFlow.
//
// W [K, N] exists only at nnz square blocks of edge BS, stored as w [nnz, BS, BS]. A product is
// described by groups: output block g (a block column of y, or a block row of dx) adds up, in the
// group's order, the blocks group_blocks[offsets[g] .. offsets[g + 1]), each multiplying the
// input's block column source[b]:
//
//   product:      out[:, g] = sum_b in[:, source[b]] @ w'[b]      (w' = w, or w transposed)
//   weight grad:  dw[b]     = x[:, row[b]]^T @ dy[:, col[b]]
//
// y = x @ W groups by output column (source = the block's row), dx = dy @ W^T by input row
// (source = the block's column, blocks transposed). Every output element is summed by one thread
// in a fixed order, so results do not depend on the thread count.
#ifndef SPARSEFLOW_OPS_NATIVE_BLOCK_SPARSE_KERNELS_H_
#define SPARSEFLOW_OPS_NATIVE_BLOCK_SPARSE_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "embedding_bag_kernels.h"  // ParallelFor

namespace sparseflow {

// Rows of the input a product task handles: its panel of x stays in L2 while every group's blocks
// pass over it.
constexpr int64_t kPanelRows = 64;
// Rows of x and dy a weight-gradient step takes at a time (a chunk of dy, all columns, in L2).
constexpr int64_t kGradChunkRows = 64;

// The widest vector the build targets, at most one block row. GCC vector extensions: the
// accumulators below are plain local variables, which the compiler keeps in registers.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

template <typename T, int BS>
struct Lanes {
  static constexpr int kRowBytes = BS * static_cast<int>(sizeof(T));
  static constexpr int kBytes = kRowBytes < kVectorBytes ? kRowBytes : kVectorBytes;
  typedef T Vector __attribute__((vector_size(kBytes)));
  static constexpr int kWidth = kBytes / static_cast<int>(sizeof(T));
  static constexpr int kPerRow = BS / kWidth;  // vectors per block row
};

template <typename V, typename T>
inline V LoadVector(const T* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}

template <typename V, typename T>
inline void StoreVector(T* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

// Rows per register tile: the accumulators take 8 vector registers, the others hold a block row.
template <typename T, int BS>
constexpr int TileRows() {
  constexpr int rows = 8 / Lanes<T, BS>::kPerRow;
  return rows < 1 ? 1 : rows;
}

// The weight gradient's tiles: 16 accumulators where there are 32 vector registers (AVX-512).
template <typename T, int BS>
constexpr int GradTileRows() {
#if defined(__AVX512F__)
  constexpr int rows = 16 / Lanes<T, BS>::kPerRow;
#else
  constexpr int rows = 8 / Lanes<T, BS>::kPerRow;
#endif
  return rows < 1 ? 1 : (rows > BS ? BS : rows);
}

// out[R rows, BS] = sum over the group's blocks b of in[R rows, block column source[b]] @ blocks[b].
template <typename T, int BS, int R>
inline void GroupTile(const T* __restrict in, int64_t in_stride, const T* __restrict blocks,
                      const int32_t* group_begin, const int32_t* group_end, const int32_t* source, T* __restrict out,
                      int64_t out_stride) {
  using L = Lanes<T, BS>;
  using V = typename L::Vector;
  constexpr int C = L::kPerRow;
  V acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) acc[i][c] = V{};
  for (const int32_t* p = group_begin; p != group_end; ++p) {
    const T* __restrict a = in + static_cast<int64_t>(source[*p]) * BS;
    const T* __restrict w = blocks + static_cast<int64_t>(*p) * BS * BS;
    for (int k = 0; k < BS; ++k) {
      V w_row[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) w_row[c] = LoadVector<V>(w + k * BS + c * L::kWidth);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const T scalar = a[i * in_stride + k];
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) acc[i][c] += w_row[c] * scalar;
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) StoreVector(out + i * out_stride + c * L::kWidth, acc[i][c]);
}

template <typename T, int BS>
void BlockProduct(const T* in, int64_t rows, int64_t in_cols, const T* blocks, const int32_t* offsets,
                  const int32_t* group_blocks, const int32_t* source, int64_t groups, T* out,
                  const ParallelFor& parallel_for) {
  constexpr int R = TileRows<T, BS>();
  const int64_t out_cols = groups * BS;
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  const int64_t nnz = offsets[groups];
  const int64_t cost = std::max<int64_t>(1, kPanelRows * BS * BS * nnz / 8 + kPanelRows * out_cols);
  parallel_for(panels, cost, [&](int64_t begin, int64_t end) {
    for (int64_t panel = begin; panel < end; ++panel) {
      const int64_t first = panel * kPanelRows;
      const int64_t last = std::min(rows, first + kPanelRows);
      for (int64_t g = 0; g < groups; ++g) {
        const int32_t* group_begin = group_blocks + offsets[g];
        const int32_t* group_end = group_blocks + offsets[g + 1];
        int64_t i = first;
        for (; i + R <= last; i += R) {
          GroupTile<T, BS, R>(in + i * in_cols, in_cols, blocks, group_begin, group_end, source,
                              out + i * out_cols + g * BS, out_cols);
        }
        for (; i < last; ++i) {
          GroupTile<T, BS, 1>(in + i * in_cols, in_cols, blocks, group_begin, group_end, source,
                              out + i * out_cols + g * BS, out_cols);
        }
      }
    }
  });
}

// blocks [nnz, BS, BS] -> each block transposed, for dx = dy @ W^T.
template <typename T, int BS>
void TransposeBlocks(const T* blocks, int64_t nnz, T* transposed, const ParallelFor& parallel_for) {
  parallel_for(nnz, BS * BS, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const T* src = blocks + b * BS * BS;
      T* dst = transposed + b * BS * BS;
      for (int i = 0; i < BS; ++i)
        for (int j = 0; j < BS; ++j) dst[j * BS + i] = src[i * BS + j];
    }
  });
}

// dw[R rows, BS] += x[m, R columns]^T (outer) dy[m, BS columns], summed over `count` rows m.
template <typename T, int BS, int R>
inline void OuterTile(const T* __restrict x, int64_t x_stride, const T* __restrict dy, int64_t dy_stride,
                      int64_t count, T* __restrict dw) {
  using L = Lanes<T, BS>;
  using V = typename L::Vector;
  constexpr int C = L::kPerRow;
  V acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) acc[i][c] = LoadVector<V>(dw + i * BS + c * L::kWidth);
  for (int64_t m = 0; m < count; ++m) {
    V dy_row[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) dy_row[c] = LoadVector<V>(dy + m * dy_stride + c * L::kWidth);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const T scalar = x[m * x_stride + i];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[i][c] += dy_row[c] * scalar;
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) StoreVector(dw + i * BS + c * L::kWidth, acc[i][c]);
}

// Copies rows [count, BS] of a matrix with `stride` columns into a contiguous buffer.
template <typename T, int BS>
inline void PackRows(const T* source, int64_t stride, int64_t count, T* packed) {
  for (int64_t m = 0; m < count; ++m) std::copy(source + m * stride, source + m * stride + BS, packed + m * BS);
}

// dw[b] = x[:, block_row[b]]^T @ dy[:, block_col[b]]. A task is a range of block rows of W
// (row_offsets: the blocks in row-major order). Rows are taken in chunks, and each chunk of an x
// panel and of dy's block column is packed contiguously first: the tiles then stream from L1
// instead of touching a new cache line (and page) per row. Each dw[b] adds its chunks in row order
// whatever the task split.
template <typename T, int BS>
void BlockWeightGrad(const T* x, const T* dy, int64_t rows, int64_t x_cols, int64_t dy_cols, const int32_t* block_row,
                     const int32_t* block_col, const int32_t* row_offsets, int64_t block_rows, T* dw,
                     const ParallelFor& parallel_for) {
  constexpr int R = GradTileRows<T, BS>();
  static_assert(BS % R == 0, "tile rows must divide the block edge");
  const int64_t nnz = row_offsets[block_rows];
  const int64_t per_row = nnz / std::max<int64_t>(1, block_rows) + 1;
  const int64_t cost = std::max<int64_t>(1, rows * BS * BS * per_row / 8);
  parallel_for(block_rows, cost, [&](int64_t begin, int64_t end) {
    std::vector<T> x_packed(kGradChunkRows * BS);
    std::vector<T> dy_packed(kGradChunkRows * BS);
    std::fill(dw + static_cast<int64_t>(row_offsets[begin]) * BS * BS,
              dw + static_cast<int64_t>(row_offsets[end]) * BS * BS, T(0));
    // Chunks outermost: a chunk's rows of dy stay in L2 while every block of the task reads its
    // columns (block by block they would come from memory, one strided row at a time).
    for (int64_t m0 = 0; m0 < rows; m0 += kGradChunkRows) {
      const int64_t count = std::min(kGradChunkRows, rows - m0);
      for (int64_t r = begin; r < end; ++r) {
        if (row_offsets[r] == row_offsets[r + 1]) continue;
        PackRows<T, BS>(x + m0 * x_cols + r * BS, x_cols, count, x_packed.data());
        for (int32_t b = row_offsets[r]; b < row_offsets[r + 1]; ++b) {
          T* block = dw + static_cast<int64_t>(b) * BS * BS;
          PackRows<T, BS>(dy + m0 * dy_cols + static_cast<int64_t>(block_col[b]) * BS, dy_cols, count,
                          dy_packed.data());
          for (int i = 0; i < BS; i += R) {
            OuterTile<T, BS, R>(x_packed.data() + i, BS, dy_packed.data(), BS, count, block + i * BS);
          }
        }
      }
    }
  });
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_BLOCK_SPARSE_KERNELS_H_
