// One CSR row to COO entries with the combiner folded into the gains: the rule every native COO
// conversion of the columnar reader shares (`transforms.tfdata.numpy_coo` states it and is its
// plain reference). Neighbouring equal ids of the row merge into one entry whose gain sums their
// weights; "mean" then scales the row's gains by 1 / sum(w), "sqrtn" by 1 / sqrt(sum(w^2)), both 0
// where that sum is 0. Sums are float32, in row order.

#ifndef SPARSEFLOW_COO_ROWS_H_
#define SPARSEFLOW_COO_ROWS_H_

#include <cmath>
#include <cstdint>

namespace sparseflow {

enum Combiner { kSum = 0, kMean = 1, kSqrtn = 2 };

inline float CombinerScale(float total, int combiner) {
  if (total == 0.0f) return 0.0f;
  if (combiner == kMean) return 1.0f / total;
  return 1.0f / std::sqrt(total);
}

// Writes the entries of the row whose `length` ids (and weights, or `shared_weight` each where
// `weights` is null) start at `ids`; each entry's row is `row`. Returns the entries written (at
// most `length`). The outputs must not overlap the inputs (`__restrict`: each entry's gain is
// summed in a register, not read back from the output it was just stored to).
template <typename Id>
inline int64_t RowToCoo(const Id* __restrict ids, const float* __restrict weights, int64_t length,
                        float shared_weight, int combiner, int32_t row, int32_t* __restrict out_rows,
                        Id* __restrict out_ids, float* __restrict out_gains) {
  if (length == 0) return 0;
  int64_t out = 0;
  float total = 0.0f;
  if (weights == nullptr) {
    int64_t k = 0;
    while (k < length) {
      int64_t run = 1;
      while (k + run < length && ids[k + run] == ids[k]) ++run;
      out_rows[out] = row;
      out_ids[out] = ids[k];
      out_gains[out] = static_cast<float>(run) * shared_weight;
      ++out;
      k += run;
    }
    const float w = combiner == kMean ? shared_weight : shared_weight * shared_weight;
    total = static_cast<float>(length) * w;
  } else {
    Id last = ids[0];
    float gain = weights[0];  // the open entry's, summed in row order
    out_rows[0] = row;
    out_ids[0] = last;
    if (combiner == kMean) {
      total = weights[0];
    } else if (combiner == kSqrtn) {
      total = weights[0] * weights[0];
    }
    for (int64_t k = 1; k < length; ++k) {
      const float w = weights[k];
      const Id id = ids[k];
      if (id == last) {
        gain += w;
      } else {
        out_gains[out++] = gain;
        out_rows[out] = row;
        out_ids[out] = id;
        gain = w;
        last = id;
      }
      if (combiner == kMean) {
        total += w;
      } else if (combiner == kSqrtn) {
        total += w * w;
      }
    }
    out_gains[out++] = gain;
  }
  if (combiner != kSum) {
    const float scale = CombinerScale(total, combiner);
    for (int64_t e = 0; e < out; ++e) out_gains[e] = out_gains[e] * scale;
  }
  return out;
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_COO_ROWS_H_
