// TensorFlow bindings of the block-sparse matmul kernels (CPU). The plan (ops/block_sparse.py)
// builds the index tables once; these ops only check that they stay inside the operands.
#include <cstdint>

#include "block_sparse_kernels.h"
#include "tf_binding.h"

namespace sparseflow {
namespace {

REGISTER_OP("SparseflowBlockSparseProduct")
    .Input("input: T")
    .Input("blocks: T")
    .Input("offsets: int32")
    .Input("group_blocks: int32")
    .Input("source: int32")
    .Output("out: T")
    .Attr("T: {float, double}")
    .Attr("block_size: int")
    .Attr("transpose_blocks: bool")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle input, offsets;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &input));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &offsets));
      int64_t block_size;
      TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block_size));
      DimensionHandle groups, columns;
      TF_RETURN_IF_ERROR(c->Subtract(c->Dim(offsets, 0), 1, &groups));
      TF_RETURN_IF_ERROR(c->Multiply(groups, block_size, &columns));
      c->set_output(0, c->Matrix(c->Dim(input, 0), columns));
      return absl::OkStatus();
    })
    .Doc("out[:, g] = sum over the group's blocks b of input[:, source[b]] @ blocks[b] (or its transpose).");

REGISTER_OP("SparseflowBlockSparseWeightGrad")
    .Input("x: T")
    .Input("dy: T")
    .Input("block_row: int32")
    .Input("block_col: int32")
    .Input("row_offsets: int32")
    .Output("dw: T")
    .Attr("T: {float, double}")
    .Attr("block_size: int")
    .SetShapeFn([](InferenceContext* c) {
      int64_t block_size;
      TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block_size));
      c->set_output(0, c->MakeShape({c->Dim(c->input(2), 0), c->MakeDim(block_size), c->MakeDim(block_size)}));
      return absl::OkStatus();
    })
    .Doc("dw[b] = x[:, block_row[b]]^T @ dy[:, block_col[b]]; blocks in row-major order, row_offsets per block row.");

// Whether every value of `indices` is in [0, limit).
bool AllBelow(const Tensor& indices, int64_t limit) {
  const auto values = indices.flat<int32_t>();
  for (int64_t i = 0; i < values.size(); ++i) {
    if (values(i) < 0 || values(i) >= limit) return false;
  }
  return true;
}

template <typename T>
class BlockSparseProductOp : public OpKernel {
 public:
  explicit BlockSparseProductOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("block_size", &block_size_));
    OP_REQUIRES(context, block_size_ == 8 || block_size_ == 16 || block_size_ == 32 || block_size_ == 64,
                errors::InvalidArgument("block_size must be 8, 16, 32 or 64, got ", block_size_));
    OP_REQUIRES_OK(context, context->GetAttr("transpose_blocks", &transpose_blocks_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    const Tensor& blocks = context->input(1);
    const Tensor& offsets = context->input(2);
    const Tensor& group_blocks = context->input(3);
    const Tensor& source = context->input(4);
    const int64_t bs = block_size_;
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(input.shape()) && input.dim_size(1) % bs == 0,
                errors::InvalidArgument("input must be [M, a multiple of ", bs, "], got ", input.shape().DebugString()));
    OP_REQUIRES(context,
                blocks.dims() == 3 && blocks.dim_size(1) == bs && blocks.dim_size(2) == bs,
                errors::InvalidArgument("blocks must be [nnz, ", bs, ", ", bs, "], got ", blocks.shape().DebugString()));
    const int64_t nnz = blocks.dim_size(0);
    OP_REQUIRES(context, offsets.dims() == 1 && offsets.NumElements() >= 1,
                errors::InvalidArgument("offsets must be [groups + 1]"));
    const int64_t groups = offsets.NumElements() - 1;
    const auto offset = offsets.flat<int32_t>();
    bool ordered = offset(0) == 0 && offset(groups) <= group_blocks.NumElements();
    for (int64_t g = 0; ordered && g < groups; ++g) ordered = offset(g) <= offset(g + 1);
    OP_REQUIRES(context, ordered, errors::InvalidArgument("offsets must rise from 0 to at most len(group_blocks)"));
    OP_REQUIRES(context, AllBelow(group_blocks, nnz) && source.NumElements() == nnz &&
                             AllBelow(source, input.dim_size(1) / bs),
                errors::InvalidArgument("group_blocks or source index outside the blocks or the input"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({input.dim_size(0), groups * bs}), &out));
    const ParallelFor pool = WorkersOf(context);
    const T* block_data = blocks.flat<T>().data();
    Tensor transposed;
    if (transpose_blocks_) {
      OP_REQUIRES_OK(context, context->allocate_temp(blocks.dtype(), blocks.shape(), &transposed));
      Dispatch([&](auto size) {
        TransposeBlocks<T, decltype(size)::value>(block_data, nnz, transposed.flat<T>().data(), pool);
      });
      block_data = transposed.flat<T>().data();
    }
    Dispatch([&](auto size) {
      BlockProduct<T, decltype(size)::value>(input.flat<T>().data(), input.dim_size(0), input.dim_size(1), block_data,
                                             offset.data(), group_blocks.flat<int32_t>().data(),
                                             source.flat<int32_t>().data(), groups, out->flat<T>().data(), pool);
    });
  }

 private:
  template <typename F>
  void Dispatch(F&& f) const {
    switch (block_size_) {
      case 8: f(std::integral_constant<int, 8>()); break;
      case 16: f(std::integral_constant<int, 16>()); break;
      case 32: f(std::integral_constant<int, 32>()); break;
      default: f(std::integral_constant<int, 64>()); break;
    }
  }

  int64_t block_size_;
  bool transpose_blocks_;
};

template <typename T>
class BlockSparseWeightGradOp : public OpKernel {
 public:
  explicit BlockSparseWeightGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("block_size", &block_size_));
    OP_REQUIRES(context, block_size_ == 8 || block_size_ == 16 || block_size_ == 32 || block_size_ == 64,
                errors::InvalidArgument("block_size must be 8, 16, 32 or 64, got ", block_size_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& dy = context->input(1);
    const Tensor& block_row = context->input(2);
    const Tensor& block_col = context->input(3);
    const Tensor& row_offsets = context->input(4);
    const int64_t bs = block_size_;
    OP_REQUIRES(context,
                TensorShapeUtils::IsMatrix(x.shape()) && TensorShapeUtils::IsMatrix(dy.shape()) &&
                    x.dim_size(0) == dy.dim_size(0) && x.dim_size(1) % bs == 0 && dy.dim_size(1) % bs == 0,
                errors::InvalidArgument("x and dy must be [M, multiples of ", bs, "], got ", x.shape().DebugString(),
                                        " and ", dy.shape().DebugString()));
    const int64_t nnz = block_row.NumElements();
    const int64_t block_rows = row_offsets.NumElements() - 1;
    OP_REQUIRES(context, block_col.NumElements() == nnz && block_rows == x.dim_size(1) / bs,
                errors::InvalidArgument("block_row, block_col and row_offsets do not describe x's block rows"));
    const auto offset = row_offsets.flat<int32_t>();
    const auto rows = block_row.flat<int32_t>();
    bool ordered = offset(0) == 0 && offset(block_rows) == nnz;
    for (int64_t r = 0; ordered && r < block_rows; ++r) {
      ordered = offset(r) <= offset(r + 1);
      for (int32_t b = offset(r); ordered && b < offset(r + 1); ++b) ordered = rows(b) == r;
    }
    OP_REQUIRES(context, ordered && AllBelow(block_col, dy.dim_size(1) / bs),
                errors::InvalidArgument("blocks must be in row-major order with row_offsets per block row"));
    Tensor* dw = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({nnz, bs, bs}), &dw));
    const ParallelFor pool = WorkersOf(context);
    auto run = [&](auto size) {
      BlockWeightGrad<T, decltype(size)::value>(x.flat<T>().data(), dy.flat<T>().data(), x.dim_size(0), x.dim_size(1),
                                                dy.dim_size(1), rows.data(), block_col.flat<int32_t>().data(),
                                                offset.data(), block_rows, dw->flat<T>().data(), pool);
    };
    switch (block_size_) {
      case 8: run(std::integral_constant<int, 8>()); break;
      case 16: run(std::integral_constant<int, 16>()); break;
      case 32: run(std::integral_constant<int, 32>()); break;
      default: run(std::integral_constant<int, 64>()); break;
    }
  }

 private:
  int64_t block_size_;
};

#define SPARSEFLOW_REGISTER(T)                                                                                      \
  REGISTER_KERNEL_BUILDER(Name("SparseflowBlockSparseProduct").Device(DEVICE_CPU).TypeConstraint<T>("T"),           \
                          BlockSparseProductOp<T>);                                                                 \
  REGISTER_KERNEL_BUILDER(Name("SparseflowBlockSparseWeightGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),        \
                          BlockSparseWeightGradOp<T>);

SPARSEFLOW_REGISTER(float)
SPARSEFLOW_REGISTER(double)

#undef SPARSEFLOW_REGISTER

}  // namespace
}  // namespace sparseflow
