// Exact token hash tables over Arrow string buffers: the vocabulary lookup of ApplyVocabulary
// (TokenTable) and the token counts of ComputeVocabulary (TokenCounter).
//
// The table copies the vocabulary's bytes, hashes each token, and places a slot per token in an
// open-addressing array of at least twice as many slots as tokens (linear probing). A lookup hashes
// the probe, walks the slots from its home slot, and answers the index of the slot whose token equals
// it (see `Slot`), or -1 at the first empty slot: a hash collision can never give a wrong
// index. The numpy reference (transforms/beam/lookup.py: Fingerprint64, a sorted table, a byte
// comparison) gives the same answers; tests/test_token_table.py checks both against a dict.

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

namespace {

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

// A 64-bit hash of a byte string: a multiply-rotate round per 8-byte word, the length folded in.
uint64_t HashBytes(const uint8_t* p, int64_t n) {
  constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t h = 0x27D4EB2F165667C5ull ^ (static_cast<uint64_t>(n) * kP1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = Rotl(h ^ (w * kP2), 31) * kP1;
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    h = Rotl(h ^ (w * kP2), 31) * kP1;
  }
  return Mix(h);
}

// A slot holds what decides most comparisons without touching the token's bytes elsewhere in memory:
// the token's first 8 bytes (zero-padded), 24 bits of its hash and its length (capped at 255). Tokens of
// at most 8 bytes are equal exactly when these agree; longer ones are then compared byte for byte.
struct Slot {
  uint64_t head;
  uint32_t check;
  int32_t index;  // -1: empty
};

struct Key {
  uint64_t hash;
  uint64_t head;
  uint32_t check;
};

inline Key KeyOf(const uint8_t* p, int64_t n) {
  Key key;
  key.hash = HashBytes(p, n);
  key.head = 0;
  std::memcpy(&key.head, p, n < 8 ? n : 8);
  key.check = static_cast<uint32_t>(key.hash >> 40) << 8 | static_cast<uint32_t>(n < 255 ? n : 255);
  return key;
}

// Tokens (their bytes end to end, int64 offsets) and an open-addressing index over them, linear probing.
struct SlotIndex {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> offsets{0};  // [tokens + 1] into `bytes`
  std::vector<Slot> slots;
  uint64_t mask = 0;

  // The slot holding the token, or the empty slot where it would go.
  uint64_t Probe(const uint8_t* p, int64_t n, const Key& key) const {
    for (uint64_t s = key.hash & mask;; s = (s + 1) & mask) {
      const Slot& slot = slots[s];
      if (slot.index < 0) return s;
      if (slot.check != key.check || slot.head != key.head) continue;
      if (n <= 8) return s;
      const int64_t start = offsets[slot.index], len = offsets[slot.index + 1] - start;
      if (len == n && std::memcmp(bytes.data() + start, p, n) == 0) return s;
    }
  }

  void Resize(uint64_t capacity) {
    std::vector<Slot> fresh(capacity, Slot{0, 0, -1});
    const uint64_t fresh_mask = capacity - 1;
    for (const Slot& slot : slots) {
      if (slot.index < 0) continue;
      const int64_t start = offsets[slot.index];
      uint64_t s = HashBytes(bytes.data() + start, offsets[slot.index + 1] - start) & fresh_mask;
      while (fresh[s].index >= 0) s = (s + 1) & fresh_mask;
      fresh[s] = slot;
    }
    slots.swap(fresh);
    mask = fresh_mask;
  }

  // Appends a token not yet present into the empty slot `s` that Probe gave; returns its index.
  int32_t Insert(uint64_t s, const uint8_t* p, int64_t n, const Key& key) {
    const int32_t index = static_cast<int32_t>(offsets.size() - 1);
    bytes.insert(bytes.end(), p, p + n);
    offsets.push_back(static_cast<int64_t>(bytes.size()));
    slots[s] = Slot{key.head, key.check, index};
    return index;
  }

  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

constexpr int64_t kMaxTokens = INT32_MAX - 1;

struct TokenTable : SlotIndex {
  int64_t Find(const uint8_t* p, int64_t n) const {
    const Slot& slot = slots[Probe(p, n, KeyOf(p, n))];
    return slot.index;
  }
};

// token -> count; tokens kept in first-seen order, growing at half full.
struct TokenCounter : SlotIndex {
  std::vector<int64_t> counts;

  TokenCounter() { Resize(1024); }

  void Add(const uint8_t* p, int64_t n) {
    const Key key = KeyOf(p, n);
    const uint64_t s = Probe(p, n, key);
    if (slots[s].index >= 0) {
      counts[slots[s].index] += 1;
      return;
    }
    if (size() >= kMaxTokens) throw std::bad_alloc();
    Insert(s, p, n, key);
    counts.push_back(1);
    if (2 * counts.size() > slots.size()) Resize(slots.size() * 2);
  }
};

template <typename Offset>
void CountAll(TokenCounter& counter, const Offset* offsets, const uint8_t* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = offsets[i];
    counter.Add(data + start, static_cast<int64_t>(offsets[i + 1]) - start);
  }
}

template <typename Offset>
void LookupAll(const TokenTable& table, const Offset* offsets, const uint8_t* data, int64_t n, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = offsets[i], len = static_cast<int64_t>(offsets[i + 1]) - start;
    const uint8_t* p = data + start;
    out[i] = table.Find(p, len);
  }
}

}  // namespace

extern "C" {

// A table of `count` tokens: token i is data[offsets[i] .. offsets[i + 1]) (int64 offsets). The bytes are
// copied. A repeated token keeps its first index. Returns nullptr when memory runs out or `count` passes
// 2^31 - 2 tokens.
__attribute__((visibility("default"))) void* sparseflow_token_table_new(const int64_t* offsets, const uint8_t* data,
                                                                       int64_t count) {
  if (count > kMaxTokens) return nullptr;
  TokenTable* table = new (std::nothrow) TokenTable;
  if (table == nullptr) return nullptr;
  try {
    const int64_t first = count > 0 ? offsets[0] : 0;
    const int64_t size = count > 0 ? offsets[count] - first : 0;
    table->bytes.assign(data + first, data + first + size);
    table->offsets.resize(count + 1);
    for (int64_t i = 0; i <= count; ++i) table->offsets[i] = (count > 0 ? offsets[i] : 0) - first;
    uint64_t capacity = 16;
    while (capacity < 2 * static_cast<uint64_t>(count)) capacity <<= 1;
    table->slots.assign(capacity, Slot{0, 0, -1});
    table->mask = capacity - 1;
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t* p = table->bytes.data() + table->offsets[i];
      const int64_t len = table->offsets[i + 1] - table->offsets[i];
      const Key key = KeyOf(p, len);
      const uint64_t s = table->Probe(p, len, key);
      if (table->slots[s].index >= 0) continue;  // a repeated token keeps its first index
      table->slots[s] = Slot{key.head, key.check, static_cast<int32_t>(i)};
    }
  } catch (const std::bad_alloc&) {
    delete table;
    return nullptr;
  }
  return table;
}

__attribute__((visibility("default"))) void sparseflow_token_table_free(void* table) {
  delete static_cast<TokenTable*>(table);
}

// out[i] = the index of string i (data[offsets[i] .. offsets[i + 1]), offsets of `offset_bytes` 4 or 8),
// or -1 when the table lacks it. Returns 0, or -1 for another offset width.
__attribute__((visibility("default"))) int32_t sparseflow_token_table_lookup(const void* table, const void* offsets,
                                                                            int32_t offset_bytes,
                                                                            const uint8_t* data, int64_t n,
                                                                            int64_t* out) {
  const TokenTable& t = *static_cast<const TokenTable*>(table);
  if (offset_bytes == 4) {
    LookupAll(t, static_cast<const int32_t*>(offsets), data, n, out);
  } else if (offset_bytes == 8) {
    LookupAll(t, static_cast<const int64_t*>(offsets), data, n, out);
  } else {
    return -1;
  }
  return 0;
}

__attribute__((visibility("default"))) void* sparseflow_token_counter_new() {
  return new (std::nothrow) TokenCounter;
}

__attribute__((visibility("default"))) void sparseflow_token_counter_free(void* counter) {
  delete static_cast<TokenCounter*>(counter);
}

// Counts each of `n` strings (offsets of `offset_bytes` 4 or 8, as the lookup). Returns the distinct
// tokens so far, -1 for another offset width, -2 when memory ran out (the counter is then unusable).
__attribute__((visibility("default"))) int64_t sparseflow_token_counter_add(void* counter, const void* offsets,
                                                                           int32_t offset_bytes,
                                                                           const uint8_t* data, int64_t n) {
  TokenCounter& c = *static_cast<TokenCounter*>(counter);
  try {
    if (offset_bytes == 4) {
      CountAll(c, static_cast<const int32_t*>(offsets), data, n);
    } else if (offset_bytes == 8) {
      CountAll(c, static_cast<const int64_t*>(offsets), data, n);
    } else {
      return -1;
    }
  } catch (const std::bad_alloc&) {
    return -2;
  }
  return static_cast<int64_t>(c.counts.size());
}

// The distinct tokens and the bytes they hold, for sizing `sparseflow_token_counter_export`'s outputs.
__attribute__((visibility("default"))) void sparseflow_token_counter_size(const void* counter, int64_t* tokens,
                                                                         int64_t* bytes) {
  const TokenCounter& c = *static_cast<const TokenCounter*>(counter);
  *tokens = static_cast<int64_t>(c.counts.size());
  *bytes = static_cast<int64_t>(c.bytes.size());
}

// Copies the tokens (int64 offsets [tokens + 1], their bytes) and counts [tokens] out, first seen first.
__attribute__((visibility("default"))) void sparseflow_token_counter_export(const void* counter, int64_t* offsets,
                                                                           uint8_t* data, int64_t* counts) {
  const TokenCounter& c = *static_cast<const TokenCounter*>(counter);
  std::memcpy(offsets, c.offsets.data(), c.offsets.size() * sizeof(int64_t));
  if (!c.bytes.empty()) std::memcpy(data, c.bytes.data(), c.bytes.size());
  if (!c.counts.empty()) std::memcpy(counts, c.counts.data(), c.counts.size() * sizeof(int64_t));
}

}  // extern "C"
