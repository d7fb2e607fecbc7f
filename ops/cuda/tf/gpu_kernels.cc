// TensorFlow GPU kernels of the sparseflow ops (op_defs.cc), calling the CUDA kernels' C interface
// (ops/cuda/sparseflow_kernels.h) on the op's CUDA stream. Built by `make gpu-ops` (TensorFlow with CUDA,
// nvcc); the ops' inputs stay on the device except sample_count, a host scalar, and the block-sparse plans and
// block lists, which are small and checked on the host against the shapes before a kernel reads them (their
// device copies are kept while they do not change).
#define EIGEN_USE_GPU

#include <cuda_runtime_api.h>

#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/determinism.h"

#include "../sparseflow_kernels.h"
#include "op_names.h"

namespace sparseflow {

using tensorflow::DEVICE_GPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

namespace {

cudaStream_t stream_of(OpKernelContext* ctx) { return ctx->eigen_device<Eigen::GpuDevice>().stream(); }

std::string launch_error(const char* what, int status) {
  return std::string(what) + " failed with status " + std::to_string(status) +
         (status > 0 ? std::string(" (") + cudaGetErrorString(static_cast<cudaError_t>(status)) + ")" : "");
}

// Checks the COO lengths and ranks shared by the forward and the gradient.
void check_coo(OpKernelContext* ctx, const Tensor& rows, const Tensor& cols, const Tensor& gains) {
  OP_REQUIRES(ctx, rows.dims() == 1 && cols.dims() == 1 && gains.dims() == 1,
              errors::InvalidArgument("embedding_bag: row_ids, col_ids and gains must be 1-D [N]"));
  OP_REQUIRES(ctx, rows.dim_size(0) == cols.dim_size(0) && rows.dim_size(0) == gains.dim_size(0),
              errors::InvalidArgument("embedding_bag: check equal_lengths failed: row_ids, col_ids and gains "
                                      "must have equal lengths"));
  OP_REQUIRES(ctx, rows.dim_size(0) < (int64_t{1} << 31),
              errors::InvalidArgument("embedding_bag: more than 2^31 - 1 entries"));
}

class EmbeddingBagOp : public OpKernel {
 public:
  explicit EmbeddingBagOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rows_sorted", &rows_sorted_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("validate", &validate_));
    OP_REQUIRES(ctx, rows_sorted_ >= -1 && rows_sorted_ <= 1,
                errors::InvalidArgument("embedding_bag: rows_sorted must be -1, 0 or 1, got ", rows_sorted_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& table = ctx->input(0);
    const Tensor& rows = ctx->input(1);
    const Tensor& cols = ctx->input(2);
    const Tensor& gains = ctx->input(3);
    const int32_t sample_count = ctx->input(4).scalar<int32_t>()();
    OP_REQUIRES(ctx, table.dims() == 2, errors::InvalidArgument("embedding_bag: table must be [vocab, dim]"));
    OP_REQUIRES(ctx, sample_count >= 0,
                errors::InvalidArgument("embedding_bag: sample_count must be >= 0, got ", sample_count));
    check_coo(ctx, rows, cols, gains);
    if (!ctx->status().ok()) return;
    const int64_t vocab = table.dim_size(0), dim = table.dim_size(1), n = rows.dim_size(0);
    cudaStream_t stream = stream_of(ctx);
    if (validate_ && n > 0) {
      Tensor first_bad;
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({2}), &first_bad));
      int status = sparseflow_embedding_bag_check(rows.flat<int32_t>().data(), cols.flat<int64_t>().data(), n,
                                                  sample_count, vocab, first_bad.flat<int64_t>().data(), stream);
      OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_embedding_bag_check", status)));
      int64_t host[2] = {n, n};
      cudaMemcpyAsync(host, first_bad.flat<int64_t>().data(), sizeof(host), cudaMemcpyDeviceToHost, stream);
      OP_REQUIRES(ctx, cudaStreamSynchronize(stream) == cudaSuccess,
                  errors::Internal("embedding_bag: reading the check's result failed"));
      OP_REQUIRES(ctx, host[0] == n,
                  errors::InvalidArgument("embedding_bag: check col_ids_in_range failed: col_ids must be table rows "
                                          "in [0, vocab=", vocab, "); first offending position ", host[0]));
      OP_REQUIRES(ctx, host[1] == n,
                  errors::InvalidArgument("embedding_bag: check row_ids_in_range failed: row_ids must be in "
                                          "[0, sample_count=", sample_count, "] (sample_count itself marks "
                                          "padding); first offending position ", host[1]));
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({sample_count, dim}), &out));
    size_t scratch_bytes = 0;
    OP_REQUIRES(ctx, sparseflow_embedding_bag_forward_scratch(sample_count, &scratch_bytes) == 0,
                errors::InvalidArgument("embedding_bag: bad sample_count"));
    Tensor scratch;  // the bag offsets and the sortedness flag, int64 [sample_count + 2]
    const int64_t scratch_words = static_cast<int64_t>(scratch_bytes / 8);
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({scratch_words}), &scratch));
    const int status = sparseflow_embedding_bag_forward(
        table.flat<float>().data(), vocab, dim, rows.flat<int32_t>().data(), cols.flat<int64_t>().data(),
        gains.flat<float>().data(), n, sample_count, rows_sorted_,
        tensorflow::OpDeterminismRequired() ? 1 : 0,  // tf.config.experimental.enable_op_determinism(): no atomics
        scratch.flat<int64_t>().data(), out->flat<float>().data(), stream);
    OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_embedding_bag_forward", status)));
  }

 private:
  int rows_sorted_ = -1;
  bool validate_ = false;
};

class EmbeddingBagGradOp : public OpKernel {
 public:
  explicit EmbeddingBagGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& out_grad = ctx->input(0);
    const Tensor& table = ctx->input(1);
    const Tensor& rows = ctx->input(2);
    const Tensor& cols = ctx->input(3);
    const Tensor& gains = ctx->input(4);
    OP_REQUIRES(ctx, out_grad.dims() == 2 && table.dims() == 2 && out_grad.dim_size(1) == table.dim_size(1),
                errors::InvalidArgument("embedding_bag gradient: out_grad [S, dim] and table [vocab, dim] needed"));
    check_coo(ctx, rows, cols, gains);
    if (!ctx->status().ok()) return;
    const int64_t vocab = table.dim_size(0), dim = table.dim_size(1), n = rows.dim_size(0);
    const int32_t sample_count = static_cast<int32_t>(out_grad.dim_size(0));
    cudaStream_t stream = stream_of(ctx);
    size_t bytes = 0;
    OP_REQUIRES(ctx, sparseflow_embedding_bag_grad_workspace(n, vocab, &bytes) == 0,
                errors::InvalidArgument("embedding_bag gradient: bad sizes"));
    Tensor workspace, ids, count;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({static_cast<int64_t>(bytes)}), &workspace));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({n > 0 ? n : 1}), &ids));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({1}), &count));
    void* space = workspace.flat<int8_t>().data();
    int status = sparseflow_embedding_bag_grad_ids(rows.flat<int32_t>().data(), cols.flat<int64_t>().data(), n,
                                                   sample_count, vocab, space, bytes, ids.flat<int64_t>().data(),
                                                   count.flat<int64_t>().data(), stream);
    OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_embedding_bag_grad_ids", status)));
    // The number of distinct ids sizes the outputs: one host synchronisation.
    int64_t unique = 0;
    cudaMemcpyAsync(&unique, count.flat<int64_t>().data(), sizeof(unique), cudaMemcpyDeviceToHost, stream);
    OP_REQUIRES(ctx, cudaStreamSynchronize(stream) == cudaSuccess,
                errors::Internal("embedding_bag gradient: reading the number of distinct ids failed"));
    Tensor *unique_ids = nullptr, *d_rows = nullptr, *d_gains = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({unique}), &unique_ids));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({unique, dim}), &d_rows));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n}), &d_gains));
    if (unique > 0) {
      cudaMemcpyAsync(unique_ids->flat<int64_t>().data(), ids.flat<int64_t>().data(), unique * sizeof(int64_t),
                      cudaMemcpyDeviceToDevice, stream);
      status = sparseflow_embedding_bag_grad_rows(out_grad.flat<float>().data(), dim, rows.flat<int32_t>().data(),
                                                  gains.flat<float>().data(), n, space, bytes,
                                                  count.flat<int64_t>().data(), unique, d_rows->flat<float>().data(),
                                                  stream);
      OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_embedding_bag_grad_rows", status)));
    }
    status = sparseflow_embedding_bag_grad_gains(out_grad.flat<float>().data(), table.flat<float>().data(), vocab, dim,
                                                 rows.flat<int32_t>().data(), cols.flat<int64_t>().data(), n,
                                                 sample_count, d_gains->flat<float>().data(), stream);
    OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_embedding_bag_grad_gains", status)));
  }
};

template <typename T>
constexpr int dtype_code();
template <>
constexpr int dtype_code<float>() { return SPARSEFLOW_FLOAT32; }
template <>
constexpr int dtype_code<Eigen::half>() { return SPARSEFLOW_FLOAT16; }
template <>
constexpr int dtype_code<tensorflow::bfloat16>() { return SPARSEFLOW_BFLOAT16; }

// float with allow_tf32: float32 storage, TF32 tensor-core products.
template <typename T>
int math_code(bool allow_tf32) {
  return std::is_same<T, float>::value && allow_tf32 ? SPARSEFLOW_FLOAT32_TF32 : dtype_code<T>();
}

bool valid_block(int block) { return block == 8 || block == 16 || block == 32 || block == 64; }

// The device copy of an op's checked host int32 inputs (a plan's three arrays, a block list), kept by the
// kernel: plans are usually constants, so the copy from pageable host memory (which waits for the stream) is
// made only when their contents change, not every step.
class DeviceCopyCache {
 public:
  // The device copy of the parts, concatenated in order; nullptr with ctx's status set on failure.
  const int32_t* Get(OpKernelContext* ctx, std::initializer_list<const Tensor*> parts) {
    std::vector<int32_t> now;
    for (const Tensor* part : parts) {
      const int32_t* data = part->flat<int32_t>().data();
      now.insert(now.end(), data, data + part->NumElements());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!device_.IsInitialized() || now != host_) {
      Tensor device;
      const int64_t count = now.empty() ? 1 : static_cast<int64_t>(now.size());
      const auto allocated = ctx->allocate_temp(tensorflow::DT_INT32, TensorShape({count}), &device);
      if (!allocated.ok()) {
        ctx->SetStatus(allocated);
        return nullptr;
      }
      if (!now.empty() && cudaMemcpyAsync(device.flat<int32_t>().data(), now.data(), now.size() * sizeof(int32_t),
                                          cudaMemcpyHostToDevice, stream_of(ctx)) != cudaSuccess) {
        ctx->SetStatus(errors::Internal("BlockSparseMatMul: copying the plan to the device failed"));
        return nullptr;
      }
      device_ = device;
      host_ = std::move(now);
    }
    return device_.flat<int32_t>().data();
  }

 private:
  std::mutex mutex_;
  std::vector<int32_t> host_;
  Tensor device_;  // holds its buffer; ops of a device share its compute stream, so a replaced one is free to reuse
};

template <typename T>
class BlockSparseMatMulOp : public OpKernel {
 public:
  explicit BlockSparseMatMulOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", &block_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("outputs", &outputs_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_blocks", &transpose_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("allow_tf32", &allow_tf32_));
    OP_REQUIRES(ctx, valid_block(block_),
                errors::InvalidArgument("BlockSparseMatMul: block_size must be 8, 16, 32 or 64, got ", block_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& w = ctx->input(1);
    const Tensor& offsets = ctx->input(2);
    OP_REQUIRES(ctx, a.dims() == 2 && a.dim_size(1) % block_ == 0 && a.dim_size(1) > 0,
                errors::InvalidArgument("BlockSparseMatMul: a must be [M, blocks * ", block_, "], got ",
                                        a.shape().DebugString()));
    OP_REQUIRES(ctx, w.dims() == 3 && w.dim_size(1) == block_ && w.dim_size(2) == block_,
                errors::InvalidArgument("BlockSparseMatMul: w must be [nnz, ", block_, ", ", block_, "]"));
    OP_REQUIRES(ctx, offsets.NumElements() == outputs_ + 1,
                errors::InvalidArgument("BlockSparseMatMul: offsets must have outputs + 1 = ", outputs_ + 1,
                                        " entries"));
    const Tensor& partners = ctx->input(3);
    const Tensor& slots = ctx->input(4);
    OP_REQUIRES(ctx, partners.NumElements() == slots.NumElements() && partners.NumElements() < (int64_t{1} << 31),
                errors::InvalidArgument("BlockSparseMatMul: partners and slots must have equal lengths"));
    const int32_t a_blocks = static_cast<int32_t>(a.dim_size(1) / block_);
    const int32_t w_blocks = static_cast<int32_t>(w.dim_size(0));
    OP_REQUIRES(ctx,
                sparseflow_block_sparse_check_plan(offsets.flat<int32_t>().data(), partners.flat<int32_t>().data(),
                                                   slots.flat<int32_t>().data(),
                                                   static_cast<int32_t>(partners.NumElements()), outputs_, a_blocks,
                                                   w_blocks) == 0,
                errors::InvalidArgument("BlockSparseMatMul: check plan_fits failed: offsets must start at 0, never "
                                        "decrease and end at w's ", w_blocks, " blocks, partners must be in [0, ",
                                        a_blocks, ") and slots in [0, ", w_blocks, ")"));
    const int32_t* plan = plan_.Get(ctx, {&offsets, &partners, &slots});
    if (plan == nullptr) return;
    const int32_t* device_offsets = plan;
    const int32_t* device_partners = plan + offsets.NumElements();
    const int32_t* device_slots = device_partners + partners.NumElements();
    const int64_t m = a.dim_size(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({m, static_cast<int64_t>(outputs_) * block_}), &out));
    const int status = sparseflow_block_sparse_product(
        math_code<T>(allow_tf32_), a.flat<T>().data(), m, a_blocks, outputs_, block_, w.flat<T>().data(),
        device_offsets, device_partners, device_slots, transpose_ ? 1 : 0, out->flat<T>().data(), stream_of(ctx));
    OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_block_sparse_product", status)));
  }

 private:
  int block_ = 0;
  int outputs_ = 0;
  bool transpose_ = false;
  bool allow_tf32_ = false;
  DeviceCopyCache plan_;
};

template <typename T>
class BlockSparseWeightGradOp : public OpKernel {
 public:
  explicit BlockSparseWeightGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", &block_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("allow_tf32", &allow_tf32_));
    OP_REQUIRES(ctx, valid_block(block_),
                errors::InvalidArgument("BlockSparseMatMul: block_size must be 8, 16, 32 or 64, got ", block_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    const Tensor& blocks = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 2 && dy.dims() == 2 && x.dim_size(0) == dy.dim_size(0) &&
                         x.dim_size(1) % block_ == 0 && dy.dim_size(1) % block_ == 0,
                errors::InvalidArgument("BlockSparseMatMul weight gradient: x [M, K] and dy [M, N] needed"));
    OP_REQUIRES(ctx, blocks.dims() == 2 && blocks.dim_size(1) == 2,
                errors::InvalidArgument("BlockSparseMatMul weight gradient: blocks must be [nnz, 2]"));
    OP_REQUIRES(ctx, blocks.dim_size(0) < (int64_t{1} << 31),
                errors::InvalidArgument("BlockSparseMatMul weight gradient: more than 2^31 - 1 blocks"));
    const int32_t nnz = static_cast<int32_t>(blocks.dim_size(0));
    const int32_t k_blocks = static_cast<int32_t>(x.dim_size(1) / block_);
    const int32_t n_blocks = static_cast<int32_t>(dy.dim_size(1) / block_);
    OP_REQUIRES(ctx, sparseflow_block_sparse_check_blocks(blocks.flat<int32_t>().data(), nnz, k_blocks, n_blocks) == 0,
                errors::InvalidArgument("BlockSparseMatMul weight gradient: check blocks_in_range failed: every block "
                                        "(r, c) needs r in [0, ", k_blocks, ") and c in [0, ", n_blocks, ")"));
    const int32_t* device_blocks = blocks_.Get(ctx, {&blocks});
    if (device_blocks == nullptr) return;
    Tensor* dw = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({nnz, block_, block_}), &dw));
    const int status = sparseflow_block_sparse_weight_grad(
        math_code<T>(allow_tf32_), x.flat<T>().data(), dy.flat<T>().data(), x.dim_size(0), k_blocks, n_blocks, block_,
        device_blocks, nnz, dw->flat<T>().data(), stream_of(ctx));
    OP_REQUIRES(ctx, status == 0, errors::Internal(launch_error("sparseflow_block_sparse_weight_grad", status)));
  }

 private:
  int block_ = 0;
  bool allow_tf32_ = false;
  DeviceCopyCache blocks_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name(SPARSEFLOW_OP_EMBEDDING_BAG).Device(DEVICE_GPU).HostMemory("sample_count"),
                        EmbeddingBagOp);
REGISTER_KERNEL_BUILDER(Name(SPARSEFLOW_OP_EMBEDDING_BAG_GRAD).Device(DEVICE_GPU), EmbeddingBagGradOp);

#define SPARSEFLOW_REGISTER_BLOCK_SPARSE(T)                                                                 \
  REGISTER_KERNEL_BUILDER(Name(SPARSEFLOW_OP_BLOCK_SPARSE_MATMUL)                                      \
                              .Device(DEVICE_GPU)                                                          \
                              .TypeConstraint<T>("T")                                                      \
                              .HostMemory("offsets")                                                       \
                              .HostMemory("partners")                                                      \
                              .HostMemory("slots"),                                                        \
                          BlockSparseMatMulOp<T>);                                                          \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name(SPARSEFLOW_OP_BLOCK_SPARSE_WEIGHT_GRAD).Device(DEVICE_GPU).TypeConstraint<T>("T").HostMemory("blocks"), \
      BlockSparseWeightGradOp<T>);

SPARSEFLOW_REGISTER_BLOCK_SPARSE(float)
SPARSEFLOW_REGISTER_BLOCK_SPARSE(Eigen::half)
SPARSEFLOW_REGISTER_BLOCK_SPARSE(tensorflow::bfloat16)

}  // namespace sparseflow
