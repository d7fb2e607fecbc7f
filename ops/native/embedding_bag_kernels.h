// Embedding-bag kernels over a COO batch, independent of TensorFlow.
//
// A batch is N entries (row_ids[k], col_ids[k], gains[k]) and a table [vocab, dim].
// Entries whose row is `samples` are padding and are skipped everywhere.
//
//   forward:     out[r]        = sum_{k: row k == r} gains[k] * table[col k]         [samples, dim]
//   table grad:  d_table[id]   = sum_{k: col k == id} gains[k] * d_out[row k]         one row per distinct id
//   gains grad:  d_gains[k]    = <d_out[row k], table[col k]>                         0 for padding
//
// Every output element is computed by one thread, from its entries in their input order, so
// results are bitwise the same for any thread count. Work is spread by a caller-supplied
// ParallelFor (TensorFlow's CPU pool in the op binding).
#ifndef SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_KERNELS_H_
#define SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace sparseflow {

// Calls work(begin, end) over disjoint ranges covering [0, count); cost_per_unit in cycles guides
// how finely the range is split.
using ParallelFor =
    std::function<void(int64_t count, int64_t cost_per_unit, const std::function<void(int64_t, int64_t)>& work)>;

// Entries grouped by output row: the entries of row r are order[offsets[r] .. offsets[r + 1]),
// or the positions themselves when `order` is empty (entries already sorted by row, as
// ops.to_coo and ops.pad_coo write them). Row `samples` collects the padding.
struct RowGroups {
  std::vector<int64_t> offsets;  // [samples + 2]
  std::vector<int64_t> order;    // [N] or empty
  int64_t bad_col = -1;          // first entry whose col is outside [0, vocab), else -1
  int64_t bad_row = -1;          // first entry whose row is outside [0, samples], else -1
};

template <typename Row, typename Col>
RowGroups GroupByRow(const Row* rows, const Col* cols, int64_t n, int64_t samples, int64_t vocab) {
  RowGroups groups;
  groups.offsets.assign(samples + 2, 0);
  bool sorted = true;
  int64_t previous = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t col = static_cast<int64_t>(cols[k]);
    const int64_t row = static_cast<int64_t>(rows[k]);
    if ((col < 0 || col >= vocab) && groups.bad_col < 0) groups.bad_col = k;
    if (row < 0 || row > samples) {
      if (groups.bad_row < 0) groups.bad_row = k;
      continue;
    }
    sorted = sorted && row >= previous;
    previous = row;
    ++groups.offsets[row + 1];
  }
  if (groups.bad_col >= 0 || groups.bad_row >= 0) return groups;
  for (int64_t r = 0; r <= samples; ++r) groups.offsets[r + 1] += groups.offsets[r];
  if (!sorted) {
    // Stable counting sort: within a row, entries keep their input order.
    groups.order.resize(n);
    std::vector<int64_t> next(groups.offsets.begin(), groups.offsets.end() - 1);
    for (int64_t k = 0; k < n; ++k) groups.order[next[static_cast<int64_t>(rows[k])]++] = k;
  }
  return groups;
}

// How far ahead the forward loop prefetches table rows: the rows are cold (a batch touches a few
// of a large table's rows), so the loop is bound by memory latency, not bandwidth.
constexpr int64_t kPrefetchDistance = 4;

template <typename T>
inline void PrefetchRow(const T* row, int64_t dim) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t offset = 0; offset < dim * static_cast<int64_t>(sizeof(T)); offset += 64) {
    __builtin_prefetch(bytes + offset);
  }
}

template <typename T, typename Col>
void EmbeddingBagForward(const T* table, int64_t dim, const Col* cols, const T* gains, const RowGroups& groups,
                         int64_t samples, T* out, const ParallelFor& parallel_for) {
  const int64_t entries = groups.offsets[samples];  // padding excluded
  const int64_t per_row = samples > 0 ? entries / samples + 1 : 1;
  const bool in_order = groups.order.empty();
  const int64_t* order = groups.order.data();
  const int64_t* offsets = groups.offsets.data();
  parallel_for(samples, per_row * dim * 4, [&](int64_t begin, int64_t end) {
    const int64_t last = offsets[end];
    for (int64_t r = begin; r < end; ++r) {
      T* __restrict dst = out + r * dim;
      std::fill(dst, dst + dim, T(0));
      for (int64_t i = offsets[r]; i < offsets[r + 1]; ++i) {
        if (i + kPrefetchDistance < last) {
          const int64_t ahead = in_order ? i + kPrefetchDistance : order[i + kPrefetchDistance];
          PrefetchRow(table + static_cast<int64_t>(cols[ahead]) * dim, dim);
        }
        const int64_t k = in_order ? i : order[i];
        const T gain = gains[k];
        const T* __restrict src = table + static_cast<int64_t>(cols[k]) * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] += gain * src[d];
      }
    }
  });
}

// The distinct ids of the non-padding entries, in order of first appearance, and for each the
// entries that hold it: entries[offsets[u] .. offsets[u + 1]) in input order.
template <typename Col>
struct DistinctIds {
  std::vector<Col> ids;
  std::vector<int64_t> offsets;
  std::vector<int64_t> entries;
  int64_t bad_entry = -1;  // first entry with a negative id or a row outside [0, samples]
};

// One pass with an open-addressing hash map (id -> slot), then a counting sort of the entries by
// slot: linear in N, and the ids come out in first-appearance order, as tf.unique gives them.
template <typename Row, typename Col>
DistinctIds<Col> FindDistinctIds(const Row* rows, const Col* cols, int64_t n, int64_t samples) {
  DistinctIds<Col> distinct;
  int64_t capacity = 16;
  while (capacity < 2 * n) capacity <<= 1;
  const int shift = 64 - __builtin_ctzll(static_cast<uint64_t>(capacity));
  // Key and slot side by side: a probe touches one cache line.
  struct Bucket {
    int64_t id;
    int64_t slot;
  };
  std::vector<Bucket> buckets(capacity, Bucket{-1, -1});
  std::vector<int64_t> slot_of(n, -1);
  std::vector<int64_t> counts;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = static_cast<int64_t>(rows[k]);
    const int64_t id = static_cast<int64_t>(cols[k]);
    if (row < 0 || row > samples || id < 0) {
      distinct.bad_entry = k;
      return distinct;
    }
    if (row == samples) continue;
    uint64_t h = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift;
    while (buckets[h].id != -1 && buckets[h].id != id) h = (h + 1) & (capacity - 1);
    if (buckets[h].id == -1) {
      buckets[h] = Bucket{id, static_cast<int64_t>(distinct.ids.size())};
      distinct.ids.push_back(cols[k]);
      counts.push_back(0);
    }
    slot_of[k] = buckets[h].slot;
    ++counts[buckets[h].slot];
  }
  const int64_t unique = static_cast<int64_t>(distinct.ids.size());
  distinct.offsets.assign(unique + 1, 0);
  for (int64_t u = 0; u < unique; ++u) distinct.offsets[u + 1] = distinct.offsets[u] + counts[u];
  distinct.entries.resize(distinct.offsets[unique]);
  std::vector<int64_t> next(distinct.offsets.begin(), distinct.offsets.end() - 1);
  for (int64_t k = 0; k < n; ++k) {
    if (slot_of[k] >= 0) distinct.entries[next[slot_of[k]]++] = k;
  }
  return distinct;
}

template <typename T, typename Row, typename Col>
void EmbeddingBagTableGrad(const T* d_out, int64_t dim, const Row* rows, const T* gains,
                           const DistinctIds<Col>& distinct, T* values, const ParallelFor& parallel_for) {
  const int64_t unique = static_cast<int64_t>(distinct.ids.size());
  const int64_t per_id = unique > 0 ? static_cast<int64_t>(distinct.entries.size()) / unique + 1 : 1;
  parallel_for(unique, per_id * dim * 4, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      T* __restrict dst = values + u * dim;
      std::fill(dst, dst + dim, T(0));
      for (int64_t i = distinct.offsets[u]; i < distinct.offsets[u + 1]; ++i) {
        const int64_t k = distinct.entries[i];
        const T gain = gains[k];
        const T* __restrict src = d_out + static_cast<int64_t>(rows[k]) * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] += gain * src[d];
      }
    }
  });
}

// A dot product in a fixed order: 8 interleaved partial sums (which the compiler keeps in one
// vector register) added up at the end, so the result does not depend on threads or alignment.
template <typename T>
inline T Dot(const T* __restrict a, const T* __restrict b, int64_t dim) {
  constexpr int64_t kLanes = 8;
  T partial[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) partial[j] += a[d + j] * b[d + j];
  }
  for (int64_t j = 0; d < dim; ++d, ++j) partial[j] += a[d] * b[d];
  T sum = T(0);
  for (int64_t j = 0; j < kLanes; ++j) sum += partial[j];
  return sum;
}

template <typename T, typename Row, typename Col>
void EmbeddingBagGainsGrad(const T* d_out, const T* table, int64_t dim, const Row* rows, const Col* cols, int64_t n,
                           int64_t samples, T* d_gains, const ParallelFor& parallel_for) {
  parallel_for(n, dim * 4, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t row = static_cast<int64_t>(rows[k]);
      d_gains[k] = row == samples ? T(0) : Dot(d_out + row * dim, table + static_cast<int64_t>(cols[k]) * dim, dim);
    }
  });
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_KERNELS_H_
