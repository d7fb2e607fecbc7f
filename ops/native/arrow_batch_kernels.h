// The columnar batch kernels of arrow_batch_kernels.cc, for their two callers: the Python reader
// (`transforms.tfdata.columnar.native_batch`, through ctypes) and the Arrow dataset op
// (arrow_dataset_op.cc). Both hand them the same descriptors, so both read a unit alike.
#ifndef SPARSEFLOW_NATIVE_ARROW_BATCH_KERNELS_H_
#define SPARSEFLOW_NATIVE_ARROW_BATCH_KERNELS_H_

#include <cstdint>

namespace sparseflow {

// A list column of a unit: kArrowListFields int64s (ListField in arrow_batch_kernels.cc).
enum ArrowListField {
  kArrowOffsets = 0,
  kArrowOffsetWidth = 1,
  kArrowRows = 2,
  kArrowValidity = 3,
  kArrowValidityBit = 4,
  kArrowIds = 5,
  kArrowIdsLength = 6,
  kArrowWeights = 7,
  kArrowWeightsLength = 8,
  kArrowListFields = 9,
};

// A fixed-width column of a unit: kArrowDenseFields int64s (DenseField).
enum ArrowDenseField {
  kArrowValues = 0,
  kArrowDenseRows = 1,
  kArrowDenseValidity = 2,
  kArrowDenseValidityBit = 3,
  kArrowDenseFields = 4,
};

// What a kernel's negative return means, as the Python reader words it (`native_batch._ERRORS`).
inline const char* ArrowKernelError(int64_t code) {
  switch (code) {
    case -1: return "a row outside the column";
    case -2: return "offsets that decrease or pass the end of its ids";
    case -3: return "no room";
    default: return "unknown error";
  }
}

}  // namespace sparseflow

#define SPARSEFLOW_ARROW_EXPORT __attribute__((visibility("default")))

extern "C" {

SPARSEFLOW_ARROW_EXPORT int64_t sparseflow_arrow_lists_room(const int64_t* lists, int64_t features,
                                                            int64_t num_pieces, const int64_t* begins,
                                                            const int64_t* counts, const int64_t* index,
                                                            int64_t* error);
SPARSEFLOW_ARROW_EXPORT int64_t sparseflow_arrow_lists_to_coo_i64(
    const int64_t* lists, const float* shared_weights, int64_t features, int64_t num_pieces, const int64_t* begins,
    const int64_t* counts, const int64_t* index, int combiner, int64_t room, int32_t* out_rows, int64_t* out_ids,
    float* out_gains, int64_t* out_counts, int64_t* error);
SPARSEFLOW_ARROW_EXPORT int64_t sparseflow_arrow_lists_to_coo_i32(
    const int64_t* lists, const float* shared_weights, int64_t features, int64_t num_pieces, const int64_t* begins,
    const int64_t* counts, const int64_t* index, int combiner, int64_t room, int32_t* out_rows, int32_t* out_ids,
    float* out_gains, int64_t* out_counts, int64_t* error);
SPARSEFLOW_ARROW_EXPORT int64_t sparseflow_arrow_dense_rows(const int64_t* dense, int64_t columns,
                                                            int64_t num_pieces, const int64_t* begins,
                                                            const int64_t* counts, const int64_t* index,
                                                            int64_t item_size, const void* missing, void* out,
                                                            int64_t rows, int64_t* error);
}

#endif  // SPARSEFLOW_NATIVE_ARROW_BATCH_KERNELS_H_
