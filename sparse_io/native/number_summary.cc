// A float32 column's share of a derived feature's analysis (transforms/beam/derived.py `SourceSummary.add`) in
// one call: its present values (valid and not NaN) gathered, their count, mean, sum of squared deviations, min
// and max, and the values sorted, for the quantile sketch's first compaction. The reference does the same with
// numpy (a mask, a float64 copy, four reductions, `np.sort`); here the column is read where it lies (the Arrow
// buffers) and sorted by radix, three passes of 11 bits, where numpy's comparison sort takes most of the time.
//
// tests/test_number_summary.py checks the two give the same summary.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int kBits = 11;
constexpr uint32_t kBuckets = 1u << kBits;

// Ascending float order as unsigned order: negative values (sign set) flipped whole, the others' sign set.
inline uint32_t Key(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

inline float Value(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Sorts `count` keys in place (LSD radix, stable), `scratch` as the other buffer. The three digits' counts are
// taken in one pass, and a digit every key shares (the top bits of values of one magnitude) costs no pass.
void RadixSort(uint32_t* keys, uint32_t* scratch, int64_t count) {
  static_assert(3 * kBits >= 32, "three digits cover a key");
  uint32_t starts[3][kBuckets] = {};  // 24 KiB: in L1 beside the keys (a batch has < 2^32 values)
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t key = keys[i];
    ++starts[0][key & (kBuckets - 1)];
    ++starts[1][(key >> kBits) & (kBuckets - 1)];
    ++starts[2][key >> (2 * kBits)];
  }
  uint32_t* from = keys;
  uint32_t* to = scratch;
  for (int digit = 0; digit < 3; ++digit) {
    uint32_t* start = starts[digit];
    const int shift = digit * kBits;
    if (start[(from[0] >> shift) & (kBuckets - 1)] == count) continue;  // one value of this digit: in order
    uint32_t sum = 0;
    for (uint32_t b = 0; b < kBuckets; ++b) {
      const uint32_t n = start[b];
      start[b] = sum;
      sum += n;
    }
    for (int64_t i = 0; i < count; ++i) to[start[(from[i] >> shift) & (kBuckets - 1)]++] = from[i];
    std::swap(from, to);
  }
  if (from != keys) std::memcpy(keys, from, static_cast<size_t>(count) * sizeof(uint32_t));
}

}  // namespace

extern "C" {

// values[offset, offset + length) with Arrow's validity bitmap `validity` (null: all valid). Writes the present
// values, ascending, to `sorted` (room for `length`) and {mean, sum of squared deviations, min, max} (float64)
// to `moments`; returns how many values are present (moments untouched when none). -0.0 is taken as 0.0.
__attribute__((visibility("default"))) int64_t sparseflow_float32_summary(
    const float* values, const uint8_t* validity, int64_t offset, int64_t length, float* sorted, double* moments) {
  thread_local std::vector<uint32_t> keys, scratch;
  if (static_cast<int64_t>(keys.size()) < length) {
    keys.resize(static_cast<size_t>(length));
    scratch.resize(static_cast<size_t>(length));
  }
  // Gathered without branches (a fifth of a click log's values missing would mispredict one in five).
  uint32_t* gathered = keys.data();
  int64_t count = 0;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t at = offset + i;
    const float x = values[at];
    const bool valid = validity == nullptr || ((validity[at >> 3] >> (at & 7)) & 1);
    gathered[count] = Key(x + 0.0f);  // -0.0 + 0.0 is 0.0: one key for zero
    count += static_cast<int64_t>(valid && x == x);  // x == x: not NaN
  }
  if (count == 0) return 0;
  RadixSort(gathered, scratch.data(), count);
  // Four sums each (the adds' latency, not their count, bounds one chain).
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const float x = Value(gathered[i + j]);
      sorted[i + j] = x;
      sums[j] += x;
    }
  }
  for (; i < count; ++i) {
    sorted[i] = Value(gathered[i]);
    sums[0] += sorted[i];
  }
  const double mean = ((sums[0] + sums[1]) + (sums[2] + sums[3])) / static_cast<double>(count);
  double squares[4] = {0.0, 0.0, 0.0, 0.0};
  for (i = 0; i + 4 <= count; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const double d = static_cast<double>(sorted[i + j]) - mean;
      squares[j] += d * d;
    }
  }
  for (; i < count; ++i) {
    const double d = static_cast<double>(sorted[i]) - mean;
    squares[0] += d * d;
  }
  moments[0] = mean;
  moments[1] = (squares[0] + squares[1]) + (squares[2] + squares[3]);
  moments[2] = sorted[0];
  moments[3] = sorted[count - 1];
  return count;
}

}  // extern "C"
