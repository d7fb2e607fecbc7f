// The embedding bag's table gradient without hashing or sorting the batch: a radix partition of the
// entries by id range, then per range a dense slot array.
//
//   d_table[id] = sum over non-padding entries k with col k == id of gains[k] * d_out[row k]
//
// given as the distinct ids and one row each (a tf.IndexedSlices). The entries are scattered, stably,
// into `buckets` ranges of 2^shift consecutive ids (bucket = (id - min id) >> shift); every range then
// numbers its distinct ids in order of first appearance with a dense array over its 2^shift ids (no
// hashing: one L1-resident array per thread), or, where the ids spread over more than 2^16 ranges of
// 2^12 ids (hashed 64-bit ids), with a small open-addressing table per range. Each row is summed from
// zero over its entries in their input order by one thread, so the bits do not depend on the thread
// count, and are those of a per-id loop in entry order.
//
// The ids come out range by range in ascending order of range, and within a range in order of first
// appearance (as tf.unique gives them): ordered by (id - min id) >> shift first. `shift` is the smallest
// that leaves fewer than B ranges, B the largest power of two <= max(1, real / 256) (real: the
// non-padding entries), but at most 12 where 2^16 ranges of 2^12 ids cover the ids. A batch of fewer than
// 512 non-padding entries whose ids lie within 4096 of each other is one range: first appearance order.
#ifndef SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_TABLE_GRAD_H_
#define SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_TABLE_GRAD_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "embedding_bag_kernels.h"

namespace sparseflow {

// About this many entries per range: a range's slots and rows then stay in a core's L1/L2.
constexpr int64_t kEntriesPerBucket = 256;
constexpr int64_t kMaxBuckets = int64_t{1} << 16;
// Ranges at most this many ids wide number their ids with a dense array (16 KiB of int32).
constexpr int kDenseSpanBits = 12;
// A range of many entries is summed in at most this many pieces.
constexpr int64_t kMaxPiecesPerRange = 8;
// The partition's passes split the entries into at most this many stripes of at least kEntriesPerStripe.
constexpr int64_t kPartitionStripes = 8;
constexpr int64_t kEntriesPerStripe = 4096;

// A piece of the gradient's work: the slots [slot_begin, slot_end) of range `bucket`. Most pieces are a
// whole range, its entries the positions [begin, end) of the partition. A range holding far more entries
// than a chunk (the hot ids of a skewed batch) is cut into pieces by slot, so that it is spread over
// threads while every row is still summed by one thread in entry order: such a piece's entries are
// `split_positions[begin, end)`, its own entries in their input order (a stable scatter by piece).
struct GradPiece {
  int64_t bucket, slot_begin, slot_end, begin, end;
  bool split;
};

// The pieces of a partition, with `weights[p + 1] - weights[p]` the entries of piece p (for balancing chunks).
// `per_slot`, `piece_of_slot` and `next` are working space.
inline void GradPieces(const int64_t* offsets, const int64_t* slot_base, const int32_t* local_slot, int64_t used,
                       std::vector<GradPiece>& pieces, std::vector<int64_t>& weights,
                       std::vector<int64_t>& split_positions, std::vector<int64_t>& per_slot,
                       std::vector<int64_t>& piece_of_slot, std::vector<int64_t>& next) {
  pieces.clear();
  weights.assign(1, 0);
  split_positions.clear();
  for (int64_t b = 0; b < used; ++b) {
    // The bounds read once, and raw pointers in locals below: the int64 stores could otherwise alias the
    // offsets and the vectors' own storage, which would be read again after every store.
    const int64_t first = offsets[b], last = offsets[b + 1];
    const int64_t entries = last - first;
    const int64_t distinct = slot_base[b + 1] - slot_base[b];
    const int64_t parts = std::min<int64_t>({distinct, entries / kEntriesPerChunk, kMaxPiecesPerRange});
    if (parts <= 1) {
      pieces.push_back({b, 0, distinct, first, last, false});
      weights.push_back(weights.back() + entries);
      continue;
    }
    // Contiguous slot ranges holding about entries / parts entries each (a slot is never split).
    per_slot.assign(distinct, 0);
    int64_t* counts = per_slot.data();
    for (int64_t i = first; i < last; ++i) ++counts[local_slot[i]];
    piece_of_slot.assign(distinct, 0);
    const int64_t base = static_cast<int64_t>(split_positions.size());
    const size_t first_piece = pieces.size();
    int64_t slot = 0, taken = 0;
    for (int64_t p = 1; p <= parts && slot < distinct; ++p) {
      const int64_t goal = entries * p / parts;
      const int64_t begin = slot;
      int64_t sum = 0;
      while (slot < distinct && (slot == begin || taken + sum + per_slot[slot] <= goal || p == parts)) {
        piece_of_slot[slot] = static_cast<int64_t>(pieces.size() - first_piece);
        sum += per_slot[slot++];
      }
      pieces.push_back({b, begin, slot, base + taken, base + taken + sum, true});
      taken += sum;
      weights.push_back(weights.back() + sum);
    }
    split_positions.resize(base + entries);
    next.clear();
    for (size_t p = first_piece; p < pieces.size(); ++p) next.push_back(pieces[p].begin);
    int64_t* positions = split_positions.data();
    int64_t* piece_next = next.data();
    const int64_t* piece_of = piece_of_slot.data();
    for (int64_t i = first; i < last; ++i) positions[piece_next[piece_of[local_slot[i]]]++] = i;
  }
}

// The batch partitioned by id range, with each entry's slot: ids[slot] is its id.
template <typename Col>
struct IdPartition {
  int shift = 0;
  std::vector<int64_t> bucket_offsets;  // [buckets + 1] into `entries`
  std::vector<int64_t> entries;         // non-padding entries, range by range, input order within
  std::vector<int32_t> local_slot;      // [entries] the entry's id's number within its range
  std::vector<int64_t> slot_base;       // [buckets + 1] the first slot of each range
  std::vector<Col> ids;                 // [distinct]
  std::vector<GradPiece> pieces;        // the gradient's work (GradPieces)
  std::vector<int64_t> piece_weights;   // [pieces + 1] entries before each piece
  std::vector<int64_t> split_positions; // the entries of the pieces cut from a range, piece by piece
  int64_t bad_entry = -1;               // first entry with a negative id or a row outside [0, samples]
  // Working space, kept with the rest so that an IdPartition reused from call to call (the op keeps one
  // per thread) writes into pages already mapped: fresh ones cost a page fault per 4 KiB, which on a batch
  // of 40k ids took as long as the partition itself.
  std::vector<int64_t> next;
  std::vector<int64_t> distinct;
  std::vector<Col> ids_by_entry;
  std::vector<int64_t> per_slot, piece_of_slot, piece_next;
};

// Numbers the distinct ids of one range in order of first appearance, writing each entry's number and
// the range's ids (at most one per entry) from `ids_out`. Returns how many there are.
template <typename Col>
int64_t NumberRange(const Col* cols, const int64_t* entries, int64_t count, int64_t low, int shift,
                    int32_t* local_slot, Col* ids_out, std::vector<int32_t>& dense, std::vector<int64_t>& keys,
                    std::vector<int32_t>& slots) {
  int64_t distinct = 0;
  if (shift <= kDenseSpanBits) {
    dense.resize(int64_t{1} << shift, -1);
    for (int64_t i = 0; i < count; ++i) {
      const Col id = cols[entries[i]];
      int32_t& slot = dense[static_cast<int64_t>(id) - low];
      if (slot < 0) {
        slot = static_cast<int32_t>(distinct);
        ids_out[distinct++] = id;
      }
      local_slot[i] = slot;
    }
    for (int64_t i = 0; i < count; ++i) dense[static_cast<int64_t>(cols[entries[i]]) - low] = -1;
    return distinct;
  }
  int64_t capacity = 16;
  while (capacity < 2 * count) capacity <<= 1;
  keys.assign(capacity, -1);
  slots.resize(capacity);
  const int bits = 64 - __builtin_ctzll(static_cast<uint64_t>(capacity));
  for (int64_t i = 0; i < count; ++i) {
    const Col id = cols[entries[i]];
    const int64_t key = static_cast<int64_t>(id);
    uint64_t h = (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> bits;
    while (keys[h] != -1 && keys[h] != key) h = (h + 1) & (capacity - 1);
    if (keys[h] == -1) {
      keys[h] = key;
      slots[h] = static_cast<int32_t>(distinct);
      ids_out[distinct++] = id;
    }
    local_slot[i] = slots[h];
  }
  return distinct;
}

// Calls visit(s, k) for every entry k of stripes [first, last) (stripe s: [begin(s), begin(s + 1))), each stripe's
// entries in order, taking one entry of each stripe in turn. Stripes differ in length by at most one entry.
template <typename Begin, typename Visit>
inline void InLockstep(int64_t first, int64_t last, const Begin& begin, const Visit& visit) {
  int64_t at[kPartitionStripes], end[kPartitionStripes];
  int64_t shortest = std::numeric_limits<int64_t>::max();
  for (int64_t s = first; s < last; ++s) {
    at[s - first] = begin(s);
    end[s - first] = begin(s + 1);
    shortest = std::min(shortest, end[s - first] - at[s - first]);
  }
  const int64_t count = last - first;
  for (int64_t i = 0; i < shortest; ++i) {
    for (int64_t j = 0; j < count; ++j) visit(first + j, at[j] + i);
  }
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t k = at[j] + shortest; k < end[j]; ++k) visit(first + j, k);
  }
}

// Fills `part` (its earlier contents are overwritten, its buffers reused).
//
// The passes over the entries run on up to kPartitionStripes contiguous stripes of them in parallel: each
// stripe finds its id range and counts its entries per range, a prefix over (range, stripe) gives each stripe
// where its entries of a range go, and each scatters its own, so the scatter stays stable (entry order within
// a range) whatever the stripes or threads.
template <typename Row, typename Col>
void PartitionIds(const Row* rows, const Col* cols, int64_t n, int64_t samples, const ParallelFor& parallel_for,
                  IdPartition<Col>& part) {
  part.shift = 0;
  part.bad_entry = -1;
  const int64_t stripes = std::clamp<int64_t>(n / kEntriesPerStripe, 1, kPartitionStripes);
  auto stripe_begin = [n, stripes](int64_t s) { return n * s / stripes; };
  struct Extent {
    int64_t bad = -1, low = 0, high = -1, real = 0;
  };
  Extent extents[kPartitionStripes];
  parallel_for(stripes, kEntriesPerStripe * 4, [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      Extent e;
      for (int64_t k = stripe_begin(s), end = stripe_begin(s + 1); k < end; ++k) {
        const int64_t row = static_cast<int64_t>(rows[k]);
        const int64_t id = static_cast<int64_t>(cols[k]);
        if (row < 0 || row > samples || id < 0) {
          e.bad = k;
          break;
        }
        if (row == samples) continue;
        e.low = e.real == 0 ? id : std::min(e.low, id);
        e.high = e.real == 0 ? id : std::max(e.high, id);
        ++e.real;
      }
      extents[s] = e;
    }
  });
  int64_t low = 0, high = -1, real = 0;
  for (int64_t s = 0; s < stripes; ++s) {
    const Extent& e = extents[s];
    if (e.bad >= 0) {
      part.bad_entry = e.bad;  // the first stripe's with one holds the first bad entry
      return;
    }
    if (e.real == 0) continue;
    low = real == 0 ? e.low : std::min(low, e.low);
    high = real == 0 ? e.high : std::max(high, e.high);
    real += e.real;
  }
  // As many ranges as about kEntriesPerBucket entries each would fill, or, where that leaves ranges
  // wider than 2^kDenseSpanBits ids, as many as keep them that narrow (at most kMaxBuckets).
  int64_t buckets = 1;
  while (buckets < kMaxBuckets && buckets * 2 * kEntriesPerBucket <= real) buckets <<= 1;
  const uint64_t span = static_cast<uint64_t>(high - low);
  auto bits_for = [span](int64_t ranges) {
    int bits = 0;
    while (bits < 63 && (span >> bits) >= static_cast<uint64_t>(ranges)) ++bits;
    return bits;
  };
  part.shift = std::min(bits_for(buckets), std::max(kDenseSpanBits, bits_for(kMaxBuckets)));
  const int shift = part.shift;
  const int64_t used = real == 0 ? 0 : static_cast<int64_t>(span >> shift) + 1;
  // Stable counting scatter of the non-padding entries by range: counts per (stripe, range), then each
  // stripe's starting position per range. Fewer stripes where the ranges outnumber the entries (ids spread
  // over many ranges), so the counts never outgrow the batch.
  const int64_t scatter_stripes = std::clamp<int64_t>(n / std::max<int64_t>(used, 1), 1, stripes);
  auto scatter_begin = [n, scatter_stripes](int64_t s) { return n * s / scatter_stripes; };
  part.next.assign(scatter_stripes * used, 0);
  int64_t* next = part.next.data();
  // The two passes below copy the batch's constants into locals: read through the closure's references they
  // could alias the int64 counts and positions being written, and were reloaded at every entry. A thread walks
  // its stripes in lockstep, one entry of each in turn: each stripe has its own counts and positions, so a range
  // holding most entries (the hot ids of a skewed batch) is several independent chains of increments instead of
  // one that waits on its own last store at every entry (with GradPieces' loops, the serial partition of a
  // Zipf(1.2) batch of 41k ids went from 358 to 246 us).
  parallel_for(scatter_stripes, kEntriesPerStripe * 2, [&](int64_t first, int64_t last) {
    const int64_t base = low, padding = samples, width = used;
    const int bits = shift;
    int64_t* counts = next;
    InLockstep(first, last, scatter_begin, [&](int64_t s, int64_t k) {
      if (static_cast<int64_t>(rows[k]) != padding) {
        ++counts[s * width + ((static_cast<int64_t>(cols[k]) - base) >> bits)];
      }
    });
  });
  part.bucket_offsets.assign(used + 1, 0);
  int64_t at = 0;
  for (int64_t b = 0; b < used; ++b) {
    part.bucket_offsets[b] = at;
    for (int64_t s = 0; s < scatter_stripes; ++s) {
      const int64_t count = next[s * used + b];
      next[s * used + b] = at;
      at += count;
    }
  }
  part.bucket_offsets[used] = at;
  part.entries.resize(real);
  int64_t* entries = part.entries.data();
  parallel_for(scatter_stripes, kEntriesPerStripe * 3, [&](int64_t first, int64_t last) {
    const int64_t base = low, padding = samples, width = used;
    const int bits = shift;
    int64_t* where = next;
    int64_t* out = entries;
    InLockstep(first, last, scatter_begin, [&](int64_t s, int64_t k) {
      if (static_cast<int64_t>(rows[k]) != padding) {
        out[where[s * width + ((static_cast<int64_t>(cols[k]) - base) >> bits)]++] = k;
      }
    });
  });
  // Each range numbers its ids on its own; ranges are split over threads by entry counts.
  part.local_slot.resize(real);
  part.ids_by_entry.resize(real);
  part.distinct.assign(used, 0);
  std::vector<int64_t>& distinct = part.distinct;
  Col* ids_by_entry = part.ids_by_entry.data();
  const int64_t* offsets = part.bucket_offsets.data();
  const std::vector<int64_t> chunks = BalancedChunks(offsets, used, kEntriesPerChunk);
  const int64_t count = static_cast<int64_t>(chunks.size()) - 1;
  parallel_for(count, kEntriesPerChunk * 20, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> dense;
    std::vector<int64_t> keys;
    std::vector<int32_t> slots;
    for (int64_t b = chunks[begin]; b < chunks[end]; ++b) {
      const int64_t first = offsets[b];
      distinct[b] = NumberRange(cols, part.entries.data() + first, offsets[b + 1] - first,
                                low + (b << part.shift), part.shift, part.local_slot.data() + first,
                                ids_by_entry + first, dense, keys, slots);
    }
  });
  part.slot_base.assign(used + 1, 0);
  for (int64_t b = 0; b < used; ++b) part.slot_base[b + 1] = part.slot_base[b] + distinct[b];
  part.ids.resize(part.slot_base[used]);
  for (int64_t b = 0; b < used; ++b) {
    std::copy(ids_by_entry + offsets[b], ids_by_entry + offsets[b] + distinct[b], part.ids.begin() + part.slot_base[b]);
  }
  GradPieces(offsets, part.slot_base.data(), part.local_slot.data(), used, part.pieces, part.piece_weights,
             part.split_positions, part.per_slot, part.piece_of_slot, part.piece_next);
}

// values[slot] for every distinct id, piece by piece (`part.pieces`), each row summed in entry order.
template <typename T, typename Row, typename Col>
void EmbeddingBagTableGrad(const T* d_out, int64_t dim, const Row* rows, const T* gains,
                           const IdPartition<Col>& part, T* values, const ParallelFor& parallel_for) {
  using A = Accumulation<T>;
  using Acc = typename A::Acc;
  const int64_t used = static_cast<int64_t>(part.bucket_offsets.size()) - 1;
  if (used <= 0) return;
  const int64_t* entries = part.entries.data();
  const int32_t* local_slot = part.local_slot.data();
  const std::vector<GradPiece>& pieces = part.pieces;
  const int64_t* split_positions = part.split_positions.data();
  const std::vector<int64_t> chunks =
      BalancedChunks(part.piece_weights.data(), static_cast<int64_t>(pieces.size()), kEntriesPerChunk);
  const int64_t count = static_cast<int64_t>(chunks.size()) - 1;
  parallel_for(count, kEntriesPerChunk * dim * 4, [&](int64_t begin, int64_t end) {
    std::vector<Acc> scratch;
    for (int64_t p = chunks[begin]; p < chunks[end]; ++p) {
      const GradPiece& piece = pieces[p];
      const int64_t* positions = piece.split ? split_positions : nullptr;
      auto position = [&](int64_t j) { return positions == nullptr ? j : positions[j]; };
      auto row_of = [&](int64_t j) { return d_out + static_cast<int64_t>(rows[entries[position(j)]]) * dim; };
      const int64_t slots = piece.slot_end - piece.slot_begin;
      T* out = values + (part.slot_base[piece.bucket] + piece.slot_begin) * dim;
      // Float and double sum in place; 16-bit rows in a float scratch, rounded once at the end.
      Acc* acc = nullptr;
      if constexpr (std::is_same_v<T, Acc>) {
        acc = out;
      } else {
        scratch.resize(slots * dim);
        acc = scratch.data();
      }
      for (int64_t j = piece.begin; j < std::min(piece.begin + kPrefetchDistance, piece.end); ++j) {
        PrefetchRow(row_of(j), dim);
      }
      // Slots are numbered in order of their ids' first appearance, and a piece's entries keep their order, so
      // a slot is new exactly when it is the next number: its row is zeroed then, in cache, instead of in a
      // pass over the whole output before (which wrote the 10 MB of a uniform batch's gradient twice).
      int64_t fresh = 0;
      for (int64_t j = piece.begin; j < piece.end; ++j) {
        if (j + kPrefetchDistance < piece.end) PrefetchRow(row_of(j + kPrefetchDistance), dim);
        const int64_t i = position(j);
        const int64_t slot = static_cast<int64_t>(local_slot[i]) - piece.slot_begin;
        if (slot == fresh) {
          std::fill(acc + slot * dim, acc + (slot + 1) * dim, Acc(0));
          ++fresh;
        }
        A::AddScaled(acc + slot * dim, A::Load(gains[entries[i]]), row_of(j), dim);
      }
      if constexpr (!std::is_same_v<T, Acc>) {
        for (int64_t j = 0; j < slots * dim; ++j) out[j] = A::Store(acc[j]);
      }
    }
  });
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_EMBEDDING_BAG_TABLE_GRAD_H_
