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

// Entries a lane reads ahead: it loads the ids and gains of up to kLoadsInFlight entries, then their rows (every
// row load issued before the first add, so up to kLoadsInFlight row loads are in flight per lane), then adds them
// one by one in entry order.
constexpr int kLoadsInFlight = 8;

// out_row[c, c + V) for c = first*V, (first + step)*V, ... < dim of one bag: the sum of
// gains[k] * table[cols[k], c:c+V] over the bag's entries [begin, end) of a row-sorted COO. Summation order:
// acc = 0, then acc += gains[k] * row_k for k = begin, begin + 1, ..., end - 1 (entries whose id is outside
// [0, vocab) skipped and never read); the read-ahead changes when rows are loaded, not the order of the adds, so
// every kernel adding a bag's entries one by one in entry order gets the same bits. dim must be a multiple of V.
template <int V>
SF_HD void bag_sum(const float* table, const int64_t* cols, const float* gains, int64_t begin, int64_t end,
                   int64_t vocab, int64_t dim, int64_t first, int64_t step, float* out_row) {
  for (int64_t c = first * V; c < dim; c += step * V) {
    float acc[V] = {};
    for (int64_t k0 = begin; k0 < end; k0 += kLoadsInFlight) {
      float g[kLoadsInFlight];
      float v[kLoadsInFlight][V];
      bool counts[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int64_t col = k0 + u < end ? cols[k0 + u] : -1;
        counts[u] = col >= 0 && col < vocab;
        g[u] = counts[u] ? gains[k0 + u] : 0.0f;
        if (counts[u]) {
          load_values<V>(table + col * dim + c, v[u]);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) v[u][i] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        if (!counts[u]) continue;
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += g[u] * v[u][i];
      }
    }
    for (int i = 0; i < V; ++i) out_row[c + i] = acc[i];
  }
}

// The bag offsets of a row-sorted COO, written by one thread per position k in [0, n]: offsets[b] = the first
// position whose row is >= b, for b in [0, sample_count] (bag b's entries are [offsets[b], offsets[b + 1]);
// offsets[sample_count] is the first padding entry). Position k writes the b in (row[k - 1], row[k]] (rows clamped
// to [-1, sample_count], row[-1] = -1, row[n] = sample_count): for sorted rows every offset is written exactly
// once, and only offsets in [0, sample_count] are ever written, whatever the rows.
SF_HD void write_bag_offsets(const int32_t* rows, int64_t n, int32_t sample_count, int64_t k, int64_t* offsets) {
  auto clamped = [sample_count](int32_t row) -> int64_t {
    return row < -1 ? -1 : (row > sample_count ? sample_count : row);
  };
  const int64_t previous = k == 0 ? -1 : clamped(rows[k - 1]);
  const int64_t current = k == n ? sample_count : clamped(rows[k]);
  for (int64_t b = previous + 1; b <= current; ++b) offsets[b] = k;
}

// The sort key of an entry for the table gradient: its id, or `vocab` (sorted last, then dropped) for an
// entry that does not count, so padding ids never appear among the gradient's ids.
SF_HD int64_t grad_key(int32_t row, int64_t col, int32_t sample_count, int64_t vocab) {
  return entry_counts(row, col, sample_count, vocab) ? col : vocab;
}

// d_row[c, c + V) for c = first*V, (first + step)*V, ... < dim: the sum over the entries [begin, end)
// of the id-sorted order (`order[j]` = original entry) of gains[k] * out_grad[rows[k], c:c+V]. Summation order:
// acc = 0, then acc += gains[k] * out_grad[rows[k]] for j = begin, ..., end - 1 (read ahead as bag_sum does).
template <int V>
SF_HD void segment_grad_sum(const float* out_grad, const int32_t* rows, const float* gains,
                            const int64_t* order, int64_t begin, int64_t end, int64_t dim, int64_t first,
                            int64_t step, float* d_row) {
  for (int64_t c = first * V; c < dim; c += step * V) {
    float acc[V] = {};
    for (int64_t j0 = begin; j0 < end; j0 += kLoadsInFlight) {
      const int count = end - j0 < kLoadsInFlight ? static_cast<int>(end - j0) : kLoadsInFlight;
      float g[kLoadsInFlight];
      float v[kLoadsInFlight][V];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        if (u < count) {
          const int64_t k = order[j0 + u];
          g[u] = gains[k];
          load_values<V>(out_grad + static_cast<int64_t>(rows[k]) * dim + c, v[u]);
        } else {
          g[u] = 0.0f;
#pragma unroll
          for (int i = 0; i < V; ++i) v[u][i] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        if (u >= count) break;
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += g[u] * v[u][i];
      }
    }
    for (int i = 0; i < V; ++i) d_row[c + i] = acc[i];
  }
}

// Long segments (the entries of a hot id) are summed in chunks. Chunk j is the sorted positions
// [j * chunk, (j + 1) * chunk); a segment with more than `chunk` entries is long: each chunk it touches sums its
// part of it into a partial row (one lane group per chunk, in parallel), and the segment's row is then the sum of
// those partials in chunk order (a second pass). A chunk holds parts of at most two long segments (a long one
// cannot fit inside a chunk): slot 0 is the part of the segment holding the chunk's first position, slot 1 the
// part of the one holding its last position when that is another long segment.
SF_HD int64_t grad_chunk_entries(int64_t dim) { return dim > 256 ? dim : 256; }

// The segment u < num_unique holding sorted position pos (starts ascending, segment u =
// [starts[u], starts[u] + counts[u])), or -1 when pos lies past them (the run of entries that do not count).
SF_HD int64_t segment_of(const int64_t* starts, const int64_t* counts, int64_t num_unique, int64_t pos) {
  int64_t low = 0, high = num_unique;  // the first segment starting after pos
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (starts[mid] <= pos) low = mid + 1; else high = mid;
  }
  const int64_t u = low - 1;
  return u >= 0 && pos < starts[u] + counts[u] ? u : -1;
}

// The partial slot in chunk `chunk` of the long segment starting at `start`: 1 in its first chunk when it starts
// past that chunk's first position (it then holds the chunk's last position), else 0.
SF_HD int chunk_slot(int64_t start, int64_t chunk, int64_t chunk_entries) {
  return chunk == start / chunk_entries && start % chunk_entries != 0 ? 1 : 0;
}

// d_row[c, c + V) (same lanes as segment_grad_sum) of the long segment [start, start + count): its chunks'
// partials (partials [2 * chunks, dim]) added in chunk order: acc = 0, acc += partial(chunk) for chunk =
// start / chunk_entries, ..., (start + count - 1) / chunk_entries.
template <int V>
SF_HD void add_chunk_partials(const float* partials, int64_t start, int64_t count, int64_t chunk_entries,
                              int64_t dim, int64_t first, int64_t step, float* d_row) {
  const int64_t first_chunk = start / chunk_entries, last_chunk = (start + count - 1) / chunk_entries;
  for (int64_t c = first * V; c < dim; c += step * V) {
    float acc[V] = {};
    for (int64_t chunk = first_chunk; chunk <= last_chunk; ++chunk) {
      float v[V];
      load_values<V>(partials + (2 * chunk + chunk_slot(start, chunk, chunk_entries)) * dim + c, v);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += v[i];
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
