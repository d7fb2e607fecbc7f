// tf.train.Example encoding and TFRecord framing of a whole record batch, in two passes over its columns.
//
// The byte-for-byte reference is sparse_io/example_encoding.py's numpy encoder (`_encode_numpy`)
// and sparse_io/tfrecord.py's `frame_records`; tests/test_native_examples.py checks the two agree. The
// wire format, per row:
//
//   Example  = 0x0A varint(len(Features)) Features
//   Features = entry*, one per column in the order given (the caller sorts them by name)
//   entry    = 0x0A varint(len) 0x0A varint(len(key)) key 0x12 varint(len(Feature)) Feature
//   Feature  = list_tag varint(len(List)) List      list_tag: 0x0A bytes, 0x12 float, 0x1A int64
//   List     = [0x0A varint(len(packed)) packed]    floats and int64s, omitted when the row has none
//            | (0x0A varint(len(value)) value)*      bytes
//
// A TFRecord frame is uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data.
// No TensorFlow and no Python: the Beam workers that write shards need neither.

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define SPARSEFLOW_X86 1
#endif

namespace {

struct Column {
  const uint8_t* key;
  int64_t key_len;
  int64_t kind;  // 0: int64 (varints), 1: float32, 2: bytes
  const int64_t* splits;  // [rows + 1]: row r holds elements splits[r] .. splits[r + 1] - 1
  const void* values;  // int64 / float32 elements, or the bytes elements' data
  const int64_t* value_offsets;  // bytes: [elements + 1] offsets of each element in `values`
};

constexpr int64_t kInt64 = 0, kFloat = 1, kBytes = 2;

inline int64_t VarintLength(uint64_t v) {
  int64_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline uint8_t* PutVarint(uint8_t* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<uint8_t>(v);
  return out;
}

// The bytes of one row's packed values (int64, float) or repeated value fields (bytes).
inline int64_t PayloadLength(const Column& c, int64_t row) {
  const int64_t lo = c.splits[row], hi = c.splits[row + 1];
  if (c.kind == kFloat) return 4 * (hi - lo);
  int64_t n = 0;
  if (c.kind == kInt64) {
    const int64_t* v = static_cast<const int64_t*>(c.values);
    for (int64_t i = lo; i < hi; ++i) n += VarintLength(static_cast<uint64_t>(v[i]));
  } else {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t len = c.value_offsets[i + 1] - c.value_offsets[i];
      n += 1 + VarintLength(static_cast<uint64_t>(len)) + len;
    }
  }
  return n;
}

struct EntrySizes {
  int64_t payload, list, feature, entry;  // entry: the map entry's content, without its tag and length
};

inline EntrySizes Sizes(const Column& c, int64_t row) {
  EntrySizes s;
  s.payload = PayloadLength(c, row);
  s.list = c.kind == kBytes ? s.payload : (s.payload > 0 ? 1 + VarintLength(s.payload) + s.payload : 0);
  s.feature = 1 + VarintLength(s.list) + s.list;
  s.entry = 1 + VarintLength(c.key_len) + c.key_len + 1 + VarintLength(s.feature) + s.feature;
  return s;
}

inline int64_t FeaturesLength(const Column* cols, int64_t ncols, int64_t row) {
  int64_t n = 0;
  for (int64_t j = 0; j < ncols; ++j) {
    const int64_t entry = Sizes(cols[j], row).entry;
    n += 1 + VarintLength(entry) + entry;
  }
  return n;
}

uint8_t* WriteExample(const Column* cols, int64_t ncols, int64_t row, int64_t features_len, uint8_t* out) {
  *out++ = 0x0A;
  out = PutVarint(out, features_len);
  for (int64_t j = 0; j < ncols; ++j) {
    const Column& c = cols[j];
    const EntrySizes s = Sizes(c, row);
    *out++ = 0x0A;
    out = PutVarint(out, s.entry);
    *out++ = 0x0A;
    out = PutVarint(out, c.key_len);
    std::memcpy(out, c.key, c.key_len);
    out += c.key_len;
    *out++ = 0x12;
    out = PutVarint(out, s.feature);
    *out++ = c.kind == kBytes ? 0x0A : (c.kind == kFloat ? 0x12 : 0x1A);
    out = PutVarint(out, s.list);
    const int64_t lo = c.splits[row], hi = c.splits[row + 1];
    if (c.kind == kBytes) {
      const uint8_t* data = static_cast<const uint8_t*>(c.values);
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t start = c.value_offsets[i], len = c.value_offsets[i + 1] - start;
        *out++ = 0x0A;
        out = PutVarint(out, len);
        std::memcpy(out, data + start, len);
        out += len;
      }
      continue;
    }
    if (s.payload == 0) continue;
    *out++ = 0x0A;
    out = PutVarint(out, s.payload);
    if (c.kind == kFloat) {
      // Little-endian float32s, as the wire format stores them (x86 and ARM are little-endian).
      std::memcpy(out, static_cast<const float*>(c.values) + lo, 4 * (hi - lo));
      out += 4 * (hi - lo);
    } else {
      const int64_t* v = static_cast<const int64_t*>(c.values);
      for (int64_t i = lo; i < hi; ++i) out = PutVarint(out, static_cast<uint64_t>(v[i]));
    }
  }
  return out;
}

// CRC-32C (Castagnoli), reflected, as TFRecord frames use it.
uint32_t crc_table[256];

bool BuildCrcTable() {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    crc_table[i] = crc;
  }
  return true;
}

const bool crc_table_ready = BuildCrcTable();

uint32_t Crc32cPortable(const uint8_t* data, int64_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (int64_t i = 0; i < n; ++i) crc = crc_table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

#ifdef SPARSEFLOW_X86
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const uint8_t* data, int64_t n) {
  uint64_t crc = 0xFFFFFFFFu;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    crc = _mm_crc32_u64(crc, word);
  }
  uint32_t crc32 = static_cast<uint32_t>(crc);
  for (; i < n; ++i) crc32 = _mm_crc32_u8(crc32, data[i]);
  return crc32 ^ 0xFFFFFFFFu;
}

const bool has_sse42 = __builtin_cpu_supports("sse4.2");
#endif

inline uint32_t Crc32c(const uint8_t* data, int64_t n) {
#ifdef SPARSEFLOW_X86
  if (has_sse42) return Crc32cHardware(data, n);
#endif
  return Crc32cPortable(data, n);
}

inline uint32_t Masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

inline uint8_t* PutLittle32(uint8_t* out, uint32_t v) {
  for (int k = 0; k < 4; ++k) *out++ = static_cast<uint8_t>(v >> (8 * k));
  return out;
}

}  // namespace

extern "C" {

// Each row's serialized Example length into `lengths[rows]` and its Features message length into
// `features[rows]`; returns the sum of `lengths`.
__attribute__((visibility("default"))) int64_t sparseflow_example_lengths(int64_t rows, const Column* cols,
                                                                         int64_t ncols, int64_t* lengths,
                                                                         int64_t* features) {
  int64_t total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    features[r] = FeaturesLength(cols, ncols, r);
    lengths[r] = 1 + VarintLength(features[r]) + features[r];
    total += lengths[r];
  }
  return total;
}

// Writes every row's Example to `out`, one after another, each in a TFRecord frame when `framed`
// (then `out` holds sum(lengths) + 16 * rows bytes, else sum(lengths)); `lengths` and `features` as
// sparseflow_example_lengths gave them for these columns. Returns the bytes written, or -1 - r when
// row r came out another length than `lengths[r]` says (lengths made from other columns).
__attribute__((visibility("default"))) int64_t sparseflow_write_examples(int64_t rows, const Column* cols,
                                                                        int64_t ncols, const int64_t* lengths,
                                                                        const int64_t* features, int32_t framed,
                                                                        uint8_t* out) {
  uint8_t* const begin = out;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t length = lengths[r];
    uint8_t* header = out;
    if (framed) {
      for (int k = 0; k < 8; ++k) *out++ = static_cast<uint8_t>(static_cast<uint64_t>(length) >> (8 * k));
      out = PutLittle32(out, Masked(Crc32c(header, 8)));
    }
    uint8_t* data = out;
    out = WriteExample(cols, ncols, r, features[r], out);
    if (out - data != length) return -1 - r;
    if (framed) out = PutLittle32(out, Masked(Crc32c(data, length)));
  }
  return out - begin;
}

}  // extern "C"
