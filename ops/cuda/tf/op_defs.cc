// The op definitions (inputs, outputs, attributes, shapes) of the sparseflow kernels. A library that
// already defines these ops (a CPU binding) links the GPU kernels of gpu_kernels.cc without this file:
// an op may be defined once per process.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

#include "op_names.h"

namespace sparseflow {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// out[r] = sum over entries k with row_ids[k] == r of gains[k] * table[col_ids[k]]; rows equal to
// sample_count are padding. rows_sorted: 1 row_ids known non-decreasing, 0 not, -1 unknown (checked on the
// device). validate (off by default: it costs a host synchronisation every step): reject ids outside
// [0, vocab) and rows outside [0, sample_count] with an InvalidArgument error naming the first position.
// Off, such entries are skipped (never read), as the kernels' contract says.
REGISTER_OP(SPARSEFLOW_OP_EMBEDDING_BAG)
    .Input("table: float")
    .Input("row_ids: int32")
    .Input("col_ids: int64")
    .Input("gains: float")
    .Input("sample_count: int32")
    .Output("out: float")
    .Attr("rows_sorted: int = -1")
    .Attr("validate: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle table;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &table));
      DimensionHandle samples;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(4, &samples));
      c->set_output(0, c->Matrix(samples, c->Dim(table, 1)));
      return absl::OkStatus();
    });

// The table gradient as IndexedSlices parts (unique_ids ascending, d_rows summed per id; padding entries
// excluded) and the gains gradient d_gains[k] = dot(out_grad[row_ids[k]], table[col_ids[k]]).
REGISTER_OP(SPARSEFLOW_OP_EMBEDDING_BAG_GRAD)
    .Input("out_grad: float")
    .Input("table: float")
    .Input("row_ids: int32")
    .Input("col_ids: int64")
    .Input("gains: float")
    .Output("unique_ids: int64")
    .Output("d_rows: float")
    .Output("d_gains: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out_grad;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &out_grad));
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Matrix(c->UnknownDim(), c->Dim(out_grad, 1)));
      c->set_output(2, c->Vector(c->Dim(c->input(4), 0)));
      return absl::OkStatus();
    });

// out[:, o] = sum over plan members e of output o of a[:, partners[e]] @ w[slots[e]] (transposed with
// transpose_blocks): y = x @ W with the by-column plan, dx = dy @ W^T with the by-row plan and
// transpose_blocks (ops/cuda/block_plan.h). allow_tf32 (float only, opt-in): the products' inputs are rounded to
// TF32 (10 mantissa bits) on tensor cores at blocks 16 and 32; the sums stay float32.
REGISTER_OP(SPARSEFLOW_OP_BLOCK_SPARSE_MATMUL)
    .Input("a: T")
    .Input("w: T")
    .Input("offsets: int32")
    .Input("partners: int32")
    .Input("slots: int32")
    .Output("out: T")
    .Attr("T: {float, half, bfloat16}")
    .Attr("block_size: int")
    .Attr("outputs: int >= 1")
    .Attr("transpose_blocks: bool = false")
    .Attr("allow_tf32: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle a;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &a));
      int block = 0, outputs = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block));
      TF_RETURN_IF_ERROR(c->GetAttr("outputs", &outputs));
      c->set_output(0, c->Matrix(c->Dim(a, 0), static_cast<int64_t>(block) * outputs));
      return absl::OkStatus();
    });

// dw[i] = x[:, blocks[i, 0]]^T @ dy[:, blocks[i, 1]] (block columns), for blocks = np.argwhere(layout).
// allow_tf32 as for the product, at blocks 16-64.
REGISTER_OP(SPARSEFLOW_OP_BLOCK_SPARSE_WEIGHT_GRAD)
    .Input("x: T")
    .Input("dy: T")
    .Input("blocks: int32")
    .Output("dw: T")
    .Attr("T: {float, half, bfloat16}")
    .Attr("block_size: int")
    .Attr("allow_tf32: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle blocks;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &blocks));
      int block = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block));
      c->set_output(0, c->MakeShape({c->Dim(blocks, 0), block, block}));
      return absl::OkStatus();
    });

}  // namespace sparseflow
