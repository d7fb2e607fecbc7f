// The declaration of SparseflowArrowDataset, whose kernel is arrow_dataset_op.cc (see there): the
// plan's tensors as inputs, its element's layout as attributes (`ElementLayout` in arrow_dataset.h),
// one dataset variant out.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace sparseflow {

REGISTER_OP("SparseflowArrowDataset")
    .Input("files: string")
    .Input("identities: int64")
    .Input("units: int64")
    .Input("lists: int64")
    .Input("shared_weights: float")
    .Input("dense: int64")
    .Input("names: string")
    .Input("checks: int64")
    .Input("spans: int64")
    .Input("settings: int64")
    .Output("handle: variant")
    .Attr("group_sizes: list(int) >= 0")
    .Attr("group_combiners: list(int) >= 0")
    .Attr("id_types: list(type) >= 0")
    .Attr("capacities: list(int) >= 0")
    .Attr("drop_overflow: bool")
    .Attr("dense_types: list(type) >= 0")
    .Attr("components: list(int) >= 1")
    .Attr("output_types: list(type) >= 1")
    .Attr("output_shapes: list(shape) >= 1")
    .SetIsStateful()  // a source dataset: not constant-folded
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

}  // namespace sparseflow
