// `numpy.random.default_rng(entropy).permutation(n)`, bit for bit, for the Arrow dataset op: the
// Python reader (`row_plan.RowPlan`) shuffles units and rows with it, and the op must read them
// in exactly that order.
//
// default_rng(entropy) is PCG64 seeded from a SeedSequence of `entropy` (each integer as its
// 32-bit words, low first); permutation(n) is a Fisher-Yates shuffle of 0..n-1 from the last
// position down, drawing each position's partner with numpy's `random_interval` (masked
// rejection, 32-bit draws taken two per 64-bit output while the bound fits in 32 bits).
// tests/test_numpy_permutation.py checks it against numpy.
#ifndef SPARSEFLOW_NATIVE_NUMPY_PERMUTATION_H_
#define SPARSEFLOW_NATIVE_NUMPY_PERMUTATION_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sparseflow {

class NumpyPcg64 {
 public:
  explicit NumpyPcg64(const std::vector<uint64_t>& entropy) {
    uint64_t words[4];
    SeedSequenceState(entropy, words);
    const unsigned __int128 seed = (static_cast<unsigned __int128>(words[0]) << 64) | words[1];
    const unsigned __int128 inc = (static_cast<unsigned __int128>(words[2]) << 64) | words[3];
    inc_ = (inc << 1) | 1;
    state_ = 0;
    Step();
    state_ += seed;
    Step();
  }

  uint64_t Next64() {
    Step();
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

  uint32_t Next32() {
    if (has32_) {
      has32_ = false;
      return held32_;
    }
    const uint64_t next = Next64();
    has32_ = true;
    held32_ = static_cast<uint32_t>(next >> 32);
    return static_cast<uint32_t>(next);
  }

  // A uniform integer in [0, max].
  uint64_t Interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
    uint64_t value;
    if (max <= 0xffffffffULL) {
      while ((value = (Next32() & mask)) > max) {
      }
    } else {
      while ((value = (Next64() & mask)) > max) {
      }
    }
    return value;
  }

 private:
  void Step() {
    static const unsigned __int128 kMultiplier =
        (static_cast<unsigned __int128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
    state_ = state_ * kMultiplier + inc_;
  }

  // SeedSequence(entropy).generate_state(4, uint64).
  static void SeedSequenceState(const std::vector<uint64_t>& entropy, uint64_t* out) {
    std::vector<uint32_t> words;
    for (uint64_t v : entropy) {
      if (v == 0) words.push_back(0);
      for (; v != 0; v >>= 32) words.push_back(static_cast<uint32_t>(v));
    }
    uint32_t hash = 0x43b0d7e5;
    auto hashmix = [&hash](uint32_t value) {
      value ^= hash;
      hash *= 0x931e8875;
      value *= hash;
      return value ^ (value >> 16);
    };
    auto mix = [](uint32_t x, uint32_t y) {
      uint32_t result = 0xca01f9dd * x - 0x4973f715 * y;
      return result ^ (result >> 16);
    };
    uint32_t pool[4];
    for (size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < words.size() ? words[i] : 0);
    for (int src = 0; src < 4; ++src) {
      for (int dst = 0; dst < 4; ++dst) {
        if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
      }
    }
    for (size_t src = 4; src < words.size(); ++src) {
      for (int dst = 0; dst < 4; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src]));
    }
    uint32_t state[8];
    uint32_t hash_b = 0x8b51f9dd;
    for (int i = 0; i < 8; ++i) {
      uint32_t value = pool[i % 4] ^ hash_b;
      hash_b *= 0x58f38ded;
      value *= hash_b;
      state[i] = value ^ (value >> 16);
    }
    for (int k = 0; k < 4; ++k) out[k] = state[2 * k] | (static_cast<uint64_t>(state[2 * k + 1]) << 32);
  }

  unsigned __int128 state_ = 0, inc_ = 0;
  bool has32_ = false;
  uint32_t held32_ = 0;
};

// numpy.random.default_rng(entropy).permutation(n).
inline std::vector<int64_t> NumpyPermutation(const std::vector<uint64_t>& entropy, int64_t n) {
  std::vector<int64_t> out(n > 0 ? n : 0);
  for (int64_t i = 0; i < n; ++i) out[i] = i;
  NumpyPcg64 rng(entropy);
  for (int64_t i = n - 1; i > 0; --i) std::swap(out[i], out[rng.Interval(static_cast<uint64_t>(i))]);
  return out;
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_NUMPY_PERMUTATION_H_
