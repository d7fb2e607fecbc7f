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
// most `length`).
template <typename Id>
inline int64_t RowToCoo(const Id* ids, const float* weights, int64_t length, float shared_weight, int combiner,
                        int32_t row, int32_t* out_rows, Id* out_ids, float* out_gains) {
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
    for (int64_t k = 0; k < length; ++k) {
      const float w = weights[k];
      if (k > 0 && ids[k] == ids[k - 1]) {
        out_gains[out - 1] += w;
      } else {
        out_rows[out] = row;
        out_ids[out] = ids[k];
        out_gains[out] = w;
        ++out;
      }
      if (combiner == kMean) {
        total += w;
      } else if (combiner == kSqrtn) {
        total += w * w;
      }
    }
  }
  if (combiner != kSum) {
    const float scale = CombinerScale(total, combiner);
    for (int64_t e = 0; e < out; ++e) out_gains[e] = out_gains[e] * scale;
  }
  return out;
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_COO_ROWS_H_
