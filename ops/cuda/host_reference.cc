// A host (CPU) build of the kernels' index logic: the same bag_logic.h and block_plan.h functions the CUDA
// kernels call, driven by plain loops in the order the GPU's threads take. The CPU tests
// (tests/test_gpu_kernels.py) build it with the C++ compiler and check it against numpy references, so the
// index plans and per-bag arithmetic are verified where no GPU is present. Float32 only; the block
// products take the plan exactly as the CUDA kernels do.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "bag_logic.h"
#include "block_plan.h"

using namespace sparseflow;

namespace {

int lanes_per_row(int64_t chunks) {
  int lanes = 1;
  while (lanes < 32 && lanes < chunks) lanes *= 2;
  return lanes;
}

}  // namespace

extern "C" {

// The sorted-rows forward: every (bag, lane) of the GPU grid, one after another.
int sparseflow_host_embedding_bag_forward(const float* table, int64_t vocab, int64_t dim, const int32_t* row_ids,
                                          const int64_t* col_ids, const float* gains, int64_t n,
                                          int32_t sample_count, float* out) {
  for (int64_t k = 0; k + 1 < n; ++k) {
    if (row_ids[k] > row_ids[k + 1]) return -1;  // the sorted kernel's precondition
  }
  const bool vec = dim % 4 == 0;
  const int lanes = lanes_per_row(vec ? dim / 4 : dim);
  std::vector<int64_t> offsets(static_cast<size_t>(sample_count) + 1);
  for (int64_t k = 0; k <= n; ++k) write_bag_offsets(row_ids, n, sample_count, k, offsets.data());
  for (int32_t bag = 0; bag < sample_count; ++bag) {
    const int64_t begin = offsets[bag], end = offsets[bag + 1];
    for (int lane = 0; lane < lanes; ++lane) {
      if (vec) {
        bag_sum<4>(table, col_ids, gains, begin, end, vocab, dim, lane, lanes, out + bag * dim);
      } else {
        bag_sum<1>(table, col_ids, gains, begin, end, vocab, dim, lane, lanes, out + bag * dim);
      }
    }
  }
  return 0;
}

// The gradient's ids and rows: a stable sort by grad_key stands for the (stable) radix sort, then the
// run-length encoding and the per-id segment sums. Returns the number of distinct ids.
int64_t sparseflow_host_embedding_bag_grad(const float* out_grad, int64_t dim, const int32_t* row_ids,
                                           const int64_t* col_ids, const float* gains, int64_t n,
                                           int32_t sample_count, int64_t vocab, int64_t* unique_ids,
                                           float* d_rows) {
  std::vector<int64_t> keys(n), order(n);
  for (int64_t k = 0; k < n; ++k) keys[k] = grad_key(row_ids[k], col_ids[k], sample_count, vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  int64_t unique = 0;
  const bool vec = dim % 4 == 0;
  const int lanes = lanes_per_row(vec ? dim / 4 : dim);
  for (int64_t begin = 0; begin < n;) {
    const int64_t key = keys[order[begin]];
    int64_t end = begin;
    while (end < n && keys[order[end]] == key) ++end;
    if (key != vocab) {
      unique_ids[unique] = key;
      for (int lane = 0; lane < lanes; ++lane) {
        if (vec) {
          segment_grad_sum<4>(out_grad, row_ids, gains, order.data(), begin, end, dim, lane, lanes, d_rows + unique * dim);
        } else {
          segment_grad_sum<1>(out_grad, row_ids, gains, order.data(), begin, end, dim, lane, lanes, d_rows + unique * dim);
        }
      }
      ++unique;
    }
    begin = end;
  }
  return unique;
}

void sparseflow_host_embedding_bag_grad_gains(const float* out_grad, const float* table, int64_t vocab, int64_t dim,
                                              const int32_t* row_ids, const int64_t* col_ids, int64_t n,
                                              int32_t sample_count, float* d_gains) {
  for (int64_t k = 0; k < n; ++k) {
    float sum = 0.0f;
    for (int lane = 0; lane < 32; ++lane) {
      sum += gain_grad_share(out_grad, table, row_ids[k], col_ids[k], sample_count, vocab, dim, lane, 32);
    }
    d_gains[k] = sum;
  }
}

int32_t sparseflow_host_block_plan(const uint8_t* layout, int32_t k_blocks, int32_t n_blocks, int by_column,
                                   int32_t* offsets, int32_t* partners, int32_t* slots) {
  return build_block_plan(layout, k_blocks, n_blocks, by_column != 0, offsets, partners, slots);
}

// out[:, o] = sum over the plan members of output o of a[:, partner] @ w[slot] (transposed when asked):
// the product kernels' walk over a plan, in float32 with the same member order.
void sparseflow_host_block_product(const float* a, int64_t m, int32_t a_blocks, int32_t outputs, int32_t block,
                                   const float* w, const int32_t* offsets, const int32_t* partners,
                                   const int32_t* slots, int transpose_blocks, float* out) {
  const int64_t a_cols = static_cast<int64_t>(a_blocks) * block;
  const int64_t out_cols = static_cast<int64_t>(outputs) * block;
  std::vector<float> acc(block);
  for (int32_t o = 0; o < outputs; ++o) {
    for (int64_t row = 0; row < m; ++row) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int32_t e = offsets[o]; e < offsets[o + 1]; ++e) {
        const float* x = a + row * a_cols + static_cast<int64_t>(partners[e]) * block;
        const float* b = w + static_cast<int64_t>(slots[e]) * block * block;
        for (int32_t k = 0; k < block; ++k) {
          for (int32_t j = 0; j < block; ++j) acc[j] += x[k] * (transpose_blocks ? b[j * block + k] : b[k * block + j]);
        }
      }
      std::copy(acc.begin(), acc.end(), out + row * out_cols + static_cast<int64_t>(o) * block);
    }
  }
}

}  // extern "C"
