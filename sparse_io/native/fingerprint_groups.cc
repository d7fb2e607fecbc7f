// Groups 64-bit fingerprints: for each distinct value, in the order first met, its summed count and the
// positions where it was first and last met. This is the integer core of the raw-value counts
// (transforms/beam/_fingerprint_counts.py): there the numpy reference does the same with
// `pc.dictionary_encode` + `np.bincount` + two scatters, four passes over the values and a hash table
// of Arrow's; here one pass over an open-addressing table (linear probing, at least twice as many
// slots as values) does it. tests/test_fingerprint_groups.py checks both against a dict.

#include <cstdint>
#include <new>
#include <vector>

extern "C" {

// `fps[n]`: the values; the first `weighted` of them count `weights[i]` each, the rest 1 each.
// Writes, for the `d` distinct values in first-met order: `groups[d]` the value, `counts[d]` its summed
// count, `first[d]` / `last[d]` the positions of its first and last occurrence. Every output array must
// hold `n` entries. Returns `d`, or -1 when the table cannot be allocated.
__attribute__((visibility("default"))) int64_t sparseflow_fingerprint_groups(const int64_t* fps, int64_t n,
                                                                        const int64_t* weights, int64_t weighted,
                                                                        int64_t* groups, int64_t* counts,
                                                                        int64_t* first, int64_t* last) {
  if (n <= 0) return 0;
  int shift = 60;  // 64 - log2(slots), slots >= 16 and at least twice the values
  while ((uint64_t{1} << (64 - shift)) < 2 * static_cast<uint64_t>(n)) --shift;
  const uint64_t slots = uint64_t{1} << (64 - shift), mask = slots - 1;
  // A slot holds the value beside its group, so a probe touches one cache line, not the groups array too.
  struct Slot {
    int64_t value;
    int64_t group;  // the group index + 1; 0: empty
  };
  std::vector<Slot> table;
  try {
    table.assign(slots, Slot{0, 0});
  } catch (const std::bad_alloc&) {
    return -1;
  }
  int64_t distinct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t value = fps[i];
    const int64_t count = i < weighted ? weights[i] : 1;
    // Fibonacci hashing: the product's top bits depend on every bit of the value, so ids that differ only in
    // their high bits (shifted counters) still spread over the table.
    uint64_t slot = (static_cast<uint64_t>(value) * 0x9E3779B97F4A7C15ull) >> shift;
    for (;;) {
      Slot& entry = table[slot];
      if (entry.group == 0) {
        entry = Slot{value, distinct + 1};
        groups[distinct] = value;
        counts[distinct] = count;
        first[distinct] = i;
        last[distinct] = i;
        ++distinct;
        break;
      }
      if (entry.value == value) {
        counts[entry.group - 1] += count;
        last[entry.group - 1] = i;
        break;
      }
      slot = (slot + 1) & mask;
    }
  }
  return distinct;
}

}  // extern "C"
