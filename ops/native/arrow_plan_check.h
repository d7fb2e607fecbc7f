// The Arrow dataset op's check of a plan it is handed (arrow_dataset_op.cc): every buffer a unit's
// descriptors or checksum name lies inside the file, as its identity gives its size, so that a
// plan the op did not get from `transforms.tfdata.columnar.arrow_op` cannot make it read past a
// mapping. Without TensorFlow: the plan as plain arrays.
#ifndef SPARSEFLOW_NATIVE_ARROW_PLAN_CHECK_H_
#define SPARSEFLOW_NATIVE_ARROW_PLAN_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "arrow_batch_kernels.h"

namespace sparseflow {

// Whether [offset, offset + bytes) lies in a file of `size` bytes.
inline bool Inside(int64_t offset, int64_t bytes, int64_t size) {
  return offset >= 0 && bytes >= 0 && offset <= size && bytes <= size - offset;
}

inline std::string CheckListBuffers(const int64_t* list, int64_t id_size, int64_t file_size) {
  const int64_t rows = list[kArrowRows];
  if (rows < 0 || (list[kArrowOffsetWidth] != 4 && list[kArrowOffsetWidth] != 8)) return "a bad list column";
  if (!Inside(list[kArrowOffsets], (rows + 1) * list[kArrowOffsetWidth], file_size)) return "offsets past the file";
  if (list[kArrowValidity] != 0 && !Inside(list[kArrowValidity], (list[kArrowValidityBit] + rows + 7) / 8, file_size))
    return "a validity bitmap past the file";
  if (!Inside(list[kArrowIds], list[kArrowIdsLength] * id_size, file_size)) return "ids past the file";
  if (list[kArrowWeights] != 0 && !Inside(list[kArrowWeights], list[kArrowWeightsLength] * 4, file_size))
    return "weights past the file";
  return "";
}

inline std::string CheckDenseBuffers(const int64_t* dense, int64_t item, int64_t file_size) {
  const int64_t rows = dense[kArrowDenseRows];
  if (rows < 0 || !Inside(dense[kArrowValues], rows * item, file_size)) return "values past the file";
  if (dense[kArrowDenseValidity] != 0 &&
      !Inside(dense[kArrowDenseValidity], (dense[kArrowDenseValidityBit] + rows + 7) / 8, file_size))
    return "a validity bitmap past the file";
  return "";
}

// One unit of a plan: its list descriptors [lists, kArrowListFields] and dense ones [dense,
// kArrowDenseFields], unit 0's list descriptors (each group keeps one offset width), its checksum
// row (expected, initial, first span, spans) and all the spans [num_spans, 2].
struct UnitPlan {
  const int64_t* lists;
  const int64_t* dense;
  const int64_t* first_lists;
  const int64_t* checks;
  const int64_t* spans;
  int64_t num_spans;
  int64_t file_size;
};

// "" or what is wrong, with `*column` the list (then dense) column concerned, or -1.
// `id_sizes`: per group its ids' bytes; `dense_items`: per dense column its values' bytes.
inline std::string CheckUnit(const UnitPlan& u, const std::vector<int64_t>& group_sizes,
                             const std::vector<int64_t>& id_sizes, const std::vector<int64_t>& dense_items,
                             int64_t* column) {
  *column = -1;
  if (u.checks[2] < 0 || u.checks[3] < 0 || u.checks[2] + u.checks[3] > u.num_spans) {
    return "checksum spans out of range";
  }
  for (int64_t s = u.checks[2]; s < u.checks[2] + u.checks[3]; ++s) {
    if (!Inside(u.spans[2 * s], u.spans[2 * s + 1], u.file_size)) return "a checksummed buffer past the file";
  }
  int64_t f = 0;
  for (size_t g = 0; g < group_sizes.size(); ++g) {
    for (int64_t k = 0; k < group_sizes[g]; ++k, ++f) {
      const int64_t* descriptor = u.lists + f * kArrowListFields;
      std::string problem = CheckListBuffers(descriptor, id_sizes[g], u.file_size);
      // One offset width per group: the kernels take one per call.
      const int64_t width = u.first_lists[(f - k) * kArrowListFields + kArrowOffsetWidth];
      if (problem.empty() && descriptor[kArrowOffsetWidth] != width) {
        problem = "offset widths that differ within a group";
      }
      if (!problem.empty()) {
        *column = f;
        return problem;
      }
    }
  }
  for (size_t c = 0; c < dense_items.size(); ++c) {
    const std::string problem = CheckDenseBuffers(u.dense + c * kArrowDenseFields, dense_items[c], u.file_size);
    if (!problem.empty()) {
      *column = f + static_cast<int64_t>(c);
      return problem;
    }
  }
  return "";
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_ARROW_PLAN_CHECK_H_
