// The index plan the block-sparse kernels consume, built on the host from a boolean layout; shared by
// the CUDA library and the host build the CPU tests run.
//
// Blocks are numbered in row-major layout order (np.argwhere order), so w[i] is the i-th True of the
// layout. A plan groups them by output:
//   by column (y = x @ W, and the blocks dw is computed for): output o = block column c, members the
//     blocks (r, c) for ascending r, partner r;
//   by row (dx = dy @ W^T): output o = block row r, members (r, c) for ascending c, partner c.
// offsets [outputs + 1] delimit each output's members in partners/slots [nnz]; slots[e] is the
// member's index into w.
#ifndef SPARSEFLOW_BLOCK_PLAN_H_
#define SPARSEFLOW_BLOCK_PLAN_H_

#include <stdint.h>

namespace sparseflow {

inline int32_t build_block_plan(const uint8_t* layout, int32_t k_blocks, int32_t n_blocks, bool by_column,
                                int32_t* offsets, int32_t* partners, int32_t* slots) {
  const int32_t outputs = by_column ? n_blocks : k_blocks;
  for (int32_t o = 0; o <= outputs; ++o) offsets[o] = 0;
  int32_t nnz = 0;
  for (int32_t r = 0; r < k_blocks; ++r) {
    for (int32_t c = 0; c < n_blocks; ++c) {
      if (layout[static_cast<int64_t>(r) * n_blocks + c]) {
        ++offsets[(by_column ? c : r) + 1];
        ++nnz;
      }
    }
  }
  for (int32_t o = 0; o < outputs; ++o) offsets[o + 1] += offsets[o];
  // Second pass in row-major order: members of an output arrive in ascending partner order.
  int32_t slot = 0;
  int32_t* fill = new int32_t[outputs > 0 ? outputs : 1];
  for (int32_t o = 0; o < outputs; ++o) fill[o] = offsets[o];
  for (int32_t r = 0; r < k_blocks; ++r) {
    for (int32_t c = 0; c < n_blocks; ++c) {
      if (!layout[static_cast<int64_t>(r) * n_blocks + c]) continue;
      const int32_t o = by_column ? c : r;
      partners[fill[o]] = by_column ? r : c;
      slots[fill[o]] = slot++;
      ++fill[o];
    }
  }
  delete[] fill;
  return nnz;
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_BLOCK_PLAN_H_
