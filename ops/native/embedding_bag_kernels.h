// Embedding-bag kernels over a COO batch, independent of TensorFlow.
//
// A batch is N entries (row_ids[k], col_ids[k], gains[k]) and a table [vocab, dim].
// Entries whose row is `samples` are padding and are skipped everywhere.
//
//   forward:     out[r]        = sum_{k: row k == r} gains[k] * table[col k]         [samples, dim]
//   table grad:  d_table[id]   = sum_{k: col k == id} gains[k] * d_out[row k]         embedding_bag_table_grad.h
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
#include <type_traits>
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

// Chunks of consecutive groups (rows, or distinct ids) holding about `target` entries each: chunk c is
// groups [bounds[c], bounds[c + 1]). The split follows the entry counts, not the group index, so a few
// long bags (skewed ids) do not all land on one thread; a group is never split, so every output is still
// summed by one thread in entry order. The split depends only on the offsets, never on the thread count.
inline std::vector<int64_t> BalancedChunks(const int64_t* offsets, int64_t groups, int64_t target) {
  const int64_t entries = offsets[groups] - offsets[0];
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(groups, entries / std::max<int64_t>(target, 1)));
  std::vector<int64_t> bounds(chunks + 1, groups);
  bounds[0] = 0;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t goal = offsets[0] + entries / chunks * c + entries % chunks * c / chunks;
    const int64_t at = std::lower_bound(offsets, offsets + groups + 1, goal) - offsets;
    bounds[c] = std::max(bounds[c - 1], std::min(at, groups));
  }
  return bounds;
}

// Entries per chunk: enough to amortise a task and the prefetch start-up, small enough that a batch of a
// few thousand bags gives every thread several chunks.
constexpr int64_t kEntriesPerChunk = 512;

// How many entries ahead the loops prefetch table rows (forward, gains gradient) and output-gradient rows
// (table gradient): the rows are cold (a batch touches a few rows of a large table), so the loops are
// bound by memory latency, and this many rows (times their cache lines) are in flight per thread. Tuned
// by a sweep (docs/native_kernels.md): 1M x 64 float32 table, uniform ids.
constexpr int64_t kPrefetchDistance = 16;

template <typename T>
inline void PrefetchRow(const T* row, int64_t dim) {
  // Every cache line the row touches, from the line holding its first byte.
  const uintptr_t end = reinterpret_cast<uintptr_t>(row + dim);
  for (uintptr_t line = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63}; line < end; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

// How table elements are summed: in their own type, except 16-bit floats (embedding_bag_half.h), which
// are widened to float32 and rounded back once per output element.
template <typename T>
struct Accumulation {
  using Acc = T;
  static Acc Load(T value) { return value; }
  static T Store(Acc value) { return value; }
  static void AddScaled(Acc* __restrict acc, Acc gain, const T* __restrict src, int64_t dim) {
    for (int64_t d = 0; d < dim; ++d) acc[d] += gain * src[d];
  }
};

// out[r] for rows [begin, end); `order` null when the entries are already grouped by row. With `FixedDim` > 0
// (it then equals `dim`) a bag's sum lives in a local array the compiler keeps in vector registers: with the
// width known only at run time it is summed in `acc`, memory, so every entry's adds wait on the last entry's
// stores (the kernel took ~1.3x as long, on Zipf and on uniform ids). Same sums, same order.
template <int64_t Distance, int64_t FixedDim, typename T, typename Col>
void ForwardRows(const T* table, int64_t runtime_dim, const Col* cols, const T* gains, const int64_t* order,
                 const int64_t* offsets, int64_t begin, int64_t end, T* out,
                 typename Accumulation<T>::Acc* __restrict acc) {
  using A = Accumulation<T>;
  using Acc = typename A::Acc;
  const int64_t dim = FixedDim > 0 ? FixedDim : runtime_dim;
  Acc local[FixedDim > 0 ? FixedDim : 1];
  Acc* __restrict sum = FixedDim > 0 ? local : acc;
  const int64_t first = offsets[begin];
  const int64_t last = offsets[end];
  auto row_of = [&](int64_t i) {
    return table + static_cast<int64_t>(cols[order == nullptr ? i : order[i]]) * dim;
  };
  for (int64_t i = first; i < std::min(first + Distance, last); ++i) PrefetchRow(row_of(i), dim);
  for (int64_t r = begin; r < end; ++r) {
    std::fill(sum, sum + dim, Acc(0));
    for (int64_t i = offsets[r]; i < offsets[r + 1]; ++i) {
      if (i + Distance < last) PrefetchRow(row_of(i + Distance), dim);
      const int64_t k = order == nullptr ? i : order[i];
      A::AddScaled(sum, A::Load(gains[k]), table + static_cast<int64_t>(cols[k]) * dim, dim);
    }
    T* __restrict dst = out + r * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d] = A::Store(sum[d]);
  }
}

// Calls run(std::integral_constant<int64_t, D>) with D = dim for the common embedding widths, else D = 0.
template <typename Run>
void WithFixedDim(int64_t dim, Run&& run) {
  switch (dim) {
    case 8: return run(std::integral_constant<int64_t, 8>());
    case 16: return run(std::integral_constant<int64_t, 16>());
    case 32: return run(std::integral_constant<int64_t, 32>());
    case 64: return run(std::integral_constant<int64_t, 64>());
    case 128: return run(std::integral_constant<int64_t, 128>());
    default: return run(std::integral_constant<int64_t, 0>());
  }
}

template <typename T, typename Col, int64_t Distance = kPrefetchDistance>
void EmbeddingBagForward(const T* table, int64_t dim, const Col* cols, const T* gains, const RowGroups& groups,
                         int64_t samples, T* out, const ParallelFor& parallel_for) {
  const int64_t* order = groups.order.empty() ? nullptr : groups.order.data();
  const int64_t* offsets = groups.offsets.data();
  const std::vector<int64_t> chunks = BalancedChunks(offsets, samples, kEntriesPerChunk);
  const int64_t count = static_cast<int64_t>(chunks.size()) - 1;
  const int64_t per_chunk = offsets[samples] / count + 1;
  WithFixedDim(dim, [&](auto fixed) {
    constexpr int64_t kFixed = decltype(fixed)::value;
    parallel_for(count, per_chunk * dim * 4, [&](int64_t begin, int64_t end) {
      std::vector<typename Accumulation<T>::Acc> acc(kFixed > 0 ? 0 : dim);
      for (int64_t c = begin; c < end; ++c) {
        ForwardRows<Distance, kFixed>(table, dim, cols, gains, order, offsets, chunks[c], chunks[c + 1], out,
                                      acc.data());
      }
    });
  });
}

// A dot product in a fixed order: 8 interleaved partial sums (which the compiler keeps in one
// vector register) added up at the end, so the result does not depend on threads or alignment.
template <typename T>
inline typename Accumulation<T>::Acc Dot(const T* __restrict a, const T* __restrict b, int64_t dim) {
  using A = Accumulation<T>;
  using Acc = typename A::Acc;
  constexpr int64_t kLanes = 8;
  Acc partial[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) partial[j] += A::Load(a[d + j]) * A::Load(b[d + j]);
  }
  for (int64_t j = 0; d < dim; ++d, ++j) partial[j] += A::Load(a[d]) * A::Load(b[d]);
  Acc sum = Acc(0);
  for (int64_t j = 0; j < kLanes; ++j) sum += partial[j];
  return sum;
}

template <typename T, typename Row, typename Col>
void EmbeddingBagGainsGrad(const T* d_out, const T* table, int64_t dim, const Row* rows, const Col* cols, int64_t n,
                           int64_t samples, T* d_gains, const ParallelFor& parallel_for) {
  // One gain per entry: the entries are balanced by index. The table rows are the cold, random reads.
  parallel_for(n, dim * 4, [&](int64_t begin, int64_t end) {
    auto prefetch = [&](int64_t k) {
      if (static_cast<int64_t>(rows[k]) != samples) PrefetchRow(table + static_cast<int64_t>(cols[k]) * dim, dim);
    };
    for (int64_t k = begin; k < std::min(begin + kPrefetchDistance, end); ++k) prefetch(k);
    for (int64_t k = begin; k < end; ++k) {
      if (k + kPrefetchDistance < end) prefetch(k + kPrefetchDistance);
      const int64_t row = static_cast<int64_t>(rows[k]);
      d_gains[k] = row == samples ? T(0)
                                  : Accumulation<T>::Store(Dot(d_out + row * dim,
                                                               table + static_cast<int64_t>(cols[k]) * dim, dim));
    }
  });
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_KERNELS_H_
