// CSR rows to COO entries with the combiner folded into the gains, for the columnar shard reader.
//
// The reader assembles each batch in numpy; for features of several ids a row the conversion
// (merging neighbouring equal ids of a row, summing their weights, scaling by the row's combiner)
// took most of a batch's time as a chain of numpy passes. This is the same rule in one pass over
// the ids, called through ctypes, which releases the GIL while it runs. Its plain reference is
// `transforms.tfdata.numpy_coo.piece_coo`; the arithmetic follows it (float32 sums, a run's gain
// `count * w` for a shared weight, the scale `1 / total` or `1 / sqrt(total)`, 0 where the total is
// 0), summing in row order where numpy sums long rows pairwise, so gains agree to float32 rounding.

#include <cstdint>

#include "coo_rows.h"

namespace {

// Row r's ids are ids[starts[r] .. starts[r] + lengths[r]) (weights likewise): the rows of a batch
// are read where they lie in their unit, in the batch's order, with no gathered copy of them.
template <typename Id>
int64_t CsrToCoo(const int64_t* starts, const int64_t* lengths, int64_t num_rows, const Id* ids,
                 const float* weights, float shared_weight, int combiner, int32_t row_offset, int32_t* out_rows,
                 Id* out_ids, float* out_gains) {
  int64_t out = 0;  // the next entry
  for (int64_t row = 0; row < num_rows; ++row) {
    const int64_t length = lengths[row];
    if (length <= 0) continue;
    const int64_t at = starts[row];
    out += sparseflow::RowToCoo<Id>(ids + at, weights == nullptr ? nullptr : weights + at, length, shared_weight,
                                    combiner, static_cast<int32_t>(row) + row_offset, out_rows + out,
                                    out_ids + out, out_gains + out);
  }
  return out;
}

}  // namespace

extern "C" {

// Entries written (at most the rows' total length, the room every output must have), each entry's
// row being its position in `starts`/`lengths` plus `row_offset`. `weights` may be null: every id
// then weighs `shared_weight`. `combiner`: 0 sum, 1 mean, 2 sqrtn. The caller checks that every row
// lies inside `ids` (and `weights`).
__attribute__((visibility("default"))) int64_t sparseflow_csr_to_coo_i64(
    const int64_t* starts, const int64_t* lengths, int64_t num_rows, const int64_t* ids, const float* weights,
    float shared_weight, int combiner, int32_t row_offset, int32_t* out_rows, int64_t* out_ids, float* out_gains) {
  return CsrToCoo<int64_t>(starts, lengths, num_rows, ids, weights, shared_weight, combiner, row_offset, out_rows,
                           out_ids, out_gains);
}

__attribute__((visibility("default"))) int64_t sparseflow_csr_to_coo_i32(
    const int64_t* starts, const int64_t* lengths, int64_t num_rows, const int32_t* ids, const float* weights,
    float shared_weight, int combiner, int32_t row_offset, int32_t* out_rows, int32_t* out_ids, float* out_gains) {
  return CsrToCoo<int32_t>(starts, lengths, num_rows, ids, weights, shared_weight, combiner, row_offset, out_rows,
                           out_ids, out_gains);
}

}  // extern "C"
