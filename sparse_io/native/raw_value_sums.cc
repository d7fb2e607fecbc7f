// One sum of the raw-value counts (transforms/beam/_fingerprint_counts.py, `FingerprintCounts._flush`) in one
// call: the table and the buffered values grouped by fingerprint, the HyperLogLog given the new fingerprints,
// the Misra-Gries pruning, and for every kept fingerprint its first string gathered and compared with its
// last. The reference does the same with `group_fingerprints`, numpy and two Arrow gathers; here the strings
// are read where they lie (the parts' Arrow buffers), and the grouping table is the thread's, reused from sum
// to sum, so a sum neither allocates it nor faults its pages in again.
//
// tests/test_raw_value_sums.py checks the two give the same summary.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

namespace {

struct Slot {
  int64_t value;
  int64_t group;  // the group index + 1; 0: empty
};

inline uint64_t Mix64(uint64_t x) {  // transforms/beam/_sketches.py `_mix64`
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// HyperLogLog.add of one fingerprint: the register from the top `precision` bits of its hash, the rank from
// the leading zeros of the rest (a guard bit below them bounds it), plus one.
inline void Register(uint8_t* registers, int precision, int64_t fp) {
  const uint64_t h = Mix64(static_cast<uint64_t>(fp));
  const uint64_t index = h >> (64 - precision);
  const uint64_t rest = (h << precision) | (uint64_t{1} << (precision - 1));
  const uint8_t rank = static_cast<uint8_t>(__builtin_clzll(rest) + 1);
  if (registers[index] < rank) registers[index] = rank;
}

constexpr uint64_t kKeptSlots = uint64_t{1} << 20;  // 16 MiB of slots kept by a thread from sum to sum

// One part's string i: its bytes and length, from Arrow offsets of 4 or 8 bytes.
struct Part {
  const int64_t* fps;
  const void* offsets;
  int64_t width;
  const uint8_t* data;
  int64_t n;
  const int64_t* counts;  // null: 1 each

  int64_t Begin(int64_t i) const {
    return width == 4 ? static_cast<const int32_t*>(offsets)[i] : static_cast<const int64_t*>(offsets)[i];
  }
  int64_t Length(int64_t i) const { return Begin(i + 1) - Begin(i); }
  const uint8_t* Bytes(int64_t i) const { return data + Begin(i); }
};

}  // namespace

extern "C" {

// Sums `parts` parts of strings by fingerprint: part p holds n[p] strings, string i with fingerprint
// fps[p][i], bytes data[p][offsets[p][i], offsets[p][i + 1]) (offsets of widths[p] = 4 or 8 bytes, already
// moved by the array's offset) and count counts[p][i] (1 each where counts[p] is null).
//
// Groups in the order first met (part by part). Then, when `prune_above` > 0 and there are more groups than
// that, the `rank`-th largest count is subtracted from every count and the groups left at zero or below are
// dropped (written to `threshold`, else 0 there). `registers` (2^precision bytes, may be null) get every group
// from index `register_from` when `sketching` is 1, or all groups when the sum prunes (a sketch starting now).
// Writes the kept groups, in order, to out_fps, out_counts, and their first strings to out_offsets (int64,
// [kept + 1]) and out_data; every out array must hold the total of n (bytes: of the parts' strings).
//
// Returns the kept groups, -1 when memory ran out, or -2 - g when kept group g's last string differs from its
// first (two strings with one fingerprint): its first and last occurrences are then in collision[0..3] as
// (part, index, part, index).
__attribute__((visibility("default"))) int64_t sparseflow_raw_value_sum(
    int64_t parts, const int64_t* const* fps, const void* const* offsets, const int64_t* widths,
    const uint8_t* const* data, const int64_t* n, const int64_t* const* counts, int64_t prune_above, int64_t rank,
    uint8_t* registers, int64_t precision, int64_t register_from, int64_t sketching, int64_t* out_fps,
    int64_t* out_counts, int64_t* out_offsets, uint8_t* out_data, int64_t* threshold, int64_t* collision) {
  *threshold = 0;
  std::vector<Part> in(parts);
  int64_t total = 0;
  for (int64_t p = 0; p < parts; ++p) {
    in[p] = Part{fps[p], offsets[p], widths[p], data[p], n[p], counts[p]};
    total += n[p];
  }
  if (total == 0) {
    out_offsets[0] = 0;
    return 0;
  }
  int shift = 60;  // 64 - log2(slots), slots >= 16 and at least twice the values
  while ((uint64_t{1} << (64 - shift)) < 2 * static_cast<uint64_t>(total)) --shift;
  const uint64_t slots = uint64_t{1} << (64 - shift), mask = slots - 1;
  // The thread's table and occurrence arrays, kept from sum to sum (fresh ones cost a page fault per 4 KiB, more
  // than the grouping) up to kKeptSlots; the table is cleared after use by the groups it holds.
  struct Occurrence {
    int64_t first_part, first_index, last_part, last_index;
    uint64_t slot;  // the group's slot in the table, to empty it after the sum
  };
  thread_local std::vector<Slot> table;
  thread_local std::vector<Occurrence> occurrences;
  // A sum far larger than a raw-value count's usual one (a summary of a large capacity) gives its memory back.
  struct Release {
    ~Release() {
      if (table.size() > kKeptSlots) std::vector<Slot>().swap(table);
      if (occurrences.size() > kKeptSlots / 2) std::vector<Occurrence>().swap(occurrences);
    }
  } release;
  try {
    if (table.size() < slots) table.assign(slots, Slot{0, 0});
    if (occurrences.size() < static_cast<uint64_t>(total)) occurrences.resize(total);
  } catch (const std::bad_alloc&) {
    return -1;
  }
  Slot* slot_at = table.data();
  Occurrence* seen = occurrences.data();
  int64_t groups = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const Part& part = in[p];
    for (int64_t i = 0; i < part.n; ++i) {
      const int64_t value = part.fps[i];
      const int64_t count = part.counts != nullptr ? part.counts[i] : 1;
      // Fibonacci hashing: the product's top bits depend on every bit of the value.
      uint64_t s = (static_cast<uint64_t>(value) * 0x9E3779B97F4A7C15ull) >> shift;
      for (;;) {
        Slot& entry = slot_at[s];
        if (entry.group == 0) {
          entry = Slot{value, groups + 1};
          out_fps[groups] = value;
          out_counts[groups] = count;
          seen[groups] = Occurrence{p, i, p, i, s};
          ++groups;
          break;
        }
        if (entry.value == value) {
          out_counts[entry.group - 1] += count;
          seen[entry.group - 1].last_part = p;
          seen[entry.group - 1].last_index = i;
          break;
        }
        s = (s + 1) & mask;
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) slot_at[seen[g].slot] = Slot{0, 0};  // empty for the next sum

  const bool prune = prune_above > 0 && groups > prune_above && rank >= 1 && rank <= groups;
  if (registers != nullptr && (sketching != 0 || prune)) {
    for (int64_t g = sketching != 0 ? std::min(register_from, groups) : 0; g < groups; ++g) {
      Register(registers, static_cast<int>(precision), out_fps[g]);
    }
  }
  int64_t cut = 0;
  if (prune) {
    try {
      std::vector<int64_t> sorted(out_counts, out_counts + groups);
      std::nth_element(sorted.begin(), sorted.begin() + (rank - 1), sorted.end(), std::greater<int64_t>());
      cut = sorted[rank - 1];
    } catch (const std::bad_alloc&) {
      return -1;
    }
    *threshold = cut;
  }
  int64_t kept = 0, bytes = 0;
  out_offsets[0] = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (prune && out_counts[g] <= cut) continue;
    const Occurrence& at = seen[g];
    const Part& first = in[at.first_part];
    const Part& last = in[at.last_part];
    const int64_t length = first.Length(at.first_index);
    const uint8_t* bytes_first = first.Bytes(at.first_index);
    const bool once = at.last_part == at.first_part && at.last_index == at.first_index;
    if (!once && (last.Length(at.last_index) != length ||
                  std::memcmp(last.Bytes(at.last_index), bytes_first, static_cast<size_t>(length)) != 0)) {
      collision[0] = at.first_part;
      collision[1] = at.first_index;
      collision[2] = at.last_part;
      collision[3] = at.last_index;
      return -2 - kept;
    }
    out_fps[kept] = out_fps[g];
    out_counts[kept] = out_counts[g] - cut;
    std::memcpy(out_data + bytes, bytes_first, static_cast<size_t>(length));
    bytes += length;
    out_offsets[++kept] = bytes;
  }
  return kept;
}

// HyperLogLog.add of `n` keys (an integer's own bits, or a string's Fingerprint64), for the id statistics'
// sketches (transforms/beam/_sketches.py, whose numpy code is the reference).
__attribute__((visibility("default"))) void sparseflow_hll_add(uint8_t* registers, int64_t precision,
                                                               const int64_t* keys, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Register(registers, static_cast<int>(precision), keys[i]);
}

}  // extern "C"
