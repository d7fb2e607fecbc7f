// Exact int64 id counts in one open-addressing table: the accumulator of CountTable
// (transforms/beam/_counts.py) for integer ids, with BoundedCounts' Misra-Gries step done in place.
//
// A slot is (id, count) side by side (one cache line read per probe); count 0 marks it empty (a held
// id has counted at least once). Slots are at least twice the ids (linear probing from a Fibonacci
// hash of the id, which spreads both hashed ids and a vocabulary's consecutive ones). The numpy
// reference (bincount or np.unique per buffered batch, parts summed by sorting) gives the same counts;
// tests/test_id_counts.py checks both against a collections.Counter.

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

namespace {

struct Slot {
  int64_t id;
  int64_t count;  // 0: empty
};

struct IdCounts {
  std::vector<Slot> slots;
  int shift = 64 - 10;
  int64_t size = 0;

  IdCounts() : slots(1 << 10, Slot{0, 0}) {}

  uint64_t Home(int64_t id) const {
    return (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift;
  }

  // Adds `count` to `id`'s slot, taking an empty one for a new id. The caller keeps the load <= 1/2.
  void Put(int64_t id, int64_t count) {
    const uint64_t mask = slots.size() - 1;
    for (uint64_t s = Home(id);; s = (s + 1) & mask) {
      Slot& slot = slots[s];
      if (slot.count == 0) {
        slot.id = id;
        slot.count = count;
        ++size;
        return;
      }
      if (slot.id == id) {
        slot.count += count;
        return;
      }
    }
  }

  // Puts `n` ids, the home slot of each a few ids ahead fetched early: a table past the caches
  // otherwise waits on memory once per id.
  void PutAll(const int64_t* values, const int64_t* weights, int64_t n) {
    constexpr int64_t kAhead = 16;
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) __builtin_prefetch(&slots[Home(values[i + kAhead])], 1);
      Put(values[i], weights == nullptr ? 1 : weights[i]);
    }
  }

  // Rebuilds the table with at least 2 * `held` slots from its ids whose count less `subtract` is > 0
  // (each keeping that much). Allocates before touching the table: out of memory leaves it as it was.
  void Rebuild(int64_t held, int64_t subtract) {
    uint64_t count = 1 << 10;
    int bits = 10;
    while (count < 2 * static_cast<uint64_t>(held) + 2) {
      count <<= 1;
      ++bits;
    }
    std::vector<Slot> old(count, Slot{0, 0});
    old.swap(slots);
    shift = 64 - bits;
    size = 0;
    for (const Slot& slot : old) {
      if (slot.count != 0 && slot.count - subtract > 0) Put(slot.id, slot.count - subtract);
    }
  }

  // Room for `more` new ids at load <= 1/2.
  void Reserve(int64_t more) {
    if (2 * static_cast<uint64_t>(size + more) < slots.size()) return;
    Rebuild(std::max<int64_t>(2 * size, size + more), 0);
  }
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* sparseflow_id_counts_new() {
  try {
    return new IdCounts();
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

__attribute__((visibility("default"))) void sparseflow_id_counts_free(void* table) {
  delete static_cast<IdCounts*>(table);
}

// Counts `n` ids, each once (`weights` null) or `weights[i]` times (> 0). 0, or -2 out of memory
// (the ids before the failed growth are counted, the rest not: the caller drops the table).
__attribute__((visibility("default"))) int64_t sparseflow_id_counts_add(void* handle, const int64_t* values,
                                                                      const int64_t* weights, int64_t n) {
  IdCounts& table = *static_cast<IdCounts*>(handle);
  constexpr int64_t kStep = 1 << 14;  // grow for at most this many new ids at a time, not for all of `n`
  try {
    for (int64_t start = 0; start < n; start += kStep) {
      const int64_t end = std::min(n, start + kStep);
      table.Reserve(end - start);
      table.PutAll(values + start, weights == nullptr ? nullptr : weights + start, end - start);
    }
  } catch (const std::bad_alloc&) {
    return -2;
  }
  return 0;
}

__attribute__((visibility("default"))) int64_t sparseflow_id_counts_size(void* handle) {
  return static_cast<IdCounts*>(handle)->size;
}

// Writes the held ids and their counts, `size` of each, in slot order.
__attribute__((visibility("default"))) void sparseflow_id_counts_export(void* handle, int64_t* values,
                                                                       int64_t* counts) {
  const IdCounts& table = *static_cast<IdCounts*>(handle);
  int64_t k = 0;
  for (const Slot& slot : table.slots) {
    if (slot.count != 0) {
      values[k] = slot.id;
      counts[k] = slot.count;
      ++k;
    }
  }
}

// Misra-Gries step: subtracts the (keep+1)-th largest count from every count and drops those left
// <= 0. Returns the amount subtracted (0 when at most `keep` ids are held), or -2 out of memory.
__attribute__((visibility("default"))) int64_t sparseflow_id_counts_prune(void* handle, int64_t keep) {
  IdCounts& table = *static_cast<IdCounts*>(handle);
  if (keep < 0 || table.size <= keep) return 0;
  try {
    std::vector<int64_t> held;
    held.reserve(table.size);
    for (const Slot& slot : table.slots) {
      if (slot.count != 0) held.push_back(slot.count);
    }
    // The (keep+1)-th largest is the element at (size - keep - 1) in ascending order.
    const auto at = held.begin() + (table.size - keep - 1);
    std::nth_element(held.begin(), at, held.end());
    const int64_t threshold = *at;
    int64_t left = 0;
    for (int64_t c : held) left += static_cast<int64_t>(c > threshold);
    // The slots stay as many: a summary pruned once refills to the same size, and growing back to it
    // would rebuild the table again, several times over.
    table.Rebuild(std::max<int64_t>(left, static_cast<int64_t>(table.slots.size() / 4)), threshold);
    return threshold;
  } catch (const std::bad_alloc&) {
    return -2;
  }
}

}  // extern "C"
