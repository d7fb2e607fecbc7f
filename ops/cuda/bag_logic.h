// Per-bag and per-segment logic of the embedding-bag kernels, shared by the CUDA kernels and by the
// host build the CPU tests run (ops/cuda/host_reference.cc): one source for both, so the CPU tests
// check the same index arithmetic and accumulation order the GPU runs.
//
// A lane/stride pair splits the `dim` values of a row between threads: a GPU warp calls these with
// (lane, 32) per value group, the host with (0, 1).
#ifndef SPARSEFLOW_BAG_LOGIC_H_
#define SPARSEFLOW_BAG_LOGIC_H_

#include <stdint.h>

#if defined(__CUDACC__)
#define SF_HD __host__ __device__ __forceinline__
#else
#define SF_HD inline
#endif

namespace sparseflow {

// First position in sorted `rows[0, n)` whose value is >= `row`.
SF_HD int64_t lower_bound_row(const int32_t* rows, int64_t n, int32_t row) {
  int64_t low = 0, high = n;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (rows[mid] < row) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

// An entry takes part when its row is a sample (padding rows equal sample_count) and its id a table row.
// Entries failing this are never read from memory; `sparseflow_embedding_bag_check` reports them.
SF_HD bool entry_counts(int32_t row, int64_t col, int32_t sample_count, int64_t vocab) {
  return row >= 0 && row < sample_count && col >= 0 && col < vocab;
}

// V consecutive floats from p (p aligned to V floats): one 16-byte load on the GPU when V is 4.
template <int V>
SF_HD void load_values(const float* p, float* v) {
#if defined(__CUDA_ARCH__)
  if constexpr (V == 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  } else {
    for (int i = 0; i < V; ++i) v[i] = p[i];
  }
#else
  for (int i = 0; i < V; ++i) v[i] = p[i];
#endif
}

// out_row[c, c + V) for c = first*V, (first + step)*V, ... < dim of one bag: the sum of
// gains[k] * table[cols[k], c:c+V] over the bag's entries [begin, end) of a row-sorted COO, in entry
// order. dim must be a multiple of V.
template <int V>
SF_HD void bag_sum(const float* table, const int64_t* cols, const float* gains, int64_t begin, int64_t end,
                   int64_t vocab, int64_t dim, int64_t first, int64_t step, float* out_row) {
  for (int64_t c = first * V; c < dim; c += step * V) {
    float acc[V] = {};
    for (int64_t k = begin; k < end; ++k) {
      const int64_t col = cols[k];
      if (col < 0 || col >= vocab) continue;
      const float g = gains[k];
      float v[V];
      load_values<V>(table + col * dim + c, v);
      for (int i = 0; i < V; ++i) acc[i] += g * v[i];
    }
    for (int i = 0; i < V; ++i) out_row[c + i] = acc[i];
  }
}

// The sort key of an entry for the table gradient: its id, or `vocab` (sorted last, then dropped) for an
// entry that does not count, so padding ids never appear among the gradient's ids.
SF_HD int64_t grad_key(int32_t row, int64_t col, int32_t sample_count, int64_t vocab) {
  return entry_counts(row, col, sample_count, vocab) ? col : vocab;
}

// d_row[c, c + V) for c = first*V, (first + step)*V, ... < dim: the sum over the entries [begin, end)
// of the id-sorted order (`order[j]` = original entry) of gains[k] * out_grad[rows[k], c:c+V].
template <int V>
SF_HD void segment_grad_sum(const float* out_grad, const int32_t* rows, const float* gains,
                            const int64_t* order, int64_t begin, int64_t end, int64_t dim, int64_t first,
                            int64_t step, float* d_row) {
  for (int64_t c = first * V; c < dim; c += step * V) {
    float acc[V] = {};
    for (int64_t j = begin; j < end; ++j) {
      const int64_t k = order[j];
      const float g = gains[k];
      float v[V];
      load_values<V>(out_grad + static_cast<int64_t>(rows[k]) * dim + c, v);
      for (int i = 0; i < V; ++i) acc[i] += g * v[i];
    }
    for (int i = 0; i < V; ++i) d_row[c + i] = acc[i];
  }
}

// dot(out_grad[row], table[col]) over dim: the gradient of one entry's gain; 0 for an entry that does not
// count. Lanes (first, step) each sum a strided share; the caller adds the shares.
SF_HD float gain_grad_share(const float* out_grad, const float* table, int32_t row, int64_t col,
                            int32_t sample_count, int64_t vocab, int64_t dim, int64_t first, int64_t step) {
  if (!entry_counts(row, col, sample_count, vocab)) return 0.0f;
  float acc = 0.0f;
  for (int64_t d = first; d < dim; d += step) acc += out_grad[static_cast<int64_t>(row) * dim + d] * table[col * dim + d];
  return acc;
}

// Number of bits that hold every key in [0, vocab]: the radix sort looks at these bits only.
SF_HD int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_BAG_LOGIC_H_
