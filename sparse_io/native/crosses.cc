// The ids of tf.sparse.cross_hashed (sparse_io/crosses.py cross_arrow, whose numpy code is the
// reference): a cross's id is its inputs' value hashes chained by TensorFlow's FingerprintCat64 from the
// hash key, modulo the bins.

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

// For each of `n` crosses i, with r = rows[i] (rows null: r = i): out[i] = the chain over inputs j of
// hashes[j][positions[j][r]], from `key`, modulo `bins`.
__attribute__((visibility("default"))) void sparseflow_cross_ids(int64_t inputs, const uint64_t* const* hashes,
                                                                 const int64_t* const* positions,
                                                                 const int64_t* rows, int64_t n, uint64_t key,
                                                                 uint64_t bins, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows == nullptr ? i : rows[i];
    uint64_t h = key;
    for (int64_t j = 0; j < inputs; ++j) h = FingerprintCat64(h, hashes[j][positions[j][r]]);
    out[i] = static_cast<int64_t>(h % bins);
  }
}

}  // extern "C"
