// C interface of the sparseflow CUDA kernels: device pointers, sizes and a stream in, a status out.
// No TensorFlow here: the TensorFlow binding (ops/cuda/tf/) and the standalone harness
// (python -m benchmarks.gpu_kernels, through ctypes) both call these functions.
//
// Every function returns 0 on success, a negative SPARSEFLOW_E_* code for a bad argument, or the
// cudaError_t of a failed launch. Launches are asynchronous on `stream`; nothing here synchronises
// except where a function says so. Arrays are row-major and densely packed.
#ifndef SPARSEFLOW_KERNELS_H_
#define SPARSEFLOW_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPARSEFLOW_E_ARGUMENT (-1)   /* a size, block size or dtype the kernels do not take */
#define SPARSEFLOW_E_WORKSPACE (-2)  /* the workspace is smaller than the *_workspace function asked for */
#define SPARSEFLOW_E_ALIGNMENT (-3)  /* a pointer not aligned to its element size */
#define SPARSEFLOW_E_PLAN (-4)       /* a block-sparse plan or block list that does not fit the shapes */

/* Value types of the block-sparse kernels (accumulation is always float32). */
#define SPARSEFLOW_FLOAT32 0
#define SPARSEFLOW_FLOAT16 1
#define SPARSEFLOW_BFLOAT16 2
/* float32 storage and accumulation, the products' inputs rounded to TF32 (10 mantissa bits) on tensor cores:
 * opt-in, for the block-sparse products at blocks 16 and 32 and the weight gradient at 16-64 (other blocks run
 * as SPARSEFLOW_FLOAT32). */
#define SPARSEFLOW_FLOAT32_TF32 3

/* Embedding bag: out[r] = sum over entries k with row_ids[k] == r of gains[k] * table[col_ids[k]].
 *
 * table [vocab, dim] float32; row_ids [n] int32; col_ids [n] int64; gains [n] float32; out
 * [sample_count, dim] float32 (every row written, empty bags as zeros). Entries whose row is outside
 * [0, sample_count) (padding rows equal sample_count) or whose id is outside [0, vocab) are skipped
 * and never read: run sparseflow_embedding_bag_check first to reject them as errors.
 * rows_sorted: 1 when the caller knows row_ids is non-decreasing (the bag offsets written into scratch by one
 * small kernel, then a lane group per bag summing its entries in entry order: deterministic); 0 when it is
 * not (zeroes out, then adds entries atomically, not deterministic in the last bits); -1 when unknown (checked on the device, no host synchronisation, both kernels
 * launched). deterministic: nonzero to never add atomically (TensorFlow's op determinism): unsorted rows
 * then take a kernel that sums each bag's entries in entry order (every bag reads all n row ids; slower), so
 * results repeat bit for bit (the same bits as the sorted kernel's on sorted rows: both add in entry order).
 * scratch: device memory of sparseflow_embedding_bag_forward_scratch(sample_count) bytes, 8-byte aligned (the
 * bag offsets and the sortedness flag), needed unless rows_sorted is 0 (then it may be NULL). */
int sparseflow_embedding_bag_forward(const float* table, int64_t vocab, int64_t dim, const int32_t* row_ids,
                                     const int64_t* col_ids, const float* gains, int64_t n, int32_t sample_count,
                                     int rows_sorted, int deterministic, void* scratch, float* out,
                                     cudaStream_t stream);

/* Bytes of the forward's scratch for sample_count bags: 8 * (sample_count + 2). */
int sparseflow_embedding_bag_forward_scratch(int32_t sample_count, size_t* bytes);

/* Writes into first_bad (device, 2 int64): [0] the first position k with col_ids[k] outside
 * [0, vocab), [1] the first position with row_ids[k] outside [0, sample_count] (sample_count itself is
 * padding); n where there is none. */
int sparseflow_embedding_bag_check(const int32_t* row_ids, const int64_t* col_ids, int64_t n,
                                   int32_t sample_count, int64_t vocab, int64_t* first_bad, cudaStream_t stream);

/* Bytes of device workspace the gradient functions need for n entries (n < 2^31). */
int sparseflow_embedding_bag_grad_workspace(int64_t n, int64_t vocab, size_t* bytes);

/* The distinct ids of the entries that count (padding and out-of-range entries excluded), ascending:
 * unique_ids [n] int64 receives them in its first *num_unique positions; num_unique is a device int64.
 * Sorts the entries by id (radix sort over the bits vocab needs) into the workspace, which
 * sparseflow_embedding_bag_grad_rows then reads: keep it until then. */
int sparseflow_embedding_bag_grad_ids(const int32_t* row_ids, const int64_t* col_ids, int64_t n,
                                      int32_t sample_count, int64_t vocab, void* workspace, size_t workspace_bytes,
                                      int64_t* unique_ids, int64_t* num_unique, cudaStream_t stream);

/* d_rows[u] = sum over the entries k with id unique_ids[u] of gains[k] * out_grad[row_ids[k]], for
 * u < *num_unique (read on the device; d_rows must have room for max_unique >= *num_unique rows, e.g. n).
 * out_grad [sample_count, dim] float32; d_rows [max_unique, dim] float32. Deterministic: an id with at most
 * max(256, dim) entries is summed in entry order; a longer one (a hot id) in chunks of that many entries of the
 * sorted order, each chunk summed in entry order by its own lane group, then the chunks' sums added in chunk
 * order. The workspace is the one grad_ids filled; this call also writes the chunk sums into its dead parts. */
int sparseflow_embedding_bag_grad_rows(const float* out_grad, int64_t dim, const int32_t* row_ids, const float* gains,
                                       int64_t n, void* workspace, size_t workspace_bytes,
                                       const int64_t* num_unique, int64_t max_unique, float* d_rows,
                                       cudaStream_t stream);

/* d_gains[k] = dot(out_grad[row_ids[k]], table[col_ids[k]]); 0 for entries that do not count. */
int sparseflow_embedding_bag_grad_gains(const float* out_grad, const float* table, int64_t vocab, int64_t dim,
                                        const int32_t* row_ids, const int64_t* col_ids, int64_t n,
                                        int32_t sample_count, float* d_gains, cudaStream_t stream);

/* Block-sparse products over a plan (see block_plan.h). W is [K, N] of block x block blocks, stored as
 * w [nnz, block, block], w[i] the block at np.argwhere(layout)[i].
 *
 * product: out[:, o] = sum over the plan members e of output o (offsets[o] <= e < offsets[o + 1]) of
 * a[:, partners[e]] @ w[slots[e]] (transposed when transpose_blocks), where [:, j] is block column j.
 * a [m, a_blocks * block], out [m, outputs * block], both of `dtype`. With the by-column plan and
 * transpose_blocks 0 it is y = x @ W; with the by-row plan and transpose_blocks 1, dx = dy @ W^T.
 * block: 8, 16, 32 or 64. float16/bfloat16 run on tensor cores (block >= 16; compute capability 8.0 and
 * up, else SPARSEFLOW_E_ARGUMENT; the runtime's error when the device cannot be queried; a and w 16-byte
 * aligned, else SPARSEFLOW_E_ALIGNMENT), SPARSEFLOW_FLOAT32_TF32 too at blocks 16 and 32, float32 and
 * 8-blocks on CUDA cores. */
int sparseflow_block_sparse_product(int dtype, const void* a, int64_t m, int32_t a_blocks, int32_t outputs,
                                    int32_t block, const void* w, const int32_t* offsets, const int32_t* partners,
                                    const int32_t* slots, int transpose_blocks, void* out, cudaStream_t stream);

/* dw[i] = x[:, r_i]^T @ dy[:, c_i] for each block i at (r_i, c_i) = blocks[2i], blocks[2i + 1]:
 * x [m, k_blocks * block], dy [m, n_blocks * block], dw [nnz, block, block], all of `dtype`. Tensor cores
 * for float16/bfloat16 and SPARSEFLOW_FLOAT32_TF32 at blocks 16-64 (the conditions of the product, x and dy
 * 16-byte aligned), CUDA cores for float32 and 8-blocks. */
int sparseflow_block_sparse_weight_grad(int dtype, const void* x, const void* dy, int64_t m, int32_t k_blocks,
                                        int32_t n_blocks, int32_t block, const int32_t* blocks, int32_t nnz,
                                        void* dw, cudaStream_t stream);

/* Host side, before a product: 0 when the plan (host arrays; partners and slots of `members` entries each)
 * fits the shapes, else SPARSEFLOW_E_PLAN: offsets [outputs + 1] start at 0, never decrease and end at
 * w_blocks <= members (every block of w a member once); partners in [0, a_blocks); slots in [0, w_blocks).
 * The product reads the plan unchecked, so run this on any plan not built by sparseflow_block_plan. */
int sparseflow_block_sparse_check_plan(const int32_t* offsets, const int32_t* partners, const int32_t* slots,
                                       int32_t members, int32_t outputs, int32_t a_blocks, int32_t w_blocks);

/* Host side, before a weight gradient: 0 when every block (r, c) of blocks [nnz, 2] (host) has r in
 * [0, k_blocks) and c in [0, n_blocks), else SPARSEFLOW_E_PLAN. */
int sparseflow_block_sparse_check_blocks(const int32_t* blocks, int32_t nnz, int32_t k_blocks, int32_t n_blocks);

/* Host side: fills a plan from a layout (see block_plan.h); returns the number of blocks. */
int32_t sparseflow_block_plan(const uint8_t* layout, int32_t k_blocks, int32_t n_blocks, int by_column,
                              int32_t* offsets, int32_t* partners, int32_t* slots);

#ifdef __cplusplus
}
#endif

#endif  // SPARSEFLOW_KERNELS_H_
