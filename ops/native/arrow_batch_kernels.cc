// A columnar batch's COO groups and dense columns written straight from the Arrow buffers of its
// units, for the columnar shard reader (`transforms.tfdata.columnar.native_batch`, through ctypes, which
// releases the GIL while these run).
//
// The reader used to turn every unit into numpy arrays first (offsets widened to int64, dense
// nulls filled, a one-hot index per feature) and then assemble each batch with a few numpy calls
// per feature: on Criteo-like data (26 one-id features, 13 nullable dense columns) those per-unit
// and per-call costs were most of a batch's time. Here a unit is only a table of buffer addresses
// and each batch is one pass per group and per dense block. The plain references are the numpy
// paths they replace (`coo_assembly`, `batch_arrays.fill_rows`), checked against these entry by
// entry; the COO rule is `coo_rows.h`'s.
//
// A list column of a unit is described by kListFields int64s (see ListField). Offsets are those
// of the column's rows (the array's own offset applied), 32- or 64-bit; ids and weights are
// indexed by them. A null row is empty whatever its offsets say. Every row read is checked: its
// offsets must not decrease nor pass the end of the ids (or weights), so a damaged unit is refused
// rather than read past its buffers.

#include <cstdint>
#include <cstring>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "arrow_batch_kernels.h"
#include "coo_rows.h"

namespace {

enum ListField {
  kOffsets = 0,       // address of the rows' offsets (length rows + 1)
  kOffsetWidth = 1,   // 4 or 8 bytes
  kRows = 2,          // the column's rows in its unit
  kValidity = 3,      // address of the validity bitmap, or 0 (no nulls)
  kValidityBit = 4,   // bit of row 0 in that bitmap
  kIds = 5,           // address of the ids the offsets index
  kIdsLength = 6,     // how many ids there are
  kWeights = 7,       // address of the weights the offsets index, or 0 (shared weight)
  kWeightsLength = 8,
  kListFields = 9,
};

enum DenseField {
  kValues = 0,       // address of the column's first value (the array's offset applied)
  kDenseRows = 1,
  kDenseValidity = 2,
  kDenseValidityBit = 3,
  kDenseFields = 4,
};

// Error codes (negative returns); `error` then holds {code, descriptor, row}.
enum Error { kBadRow = -1, kBadOffsets = -2, kNoRoom = -3 };

inline bool BitSet(const uint8_t* bitmap, int64_t bit) {
  return (bitmap[static_cast<uint64_t>(bit) >> 3] >> (static_cast<uint64_t>(bit) & 7)) & 1;
}

// Pieces: rows of units making up the batch, in order. Piece p covers `counts[p]` rows: those from
// `begins[p]` on, or where `index[p]` is non-zero, the rows listed at that address (int64).
struct Pieces {
  int64_t num;
  const int64_t* begins;
  const int64_t* counts;
  const int64_t* index;
};

inline int64_t Fail(int64_t* error, int64_t code, int64_t descriptor, int64_t row) {
  error[0] = code;
  error[1] = descriptor;
  error[2] = row;
  return code;
}

// One list column of one unit, its descriptor read into locals once (the outputs written per row
// could otherwise alias the descriptor, and every field would be reloaded each row).
template <typename Off, typename Id>
struct ListColumn {
  const Off* offsets;
  int64_t rows;
  const uint8_t* validity;
  int64_t validity_bit;
  const Id* ids;
  int64_t ids_length;
  const float* weights;  // null: every id weighs the shared weight
  int64_t weights_length;

  explicit ListColumn(const int64_t* d)
      : offsets(reinterpret_cast<const Off*>(d[kOffsets])),
        rows(d[kRows]),
        validity(reinterpret_cast<const uint8_t*>(d[kValidity])),
        validity_bit(d[kValidityBit]),
        ids(reinterpret_cast<const Id*>(d[kIds])),
        ids_length(d[kIdsLength]),
        weights(reinterpret_cast<const float*>(d[kWeights])),
        weights_length(d[kWeightsLength]) {}

  int64_t End() const { return weights != nullptr && weights_length < ids_length ? weights_length : ids_length; }

  // Row `row` as [begin, end) into the ids, or an error code.
  int64_t Span(int64_t row, int64_t* begin, int64_t* end) const {
    if (row < 0 || row >= rows) return kBadRow;
    if (validity != nullptr && !BitSet(validity, validity_bit + row)) {
      *begin = *end = 0;
      return 0;
    }
    const int64_t b = offsets[row], e = offsets[row + 1];
    if (b < 0 || e < b || e > End()) return kBadOffsets;
    *begin = b;
    *end = e;
    return 0;
  }
};

// The gain of an id alone in its row, weighing `w`: what `RowToCoo` gives for a row of one id.
inline float OneIdGain(float w, int combiner) {
  if (combiner == sparseflow::kSum) return w;
  return w * sparseflow::CombinerScale(combiner == sparseflow::kMean ? w : w * w, combiner);
}

// Contiguous rows [begin, begin + n) without nulls, whose `span` ids lie end to end from the
// first row's offset: where every row holds at most one id, those ids are copied whole and the
// entries' rows are the rows that hold one. Returns the entries written (`span`), or -1 (the
// outputs then hold nothing to keep) when some row holds more than one id or offsets decrease.
template <typename Off, typename Id>
int64_t OneIdRows(const ListColumn<Off, Id>& c, int64_t begin, int64_t n, int64_t span, float shared_weight,
                  int combiner, int32_t batch_row, int32_t* __restrict out_rows, Id* __restrict out_ids,
                  float* __restrict out_gains) {
  const Off* __restrict offsets = c.offsets + begin;
  const int64_t first = offsets[0];
  // Every length 0 or 1: an OR of them is at most 1 (a decrease shows as a huge unsigned length).
  uint64_t lengths = 0;
  for (int64_t k = 0; k < n; ++k) {
    lengths |= static_cast<uint64_t>(static_cast<int64_t>(offsets[k + 1]) - static_cast<int64_t>(offsets[k]));
  }
  if (lengths > 1) return -1;
  // The lengths now sum to `span`, so the rows holding an id are found before row n. Each row's
  // index is stored at the next entry and kept only where the row holds one: no branch on the data.
  int64_t out = 0;
  int64_t k = 0;
  if (span == n) {  // every row holds its one id: the rows in order
    for (; k < n; ++k) out_rows[k] = batch_row + static_cast<int32_t>(k);
    out = n;
  }
#ifdef __AVX512F__
  if constexpr (sizeof(Off) == 4) {
    // 16 rows a step: the rows whose length is 1, compressed into the outputs (they have room
    // for `span` entries, and a step writes only the entries it finds). Compressed in a register
    // and stored under a mask: `vpcompressd` to memory is microcoded on Intel cores, and was
    // three quarters of this function's time.
    const __m512i step = _mm512_set1_epi32(16);
    __m512i row = _mm512_add_epi32(_mm512_set1_epi32(batch_row), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                                    10, 11, 12, 13, 14, 15));
    for (; k + 16 <= n; k += 16) {
      const __m512i low = _mm512_loadu_si512(offsets + k);
      const __m512i high = _mm512_loadu_si512(offsets + k + 1);
      const __mmask16 present = _mm512_cmpneq_epi32_mask(low, high);
      const int found = __builtin_popcount(present);
      _mm512_mask_storeu_epi32(out_rows + out, static_cast<__mmask16>((1u << found) - 1),
                               _mm512_maskz_compress_epi32(present, row));
      out += found;
      row = _mm512_add_epi32(row, step);
    }
  }
#endif
  for (; out < span; ++k) {
    out_rows[out] = batch_row + static_cast<int32_t>(k);
    out += offsets[k + 1] - offsets[k];
  }
  std::memcpy(out_ids, c.ids + first, span * sizeof(Id));
  if (c.weights == nullptr) {
    const float gain = OneIdGain(shared_weight, combiner);
    for (int64_t e = 0; e < span; ++e) out_gains[e] = gain;
  } else {
    const float* __restrict w = c.weights + first;
    for (int64_t e = 0; e < span; ++e) out_gains[e] = OneIdGain(w[e], combiner);
  }
  return span;
}

template <typename Off, typename Id>
int64_t ListsToCoo(const int64_t* lists, const float* shared_weights, int64_t features, const Pieces& pieces,
                   int combiner, int64_t room, int32_t* out_rows, Id* out_ids, float* out_gains,
                   int64_t* out_counts, int64_t* error) {
  int64_t out = 0;
  for (int64_t f = 0; f < features; ++f) {
    const int64_t first = out;
    int32_t batch_row = 0;
    for (int64_t p = 0; p < pieces.num; ++p) {
      const int64_t descriptor = p * features + f;
      const ListColumn<Off, Id> c(lists + descriptor * kListFields);
      const float shared_weight = shared_weights[descriptor];
      const int64_t n = pieces.counts[p];
      const int64_t* index = reinterpret_cast<const int64_t*>(pieces.index[p]);
      if (index == nullptr) {
        const int64_t begin = pieces.begins[p];
        if (begin < 0 || begin + n > c.rows) return Fail(error, kBadRow, descriptor, begin + n - 1);
        if (c.validity == nullptr && n > 0) {
          const int64_t b = c.offsets[begin], e = c.offsets[begin + n];
          // (A bad span goes to the row loop, which names its first bad row.)
          if (b >= 0 && b <= e && e <= c.End() && e - b <= n && out + (e - b) <= room) {
            const int64_t written = OneIdRows<Off, Id>(c, begin, n, e - b, shared_weight, combiner, batch_row,
                                                       out_rows + out, out_ids + out, out_gains + out);
            if (written >= 0) {
              out += written;
              batch_row += static_cast<int32_t>(n);
              continue;
            }
          }
        }
      }
      for (int64_t k = 0; k < n; ++k, ++batch_row) {
        const int64_t row = index == nullptr ? pieces.begins[p] + k : index[k];
        int64_t begin, end;
        const int64_t status = c.Span(row, &begin, &end);
        if (status != 0) return Fail(error, status, descriptor, row);
        if (end == begin) continue;
        if (out + (end - begin) > room) return Fail(error, kNoRoom, descriptor, row);
        out += sparseflow::RowToCoo<Id>(c.ids + begin, c.weights == nullptr ? nullptr : c.weights + begin,
                                        end - begin, shared_weight, combiner, batch_row, out_rows + out,
                                        out_ids + out, out_gains + out);
      }
    }
    out_counts[f] = out - first;
  }
  return out;
}

// All descriptors of a call must share one offset width (the caller checks): one loop per width.
template <typename Id>
int64_t ListsToCooAnyWidth(const int64_t* lists, const float* shared_weights, int64_t features,
                           const Pieces& pieces, int combiner, int64_t room, int32_t* out_rows, Id* out_ids,
                           float* out_gains, int64_t* out_counts, int64_t* error) {
  if (lists[kOffsetWidth] == 4) {
    return ListsToCoo<int32_t, Id>(lists, shared_weights, features, pieces, combiner, room, out_rows, out_ids,
                                   out_gains, out_counts, error);
  }
  return ListsToCoo<int64_t, Id>(lists, shared_weights, features, pieces, combiner, room, out_rows, out_ids,
                                 out_gains, out_counts, error);
}

template <typename Off>
int64_t ListsRoom(const int64_t* lists, int64_t features, const Pieces& pieces, int64_t* error) {
  int64_t room = 0;
  for (int64_t p = 0; p < pieces.num; ++p) {
    const int64_t* index = reinterpret_cast<const int64_t*>(pieces.index[p]);
    const int64_t n = pieces.counts[p];
    for (int64_t f = 0; f < features; ++f) {
      const int64_t descriptor = p * features + f;
      const ListColumn<Off, char> c(lists + descriptor * kListFields);
      if (index == nullptr && c.validity == nullptr) {
        // Contiguous rows without nulls: their ids are one span, checked at its two ends here and
        // at every row by the conversion. A bad span is looked at row by row below, to name the
        // first bad row.
        const int64_t begin = pieces.begins[p];
        if (begin < 0 || begin + n > c.rows) return Fail(error, kBadRow, descriptor, begin + n - 1);
        if (n == 0) continue;
        const int64_t b = c.offsets[begin], e = c.offsets[begin + n];
        if (b >= 0 && b <= e && e <= c.End()) {
          room += e - b;
          continue;
        }
      }
      for (int64_t k = 0; k < n; ++k) {
        const int64_t row = index == nullptr ? pieces.begins[p] + k : index[k];
        int64_t begin, end;
        const int64_t status = c.Span(row, &begin, &end);
        if (status != 0) return Fail(error, status, descriptor, row);
        room += end - begin;
      }
    }
  }
  return room;
}

// The validity bits [bit, bit + 16) as a mask, reading only the bytes that hold them.
inline uint32_t SixteenBits(const uint8_t* bitmap, int64_t bit) {
  const uint8_t* b = bitmap + (static_cast<uint64_t>(bit) >> 3);
  const int shift = static_cast<int>(bit & 7);
  uint32_t word = b[0] | (static_cast<uint32_t>(b[1]) << 8);
  if (shift != 0) word |= static_cast<uint32_t>(b[2]) << 16;
  return (word >> shift) & 0xFFFF;
}

// `values[k] = missing` for each of n values whose validity bit (from `bit`) is clear.
template <typename T>
void FillNulls(T* __restrict values, const uint8_t* validity, int64_t bit, int64_t n, T missing) {
  int64_t k = 0;
#ifdef __AVX512F__
  if constexpr (sizeof(T) == 4) {
    const __m512i fill = _mm512_set1_epi32(static_cast<int32_t>(missing));
    for (; k + 16 <= n; k += 16) {
      const __mmask16 nulls = static_cast<__mmask16>(~SixteenBits(validity, bit + k));
      _mm512_mask_storeu_epi32(values + k, nulls, fill);
    }
  } else {
    const __m512i fill = _mm512_set1_epi64(static_cast<int64_t>(missing));
    for (; k + 16 <= n; k += 16) {
      const uint32_t nulls = ~SixteenBits(validity, bit + k);
      _mm512_mask_storeu_epi64(values + k, static_cast<__mmask8>(nulls), fill);
      _mm512_mask_storeu_epi64(values + k + 8, static_cast<__mmask8>(nulls >> 8), fill);
    }
  }
#endif
  for (; k < n; ++k) {
    const T keep = T(0) - static_cast<T>(BitSet(validity, bit + k));  // a select, not a branch
    values[k] = (values[k] & keep) | (missing & ~keep);
  }
}

template <typename T>
int64_t DenseRows(const int64_t* dense, int64_t columns, const Pieces& pieces, T missing, T* out, int64_t rows,
                  int64_t* error) {
  for (int64_t j = 0; j < columns; ++j) {
    T* __restrict target = out + j * rows;
    int64_t at = 0;
    for (int64_t p = 0; p < pieces.num; ++p) {
      const int64_t descriptor = p * columns + j;
      const int64_t* d = dense + descriptor * kDenseFields;
      const T* __restrict values = reinterpret_cast<const T*>(d[kValues]);
      const int64_t column_rows = d[kDenseRows];
      const uint8_t* validity = reinterpret_cast<const uint8_t*>(d[kDenseValidity]);
      const int64_t bit = d[kDenseValidityBit];
      const int64_t n = pieces.counts[p];
      const int64_t* index = reinterpret_cast<const int64_t*>(pieces.index[p]);
      if (at + n > rows) return Fail(error, kNoRoom, descriptor, 0);
      if (index == nullptr) {
        const int64_t begin = pieces.begins[p];
        if (begin < 0 || begin + n > column_rows) return Fail(error, kBadRow, descriptor, begin + n - 1);
        std::memcpy(target + at, values + begin, n * sizeof(T));
        if (validity != nullptr) FillNulls<T>(target + at, validity, bit + begin, n, missing);
      } else {
        for (int64_t k = 0; k < n; ++k) {
          const int64_t row = index[k];
          if (row < 0 || row >= column_rows) return Fail(error, kBadRow, descriptor, row);
          target[at + k] = validity == nullptr || BitSet(validity, bit + row) ? values[row] : missing;
        }
      }
      at += n;
    }
  }
  return 0;
}

}  // namespace

extern "C" {

// The ids the pieces' rows hold over `features` list columns (`lists`: [pieces, features,
// kListFields], one offset width): the room the COO outputs need. Negative on a row outside its
// column or offsets that decrease or pass the ids' end, with `error` = {code, descriptor, row}.
__attribute__((visibility("default"))) int64_t sparseflow_arrow_lists_room(
    const int64_t* lists, int64_t features, int64_t num_pieces, const int64_t* begins, const int64_t* counts,
    const int64_t* index, int64_t* error) {
  const Pieces pieces{num_pieces, begins, counts, index};
  if (lists[kOffsetWidth] == 4) return ListsRoom<int32_t>(lists, features, pieces, error);
  return ListsRoom<int64_t>(lists, features, pieces, error);
}

// The COO entries of the pieces' rows, feature after feature (each feature's entries in batch-row
// order, a row's entries in id order as merged by `coo_rows.h`), at most `room` of them; each
// feature's entry count goes to `out_counts`. `shared_weights[descriptor]` weighs every id of a
// column without weights. Returns the entries written, or a negative code as above (kNoRoom where
// `room` is too small).
__attribute__((visibility("default"))) int64_t sparseflow_arrow_lists_to_coo_i64(
    const int64_t* lists, const float* shared_weights, int64_t features, int64_t num_pieces, const int64_t* begins,
    const int64_t* counts, const int64_t* index, int combiner, int64_t room, int32_t* out_rows, int64_t* out_ids,
    float* out_gains, int64_t* out_counts, int64_t* error) {
  return ListsToCooAnyWidth<int64_t>(lists, shared_weights, features, Pieces{num_pieces, begins, counts, index},
                                     combiner, room, out_rows, out_ids, out_gains, out_counts, error);
}

__attribute__((visibility("default"))) int64_t sparseflow_arrow_lists_to_coo_i32(
    const int64_t* lists, const float* shared_weights, int64_t features, int64_t num_pieces, const int64_t* begins,
    const int64_t* counts, const int64_t* index, int combiner, int64_t room, int32_t* out_rows, int32_t* out_ids,
    float* out_gains, int64_t* out_counts, int64_t* error) {
  return ListsToCooAnyWidth<int32_t>(lists, shared_weights, features, Pieces{num_pieces, begins, counts, index},
                                     combiner, room, out_rows, out_ids, out_gains, out_counts, error);
}

// Fixed-width columns (`dense`: [pieces, columns, kDenseFields], values of `item_size` bytes, 4 or
// 8) into `out`, column j at out[j * rows .. (j + 1) * rows), the pieces' rows in order; a null row
// gets the `item_size` bytes at `missing`. Returns 0, or kBadRow with `error` set.
__attribute__((visibility("default"))) int64_t sparseflow_arrow_dense_rows(
    const int64_t* dense, int64_t columns, int64_t num_pieces, const int64_t* begins, const int64_t* counts,
    const int64_t* index, int64_t item_size, const void* missing, void* out, int64_t rows, int64_t* error) {
  const Pieces pieces{num_pieces, begins, counts, index};
  if (item_size == 4) {
    uint32_t fill;
    std::memcpy(&fill, missing, 4);
    return DenseRows<uint32_t>(dense, columns, pieces, fill, static_cast<uint32_t*>(out), rows, error);
  }
  uint64_t fill;
  std::memcpy(&fill, missing, 8);
  return DenseRows<uint64_t>(dense, columns, pieces, fill, static_cast<uint64_t*>(out), rows, error);
}

}  // extern "C"
