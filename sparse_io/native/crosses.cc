// The ids of tf.sparse.cross_hashed for inputs holding at most one value per row
// (sparse_io/crosses.py cross_arrow, whose numpy code is the reference): a crossed row's id is its
// inputs' value hashes chained by TensorFlow's FingerprintCat64 from the hash key, modulo the bins.

#include <cstdint>

namespace {

constexpr uint64_t kMul = 0xC6A4A7935BD1E995ull;

inline uint64_t ShiftMix(uint64_t v) { return v ^ (v >> 47); }

// tensorflow/core/platform/fingerprint.h FingerprintCat64.
inline uint64_t FingerprintCat64(uint64_t first, uint64_t second) {
  uint64_t result = first ^ kMul;
  result ^= ShiftMix(second * kMul) * kMul;
  result *= kMul;
  result = ShiftMix(result) * kMul;
  return ShiftMix(result);
}

}  // namespace

extern "C" {

// For each of `n` rows `rows[i]`: out[i] = chain over inputs j of hashes[j][starts[j][rows[i]]], from
// `key`, modulo `bins`. `starts[j]` null: the row itself (a flat input).
__attribute__((visibility("default"))) void sparseflow_cross_one_each(int64_t inputs, const uint64_t* const* hashes,
                                                                      const int64_t* const* starts,
                                                                      const int64_t* rows, int64_t n, uint64_t key,
                                                                      uint64_t bins, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = rows[i];
    uint64_t h = key;
    for (int64_t j = 0; j < inputs; ++j) {
      h = FingerprintCat64(h, hashes[j][starts[j] == nullptr ? row : starts[j][row]]);
    }
    out[i] = static_cast<int64_t>(h % bins);
  }
}

}  // extern "C"
