// TensorFlow bindings of the embedding-bag kernels (CPU): SparseflowEmbeddingBag and its two
// gradient ops. The Python wrapper (ops/_native.py) registers the gradient and builds the error
// messages, so they read exactly as the stock-op composition's.
//
// The forward and the gains gradient each come in two forms: the table as a tensor, or (the
// ...Variable ops) as a resource variable read in place under its lock, as ResourceGather reads it.
// A dense read of a variable that sparse updates have touched copies the whole table (its
// copy-on-read mode), which for a large table costs far more than the bag itself.
//
// Tables of float32, float64, float16 and bfloat16; the 16-bit ones are summed in float32 and rounded
// once per output element (embedding_bag_half.h).
#include <cstdint>
#include <optional>
#include <string>

#include "embedding_bag_half.h"
#include "embedding_bag_kernels.h"
#include "embedding_bag_table_grad.h"
#include "huge_pages.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tf_binding.h"

namespace sparseflow {
namespace {

// The table operand of a kernel: an input tensor, or a variable's tensor held under a shared lock
// for as long as this object lives.
class TableOperand {
 public:
  absl::Status Open(OpKernelContext* context, int index) {
    if (context->input_dtype(index) != ::tensorflow::DT_RESOURCE) {
      tensor_ = &context->input(index);
      return absl::OkStatus();
    }
    TF_RETURN_IF_ERROR(
        ::tensorflow::LookupResource(context, ::tensorflow::HandleFromInput(context, index), &variable_));
    lock_.emplace(*variable_->mu());
    if (!variable_->tensor()->IsInitialized()) {
      return errors::FailedPrecondition("the table variable is not initialised");
    }
    tensor_ = variable_->tensor();
    return absl::OkStatus();
  }

  const Tensor& tensor() const { return *tensor_; }

 private:
  ::tensorflow::core::RefCountPtr<::tensorflow::Var> variable_;
  std::optional<::tensorflow::tf_shared_lock> lock_;
  const Tensor* tensor_ = nullptr;
};

// The table's shape for shape inference: the input's, or the variable's when its handle says.
absl::Status TableShape(InferenceContext* c, int index, ShapeHandle* shape) {
  if (c->input_handle_shapes_and_types(index) != nullptr && !c->input_handle_shapes_and_types(index)->empty()) {
    return c->WithRank((*c->input_handle_shapes_and_types(index))[0].shape, 2, shape);
  }
  if (c->input_handle_shapes_and_types(index) != nullptr || c->Rank(c->input(index)) == 0) {
    *shape = c->Matrix(c->UnknownDim(), c->UnknownDim());
    return absl::OkStatus();
  }
  return c->WithRank(c->input(index), 2, shape);
}

absl::Status EmbeddingBagShape(InferenceContext* c) {
  ShapeHandle table, unused;
  TF_RETURN_IF_ERROR(TableShape(c, 0, &table));
  for (int i = 1; i <= 3; ++i) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 1, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 0, &unused));
  DimensionHandle samples;
  TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(4, &samples));
  c->set_output(0, c->Matrix(samples, c->Dim(table, 1)));
  return absl::OkStatus();
}

absl::Status GainsGradShape(InferenceContext* c) {
  c->set_output(0, c->Vector(c->Dim(c->input(3), 0)));
  return absl::OkStatus();
}

REGISTER_OP("SparseflowEmbeddingBag")
    .Input("table: T")
    .Input("row_ids: Trow")
    .Input("col_ids: Tcol")
    .Input("gains: T")
    .Input("sample_count: int32")
    .Output("out: T")
    .Attr("T: {float, double, half, bfloat16}")
    .Attr("Trow: {int32, int64}")
    .Attr("Tcol: {int32, int64}")
    .Attr("col_message: string")
    .Attr("row_message: string")
    .Attr("length_message: string")
    .SetShapeFn(EmbeddingBagShape)
    .Doc("out[r] = sum of gains[k] * table[col_ids[k]] over entries k with row_ids[k] == r; "
         "row_ids[k] == sample_count marks padding.");

REGISTER_OP("SparseflowEmbeddingBagVariable")
    .Input("table: resource")
    .Input("row_ids: Trow")
    .Input("col_ids: Tcol")
    .Input("gains: T")
    .Input("sample_count: int32")
    .Output("out: T")
    .Attr("T: {float, double, half, bfloat16}")
    .Attr("Trow: {int32, int64}")
    .Attr("Tcol: {int32, int64}")
    .Attr("col_message: string")
    .Attr("row_message: string")
    .Attr("length_message: string")
    .SetShapeFn(EmbeddingBagShape)
    .Doc("SparseflowEmbeddingBag with the table read in place from a resource variable.");

REGISTER_OP("SparseflowEmbeddingBagTableGrad")
    .Input("d_out: T")
    .Input("row_ids: Trow")
    .Input("col_ids: Tcol")
    .Input("gains: T")
    .Output("ids: Tcol")
    .Output("values: T")
    .Attr("T: {float, double, half, bfloat16}")
    .Attr("Trow: {int32, int64}")
    .Attr("Tcol: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle d_out;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &d_out));
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Matrix(c->UnknownDim(), c->Dim(d_out, 1)));
      return absl::OkStatus();
    })
    .Doc("The table gradient of SparseflowEmbeddingBag as distinct ids and their summed rows.");

REGISTER_OP("SparseflowEmbeddingBagGainsGrad")
    .Input("d_out: T")
    .Input("table: T")
    .Input("row_ids: Trow")
    .Input("col_ids: Tcol")
    .Output("d_gains: T")
    .Attr("T: {float, double, half, bfloat16}")
    .Attr("Trow: {int32, int64}")
    .Attr("Tcol: {int32, int64}")
    .SetShapeFn(GainsGradShape)
    .Doc("The gains gradient of SparseflowEmbeddingBag: <d_out[row_ids[k]], table[col_ids[k]]>, 0 for padding.");

REGISTER_OP("SparseflowEmbeddingBagGainsGradVariable")
    .Input("d_out: T")
    .Input("table: resource")
    .Input("row_ids: Trow")
    .Input("col_ids: Tcol")
    .Output("d_gains: T")
    .Attr("T: {float, double, half, bfloat16}")
    .Attr("Trow: {int32, int64}")
    .Attr("Tcol: {int32, int64}")
    .SetShapeFn(GainsGradShape)
    .Doc("SparseflowEmbeddingBagGainsGrad with the table read in place from a resource variable.");

// Shapes shared by the three ops: a rank-2 float operand and three equally long vectors.
absl::Status CheckCoo(const Tensor& matrix, const Tensor& row_ids, const Tensor& col_ids, const Tensor* gains,
                      const std::string& length_message) {
  if (!TensorShapeUtils::IsMatrix(matrix.shape())) {
    return errors::InvalidArgument("table and d_out must be matrices, got shape ", matrix.shape().DebugString());
  }
  if (!TensorShapeUtils::IsVector(row_ids.shape()) || !TensorShapeUtils::IsVector(col_ids.shape()) ||
      (gains != nullptr && !TensorShapeUtils::IsVector(gains->shape()))) {
    return errors::InvalidArgument("row_ids, col_ids and gains must be vectors");
  }
  const int64_t n = col_ids.NumElements();
  if (row_ids.NumElements() != n || (gains != nullptr && gains->NumElements() != n)) {
    return errors::InvalidArgument(length_message);
  }
  return absl::OkStatus();
}

template <typename T, typename Row, typename Col>
class EmbeddingBagOp : public OpKernel {
 public:
  explicit EmbeddingBagOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("col_message", &col_message_));
    OP_REQUIRES_OK(context, context->GetAttr("row_message", &row_message_));
    OP_REQUIRES_OK(context, context->GetAttr("length_message", &length_message_));
  }

  void Compute(OpKernelContext* context) override {
    TableOperand table_operand;
    OP_REQUIRES_OK(context, table_operand.Open(context, 0));
    const Tensor& table = table_operand.tensor();
    OP_REQUIRES(context, table.dtype() == ::tensorflow::DataTypeToEnum<T>::value,
                errors::InvalidArgument("the table variable holds ", ::tensorflow::DataTypeString(table.dtype()),
                                        ", not ", ::tensorflow::DataTypeString(::tensorflow::DataTypeToEnum<T>::value)));
    const Tensor& row_ids = context->input(1);
    const Tensor& col_ids = context->input(2);
    const Tensor& gains = context->input(3);
    OP_REQUIRES_OK(context, CheckCoo(table, row_ids, col_ids, &gains, length_message_));
    const int64_t samples = context->input(4).scalar<int32_t>()();
    OP_REQUIRES(context, samples >= 0, errors::InvalidArgument("sample_count must be >= 0, got ", samples));
    const int64_t vocab = table.dim_size(0);
    const int64_t dim = table.dim_size(1);
    const int64_t n = col_ids.NumElements();
    const Row* rows = row_ids.flat<Row>().data();
    const Col* cols = col_ids.flat<Col>().data();
    const RowGroups groups = GroupByRow(rows, cols, n, samples, vocab);
    // The column check comes first, as in the composition.
    OP_REQUIRES(context, groups.bad_col < 0,
                errors::InvalidArgument(col_message_, "; first offending position: ", groups.bad_col));
    OP_REQUIRES(context, groups.bad_row < 0,
                errors::InvalidArgument(row_message_, "; first offending position: ", groups.bad_row));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({samples, dim}), &out));
    AdviseHugePages(table.tensor_data().data(), static_cast<int64_t>(table.TotalBytes()));
    EmbeddingBagForward(table.flat<T>().data(), dim, cols, gains.flat<T>().data(), groups, samples,
                        out->flat<T>().data(), WorkersOf(context));
  }

 private:
  std::string col_message_, row_message_, length_message_;
};

template <typename T, typename Row, typename Col>
class EmbeddingBagTableGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    const Tensor& d_out = context->input(0);
    const Tensor& row_ids = context->input(1);
    const Tensor& col_ids = context->input(2);
    const Tensor& gains = context->input(3);
    OP_REQUIRES_OK(context, CheckCoo(d_out, row_ids, col_ids, &gains, "row_ids, col_ids and gains lengths differ"));
    const int64_t samples = d_out.dim_size(0);
    const int64_t dim = d_out.dim_size(1);
    const Row* rows = row_ids.flat<Row>().data();
    const ParallelFor workers = WorkersOf(context);
    // One per thread, reused: its buffers stay mapped (about 28 bytes per entry of the largest batch seen).
    static thread_local IdPartition<Col> part;
    PartitionIds(rows, col_ids.flat<Col>().data(), col_ids.NumElements(), samples, workers, part);
    OP_REQUIRES(context, part.bad_entry < 0,
                errors::InvalidArgument("entry ", part.bad_entry, " has a negative id or a row outside [0, ",
                                        samples, "]"));
    const int64_t unique = static_cast<int64_t>(part.ids.size());
    Tensor* ids = nullptr;
    Tensor* values = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({unique}), &ids));
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({unique, dim}), &values));
    std::copy(part.ids.begin(), part.ids.end(), ids->flat<Col>().data());
    EmbeddingBagTableGrad(d_out.flat<T>().data(), dim, rows, gains.flat<T>().data(), part, values->flat<T>().data(),
                          workers);
  }
};

template <typename T, typename Row, typename Col>
class EmbeddingBagGainsGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    const Tensor& d_out = context->input(0);
    TableOperand table_operand;
    OP_REQUIRES_OK(context, table_operand.Open(context, 1));
    const Tensor& table = table_operand.tensor();
    OP_REQUIRES(context, table.dtype() == ::tensorflow::DataTypeToEnum<T>::value,
                errors::InvalidArgument("the table variable holds ", ::tensorflow::DataTypeString(table.dtype()),
                                        ", not ", ::tensorflow::DataTypeString(::tensorflow::DataTypeToEnum<T>::value)));
    const Tensor& row_ids = context->input(2);
    const Tensor& col_ids = context->input(3);
    OP_REQUIRES_OK(context, CheckCoo(d_out, row_ids, col_ids, nullptr, "row_ids and col_ids lengths differ"));
    OP_REQUIRES(context, TensorShapeUtils::IsMatrix(table.shape()) && table.dim_size(1) == d_out.dim_size(1),
                errors::InvalidArgument("table and d_out must have the same dim"));
    const int64_t samples = d_out.dim_size(0);
    const int64_t vocab = table.dim_size(0);
    const int64_t n = col_ids.NumElements();
    const Row* rows = row_ids.flat<Row>().data();
    const Col* cols = col_ids.flat<Col>().data();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t row = static_cast<int64_t>(rows[k]);
      const int64_t col = static_cast<int64_t>(cols[k]);
      OP_REQUIRES(context, row >= 0 && row <= samples && (row == samples || (col >= 0 && col < vocab)),
                  errors::InvalidArgument("entry ", k, " has an id outside [0, ", vocab, ") or a row outside [0, ",
                                          samples, "]"));
    }
    Tensor* d_gains = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({n}), &d_gains));
    AdviseHugePages(table.tensor_data().data(), static_cast<int64_t>(table.TotalBytes()));
    EmbeddingBagGainsGrad(d_out.flat<T>().data(), table.flat<T>().data(), d_out.dim_size(1), rows, cols, n, samples,
                          d_gains->flat<T>().data(), WorkersOf(context));
  }
};

#define SPARSEFLOW_KERNEL(Op, Kernel, T, Row, Col)                                                               \
  REGISTER_KERNEL_BUILDER(                                                                                        \
      Name(Op).Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Row>("Trow").TypeConstraint<Col>("Tcol"), \
      Kernel<T, Row, Col>)
#define SPARSEFLOW_REGISTER(T, Row, Col)                                                       \
  SPARSEFLOW_KERNEL("SparseflowEmbeddingBag", EmbeddingBagOp, T, Row, Col);                   \
  SPARSEFLOW_KERNEL("SparseflowEmbeddingBagVariable", EmbeddingBagOp, T, Row, Col);           \
  SPARSEFLOW_KERNEL("SparseflowEmbeddingBagTableGrad", EmbeddingBagTableGradOp, T, Row, Col); \
  SPARSEFLOW_KERNEL("SparseflowEmbeddingBagGainsGrad", EmbeddingBagGainsGradOp, T, Row, Col); \
  SPARSEFLOW_KERNEL("SparseflowEmbeddingBagGainsGradVariable", EmbeddingBagGainsGradOp, T, Row, Col);

#define SPARSEFLOW_REGISTER_IDS(T)            \
  SPARSEFLOW_REGISTER(T, int32_t, int32_t)    \
  SPARSEFLOW_REGISTER(T, int32_t, int64_t)    \
  SPARSEFLOW_REGISTER(T, int64_t, int32_t)    \
  SPARSEFLOW_REGISTER(T, int64_t, int64_t)

SPARSEFLOW_REGISTER_IDS(float)
SPARSEFLOW_REGISTER_IDS(double)
SPARSEFLOW_REGISTER_IDS(Eigen::half)
SPARSEFLOW_REGISTER_IDS(Eigen::bfloat16)

#undef SPARSEFLOW_REGISTER_IDS
#undef SPARSEFLOW_REGISTER
#undef SPARSEFLOW_KERNEL

}  // namespace
}  // namespace sparseflow
