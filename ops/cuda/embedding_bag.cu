// Embedding-bag forward and backward kernels (float32) behind the C interface of sparseflow_kernels.h.
//
// Forward on a row-sorted COO: a group of L lanes per bag (L = the dim's 16-byte chunks, rounded up to a
// power of two, at most 32), each lane summing its chunks of the bag's rows with 16-byte loads, up to
// kLoadsInFlight (8) row loads issued before their adds (bag_logic.h; the adds stay in entry order); the bag's
// entry range is read from the bag offsets, which one small kernel writes first (one thread per entry, each
// writing the offsets of the bags that start at it), so no lane searches the row ids. Unsorted input
// falls back to one thread per (entry, chunk) adding atomically, or, when determinism is asked for, to a
// lane group per bag scanning all entries for its row in entry order (slower: every bag reads all row ids).
//
// Backward: radix sort of (id, entry) pairs over the bits vocab needs, run-length encoding of the sorted
// ids (the distinct ids and their entry counts), each run's start found by a binary search of its id in the
// sorted ids (for the runs the encode counted on the device: the counts past them are never written, so no
// scan over n slots), then the segment sums of gains[k] * out_grad[row_ids[k]], segment-length aware: a
// segment of at most grad_chunk_entries(dim) entries (256 for dim <= 256) is summed by one lane group in entry
// order; a longer one (a hot id) is cut into chunks of the sorted order summed in parallel by one lane group each
// (grad_chunk_partials), then added in chunk order (grad_rows_kernel), so a hot id's critical path is one chunk
// plus its chunk count, not its entry count. Both orders are fixed: the gradient repeats bit for bit.
#include <cub/cub.cuh>

#include "bag_logic.h"
#include "sparseflow_kernels.h"

namespace sparseflow {
namespace {

constexpr int kThreads = 256;

int lanes_per_row(int64_t chunks) {
  int lanes = 1;
  while (lanes < 32 && lanes < chunks) lanes *= 2;
  return lanes;
}

int64_t blocks_for(int64_t threads) { return (threads + kThreads - 1) / kThreads; }

// offsets[b] for b in [0, sample_count] of sorted rows: thread k in [0, n] writes the bags starting at entry k.
__global__ void bag_offsets(const int32_t* __restrict__ rows, int64_t n, int32_t sample_count,
                            const int32_t* unsorted, int64_t* __restrict__ offsets) {
  if (unsorted != nullptr && *unsorted) return;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k > n) return;
  write_bag_offsets(rows, n, sample_count, k, offsets);
}

template <int V>
__global__ void bag_forward_sorted(const float* __restrict__ table, int64_t vocab, int64_t dim,
                                   const int64_t* __restrict__ cols, const float* __restrict__ gains,
                                   const int64_t* __restrict__ offsets, int32_t sample_count, int lanes,
                                   const int32_t* unsorted, float* __restrict__ out) {
  if (unsorted != nullptr && *unsorted) return;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t bag = thread / lanes;
  if (bag >= sample_count) return;
  bag_sum<V>(table, cols, gains, offsets[bag], offsets[bag + 1], vocab, dim, thread % lanes, lanes, out + bag * dim);
}

__global__ void find_unsorted(const int32_t* __restrict__ rows, int64_t n, int32_t* unsorted) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k + 1 < n && rows[k] > rows[k + 1]) *unsorted = 1;
}

__global__ void bag_forward_atomic(const float* __restrict__ table, int64_t vocab, int64_t dim,
                                   const int32_t* __restrict__ rows, const int64_t* __restrict__ cols,
                                   const float* __restrict__ gains, int64_t n, int32_t sample_count,
                                   const int32_t* unsorted, float* __restrict__ out) {
  if (unsorted != nullptr && !*unsorted) return;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t k = thread / dim;
  if (k >= n) return;
  const int64_t d = thread % dim;
  const int32_t row = rows[k];
  const int64_t col = cols[k];
  if (!entry_counts(row, col, sample_count, vocab)) return;
  atomicAdd(out + static_cast<int64_t>(row) * dim + d, gains[k] * table[col * dim + d]);
}

// The deterministic forward of unsorted rows: bag = a lane group, summing its row's entries in entry order
// (the order bag_forward_sorted sums in), every value of the bag written.
__global__ void bag_forward_rows_scan(const float* __restrict__ table, int64_t vocab, int64_t dim,
                                      const int32_t* __restrict__ rows, const int64_t* __restrict__ cols,
                                      const float* __restrict__ gains, int64_t n, int32_t sample_count, int lanes,
                                      const int32_t* unsorted, float* __restrict__ out) {
  if (unsorted != nullptr && !*unsorted) return;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t bag = thread / lanes;
  if (bag >= sample_count) return;
  for (int64_t c = thread % lanes; c < dim; c += lanes) {
    float acc = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t col = cols[k];
      if (rows[k] != bag || col < 0 || col >= vocab) continue;
      acc += gains[k] * table[col * dim + c];
    }
    out[bag * dim + c] = acc;
  }
}

__global__ void zero_if_unsorted(float* out, int64_t size, const int32_t* unsorted) {
  if (unsorted != nullptr && !*unsorted) return;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size) out[i] = 0.0f;
}

__global__ void check_entries(const int32_t* __restrict__ rows, const int64_t* __restrict__ cols, int64_t n,
                              int32_t sample_count, int64_t vocab, unsigned long long* first_bad) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  if (cols[k] < 0 || cols[k] >= vocab) atomicMin(first_bad, static_cast<unsigned long long>(k));
  if (rows[k] < 0 || rows[k] > sample_count) atomicMin(first_bad + 1, static_cast<unsigned long long>(k));
}

__global__ void fill_first_bad(unsigned long long* first_bad, int64_t n) {
  first_bad[0] = static_cast<unsigned long long>(n);
  first_bad[1] = static_cast<unsigned long long>(n);
}

__global__ void make_keys(const int32_t* __restrict__ rows, const int64_t* __restrict__ cols, int64_t n,
                          int32_t sample_count, int64_t vocab, uint64_t* keys, int64_t* order) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  keys[k] = static_cast<uint64_t>(grad_key(rows[k], cols[k], sample_count, vocab));
  order[k] = k;
}

// starts[u] = the first position of run u's key in the sorted keys, for the *runs runs the encode wrote.
__global__ void segment_starts(const uint64_t* __restrict__ keys_sorted, int64_t n,
                               const uint64_t* __restrict__ unique_keys, const int64_t* runs, int64_t* starts) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= *runs) return;
  const uint64_t key = unique_keys[u];
  int64_t low = 0, high = n;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (keys_sorted[mid] < key) low = mid + 1; else high = mid;
  }
  starts[u] = low;
}

// The run of sentinel keys (entries that do not count), when present, is the last run: drop it.
__global__ void count_unique(const int64_t* runs, const uint64_t* unique_keys, int64_t vocab, int64_t* num_unique) {
  int64_t count = *runs;
  if (count > 0 && unique_keys[count - 1] == static_cast<uint64_t>(vocab)) --count;
  *num_unique = count;
}

// The first pass over long segments: a lane group per chunk of the sorted order sums the parts of the (at most
// two) long segments in it into its partial rows (partials [2 * chunks, dim]; bag_logic.h's slots).
template <int V>
__global__ void __launch_bounds__(kThreads, 3)  // 4 blocks' 64 registers would spill the chunk's rows in flight
    grad_chunk_partials(const float* __restrict__ out_grad, int64_t dim, const int32_t* __restrict__ rows,
                        const float* __restrict__ gains, const int64_t* __restrict__ order, int64_t n,
                        const int64_t* __restrict__ starts, const int64_t* __restrict__ counts,
                        const int64_t* num_unique, int64_t chunk_entries, int lanes, float* __restrict__ partials) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = thread / lanes;
  const int64_t low = chunk * chunk_entries;
  if (low >= n) return;
  const int64_t high = low + chunk_entries < n ? low + chunk_entries : n;
  const int64_t unique = *num_unique;
  const int64_t first = segment_of(starts, counts, unique, low);
  if (first >= 0 && counts[first] > chunk_entries) {
    const int64_t end = starts[first] + counts[first];
    segment_grad_sum<V>(out_grad, rows, gains, order, low, end < high ? end : high, dim, thread % lanes, lanes,
                        partials + 2 * chunk * dim);
  }
  const int64_t last = segment_of(starts, counts, unique, high - 1);
  if (last >= 0 && last != first && counts[last] > chunk_entries) {
    segment_grad_sum<V>(out_grad, rows, gains, order, starts[last], high, dim, thread % lanes, lanes,
                        partials + (2 * chunk + 1) * dim);
  }
}

// A lane group per distinct id: a short segment summed in entry order, a long one from its chunks' partials.
template <int V>
__global__ void __launch_bounds__(kThreads, 4)
    grad_rows_kernel(const float* __restrict__ out_grad, int64_t dim, const int32_t* __restrict__ rows,
                     const float* __restrict__ gains, const int64_t* __restrict__ order,
                     const int64_t* __restrict__ starts, const int64_t* __restrict__ counts,
                     const int64_t* num_unique, int64_t chunk_entries, const float* __restrict__ partials,
                     int lanes, float* __restrict__ d_rows) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t u = thread / lanes;
  if (u >= *num_unique) return;
  const int64_t begin = starts[u], count = counts[u];
  if (count <= chunk_entries) {
    segment_grad_sum<V>(out_grad, rows, gains, order, begin, begin + count, dim, thread % lanes, lanes,
                        d_rows + u * dim);
  } else {
    add_chunk_partials<V>(partials, begin, count, chunk_entries, dim, thread % lanes, lanes, d_rows + u * dim);
  }
}

__global__ void grad_gains_kernel(const float* __restrict__ out_grad, const float* __restrict__ table, int64_t vocab,
                                  int64_t dim, const int32_t* __restrict__ rows, const int64_t* __restrict__ cols,
                                  int64_t n, int32_t sample_count, float* __restrict__ d_gains) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t k = thread / 32;
  const int lane = threadIdx.x % 32;
  if (k >= n) return;  // whole warps leave together: n entries fill whole warps (blockDim is a multiple of 32)
  float share = gain_grad_share(out_grad, table, rows[k], cols[k], sample_count, vocab, dim, lane, 32);
  for (int offset = 16; offset > 0; offset /= 2) share += __shfl_down_sync(0xffffffffu, share, offset);
  if (lane == 0) d_gains[k] = share;
}

// Workspace layout of the gradient: arrays of n entries each, 256-byte aligned, then CUB's temporary storage.
// keys_in and order_in, adjacent, are dead once sorted: grad_rows reuses their bytes for the chunk partials.
struct GradWorkspace {
  uint64_t* keys_in;
  int64_t* order_in;
  uint64_t* keys_sorted;
  int64_t* order_sorted;
  int64_t* counts;
  int64_t* starts;
  int64_t* runs;
  void* temp;
  size_t temp_bytes;
};

size_t align_up(size_t bytes) { return (bytes + 255) & ~static_cast<size_t>(255); }

// CUB's temporary storage for n entries: the larger of the sort's and the encode's, each queried
// with CUB's two-phase protocol; the first failed query's error (no workspace is sized from a failed query).
cudaError_t cub_temp_bytes(int n, int64_t vocab, size_t* bytes) {
  size_t sort = 0, encode = 0;
  cudaError_t error = cub::DeviceRadixSort::SortPairs(
      nullptr, sort, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0, key_bits(vocab));
  if (error != cudaSuccess) return error;
  error = cub::DeviceRunLengthEncode::Encode(nullptr, encode, static_cast<const uint64_t*>(nullptr),
                                             static_cast<uint64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                             static_cast<int64_t*>(nullptr), n);
  if (error != cudaSuccess) return error;
  *bytes = align_up(sort > encode ? sort : encode);
  return cudaSuccess;
}

size_t arrays_bytes(int64_t n) { return 6 * align_up(static_cast<size_t>(n) * 8) + align_up(8); }

// The workspace's arrays, then `temp_bytes` of CUB's temporary storage.
GradWorkspace carve(void* base, int64_t n, size_t temp_bytes) {
  char* p = static_cast<char*>(base);
  const size_t array = align_up(static_cast<size_t>(n) * 8);
  GradWorkspace w;
  w.keys_in = reinterpret_cast<uint64_t*>(p);
  w.order_in = reinterpret_cast<int64_t*>(p + array);
  w.keys_sorted = reinterpret_cast<uint64_t*>(p + 2 * array);
  w.order_sorted = reinterpret_cast<int64_t*>(p + 3 * array);
  w.counts = reinterpret_cast<int64_t*>(p + 4 * array);
  w.starts = reinterpret_cast<int64_t*>(p + 5 * array);
  w.runs = reinterpret_cast<int64_t*>(p + 6 * array);
  w.temp = p + arrays_bytes(n);
  w.temp_bytes = temp_bytes;
  return w;
}

// Bytes of the chunk partials for n entries of dim values: 2 rows per chunk, chunks only when a segment can be
// long (n > chunk). At most 16 n bytes (dim <= chunk): the dead keys_in and order_in arrays hold them.
size_t partials_bytes(int64_t n, int64_t dim) {
  const int64_t chunk = grad_chunk_entries(dim);
  if (n <= chunk) return 0;
  return static_cast<size_t>(2 * ((n + chunk - 1) / chunk) * dim) * sizeof(float);
}

// Bytes of the forward's scratch: the bag offsets (int64 [sample_count + 1]), then the sortedness flag.
size_t forward_scratch_bytes(int32_t sample_count) { return 8 * (static_cast<size_t>(sample_count) + 1) + 8; }

bool vectorisable(const float* p, int64_t dim) {
  return dim % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

int status() { return static_cast<int>(cudaGetLastError()); }

}  // namespace
}  // namespace sparseflow

using namespace sparseflow;

extern "C" int sparseflow_embedding_bag_forward(const float* table, int64_t vocab, int64_t dim, const int32_t* row_ids,
                                                const int64_t* col_ids, const float* gains, int64_t n,
                                                int32_t sample_count, int rows_sorted, int deterministic,
                                                void* scratch, float* out, cudaStream_t stream) {
  if (vocab < 0 || dim <= 0 || n < 0 || sample_count < 0 || rows_sorted < -1 || rows_sorted > 1) {
    return SPARSEFLOW_E_ARGUMENT;
  }
  if (rows_sorted != 0 && (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 8 != 0)) {
    return SPARSEFLOW_E_ARGUMENT;
  }
  if (sample_count == 0) return 0;
  auto* offsets = static_cast<int64_t*>(scratch);
  const int32_t* unsorted = nullptr;
  if (rows_sorted == -1) {
    auto* flag = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + forward_scratch_bytes(sample_count) - 8);
    const cudaError_t error = cudaMemsetAsync(flag, 0, sizeof(int32_t), stream);
    if (error != cudaSuccess) return static_cast<int>(error);
    if (n > 1) find_unsorted<<<blocks_for(n), kThreads, 0, stream>>>(row_ids, n, flag);
    unsorted = flag;
  }
  if (rows_sorted != 0) {
    bag_offsets<<<blocks_for(n + 1), kThreads, 0, stream>>>(row_ids, n, sample_count, unsorted, offsets);
    const bool vec = vectorisable(table, dim) && vectorisable(out, dim);
    const int lanes = lanes_per_row(vec ? dim / 4 : dim);
    const int64_t threads = static_cast<int64_t>(sample_count) * lanes;
    if (vec) {
      bag_forward_sorted<4><<<blocks_for(threads), kThreads, 0, stream>>>(table, vocab, dim, col_ids, gains, offsets,
                                                                            sample_count, lanes, unsorted, out);
    } else {
      bag_forward_sorted<1><<<blocks_for(threads), kThreads, 0, stream>>>(table, vocab, dim, col_ids, gains, offsets,
                                                                            sample_count, lanes, unsorted, out);
    }
  }
  if (rows_sorted != 1 && deterministic) {
    const int lanes = lanes_per_row(dim);
    const int64_t threads = static_cast<int64_t>(sample_count) * lanes;
    bag_forward_rows_scan<<<blocks_for(threads), kThreads, 0, stream>>>(table, vocab, dim, row_ids, col_ids, gains, n,
                                                                       sample_count, lanes, unsorted, out);
  } else if (rows_sorted != 1) {
    const int64_t size = static_cast<int64_t>(sample_count) * dim;
    zero_if_unsorted<<<blocks_for(size), kThreads, 0, stream>>>(out, size, unsorted);
    if (n > 0) {
      bag_forward_atomic<<<blocks_for(n * dim), kThreads, 0, stream>>>(table, vocab, dim, row_ids, col_ids, gains, n,
                                                                      sample_count, unsorted, out);
    }
  }
  return status();
}

extern "C" int sparseflow_embedding_bag_forward_scratch(int32_t sample_count, size_t* bytes) {
  if (sample_count < 0 || bytes == nullptr) return SPARSEFLOW_E_ARGUMENT;
  *bytes = forward_scratch_bytes(sample_count);
  return 0;
}

extern "C" int sparseflow_embedding_bag_check(const int32_t* row_ids, const int64_t* col_ids, int64_t n,
                                              int32_t sample_count, int64_t vocab, int64_t* first_bad,
                                              cudaStream_t stream) {
  if (n < 0 || sample_count < 0 || vocab < 0) return SPARSEFLOW_E_ARGUMENT;
  auto* bad = reinterpret_cast<unsigned long long*>(first_bad);
  fill_first_bad<<<1, 1, 0, stream>>>(bad, n);
  if (n > 0) check_entries<<<blocks_for(n), kThreads, 0, stream>>>(row_ids, col_ids, n, sample_count, vocab, bad);
  return status();
}

extern "C" int sparseflow_embedding_bag_grad_workspace(int64_t n, int64_t vocab, size_t* bytes) {
  if (n < 0 || n >= (int64_t{1} << 31) || vocab < 0 || bytes == nullptr) return SPARSEFLOW_E_ARGUMENT;
  size_t temp = 0;
  const cudaError_t error = cub_temp_bytes(static_cast<int>(n), vocab, &temp);
  if (error != cudaSuccess) return static_cast<int>(error);
  *bytes = arrays_bytes(n) + temp;
  return 0;
}

extern "C" int sparseflow_embedding_bag_grad_ids(const int32_t* row_ids, const int64_t* col_ids, int64_t n,
                                                 int32_t sample_count, int64_t vocab, void* workspace,
                                                 size_t workspace_bytes_given, int64_t* unique_ids,
                                                 int64_t* num_unique, cudaStream_t stream) {
  if (n < 0 || n >= (int64_t{1} << 31) || vocab < 0 || sample_count < 0) return SPARSEFLOW_E_ARGUMENT;
  size_t temp_needed = 0;
  cudaError_t error = cub_temp_bytes(static_cast<int>(n), vocab, &temp_needed);
  if (error != cudaSuccess) return static_cast<int>(error);
  if (workspace_bytes_given < arrays_bytes(n) + temp_needed) return SPARSEFLOW_E_WORKSPACE;
  GradWorkspace w = carve(workspace, n, temp_needed);
  if (n == 0) {
    error = cudaMemsetAsync(w.runs, 0, sizeof(int64_t), stream);
    if (error == cudaSuccess) error = cudaMemsetAsync(num_unique, 0, sizeof(int64_t), stream);
    return error != cudaSuccess ? static_cast<int>(error) : status();
  }
  const int count = static_cast<int>(n);
  make_keys<<<blocks_for(n), kThreads, 0, stream>>>(row_ids, col_ids, n, sample_count, vocab, w.keys_in, w.order_in);
  // Each CUB call's own error (a failed launch or a too small storage) is returned, before anything reads its output.
  size_t temp = w.temp_bytes;
  error = cub::DeviceRadixSort::SortPairs(w.temp, temp, w.keys_in, w.keys_sorted, w.order_in, w.order_sorted, count,
                                          0, key_bits(vocab), stream);
  if (error != cudaSuccess) return static_cast<int>(error);
  temp = w.temp_bytes;
  auto* unique_keys = reinterpret_cast<uint64_t*>(unique_ids);
  error = cub::DeviceRunLengthEncode::Encode(w.temp, temp, w.keys_sorted, unique_keys, w.counts, w.runs, count,
                                             stream);
  if (error != cudaSuccess) return static_cast<int>(error);
  segment_starts<<<blocks_for(n), kThreads, 0, stream>>>(w.keys_sorted, n, unique_keys, w.runs, w.starts);
  count_unique<<<1, 1, 0, stream>>>(w.runs, unique_keys, vocab, num_unique);
  return status();
}

extern "C" int sparseflow_embedding_bag_grad_rows(const float* out_grad, int64_t dim, const int32_t* row_ids,
                                                  const float* gains, int64_t n, void* workspace,
                                                  size_t workspace_bytes_given, const int64_t* num_unique,
                                                  int64_t max_unique, float* d_rows, cudaStream_t stream) {
  if (dim <= 0 || n < 0 || n >= (int64_t{1} << 31) || max_unique < 0) return SPARSEFLOW_E_ARGUMENT;
  if (workspace_bytes_given < arrays_bytes(n)) return SPARSEFLOW_E_WORKSPACE;
  if (n == 0 || max_unique == 0) return 0;
  // The layout of the arrays does not depend on vocab (only CUB's temporary storage does, and it is last).
  GradWorkspace w = carve(workspace, n, 0);
  const int64_t chunk = grad_chunk_entries(dim);
  if (partials_bytes(n, dim) > 2 * align_up(static_cast<size_t>(n) * 8)) return SPARSEFLOW_E_WORKSPACE;
  auto* partials = reinterpret_cast<float*>(w.keys_in);
  // 16-byte loads also from the partials: the workspace is 256-byte aligned and the partial rows dim floats apart.
  const bool vec = vectorisable(out_grad, dim) && vectorisable(d_rows, dim) && vectorisable(partials, dim);
  const int lanes = lanes_per_row(vec ? dim / 4 : dim);
  if (n > chunk) {  // only then can a segment be long
    const int64_t threads = (n + chunk - 1) / chunk * lanes;
    if (vec) {
      grad_chunk_partials<4><<<blocks_for(threads), kThreads, 0, stream>>>(
          out_grad, dim, row_ids, gains, w.order_sorted, n, w.starts, w.counts, num_unique, chunk, lanes, partials);
    } else {
      grad_chunk_partials<1><<<blocks_for(threads), kThreads, 0, stream>>>(
          out_grad, dim, row_ids, gains, w.order_sorted, n, w.starts, w.counts, num_unique, chunk, lanes, partials);
    }
  }
  const int64_t threads = (max_unique < n ? max_unique : n) * lanes;
  if (vec) {
    grad_rows_kernel<4><<<blocks_for(threads), kThreads, 0, stream>>>(out_grad, dim, row_ids, gains, w.order_sorted,
                                                                       w.starts, w.counts, num_unique, chunk, partials,
                                                                       lanes, d_rows);
  } else {
    grad_rows_kernel<1><<<blocks_for(threads), kThreads, 0, stream>>>(out_grad, dim, row_ids, gains, w.order_sorted,
                                                                       w.starts, w.counts, num_unique, chunk, partials,
                                                                       lanes, d_rows);
  }
  return status();
}

extern "C" int sparseflow_embedding_bag_grad_gains(const float* out_grad, const float* table, int64_t vocab,
                                                   int64_t dim, const int32_t* row_ids, const int64_t* col_ids,
                                                   int64_t n, int32_t sample_count, float* d_gains,
                                                   cudaStream_t stream) {
  if (vocab < 0 || dim <= 0 || n < 0 || sample_count < 0) return SPARSEFLOW_E_ARGUMENT;
  if (n == 0) return 0;
  grad_gains_kernel<<<blocks_for(n * 32), kThreads, 0, stream>>>(out_grad, table, vocab, dim, row_ids, col_ids, n,
                                                                 sample_count, d_gains);
  return status();
}
