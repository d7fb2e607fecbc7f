// Counting the frames of a TFRecord stream fed in chunks: the row count the manifest records for a
// TFRecord shard, and checks. The reference is sparse_io/manifest.py's `_TFRecordCounter`.

#include <cstdint>

namespace {

// The bytes after a frame's 12-byte header: its data and the data's CRC. A length no file can hold
// (a damaged header) leaves the frame open for ever, so the stream reads as truncated.
inline int64_t FrameRest(uint64_t length) {
  return length > (uint64_t{1} << 62) ? INT64_MAX : static_cast<int64_t>(length) + 4;
}

}  // namespace

// Counting the frames of a TFRecord stream fed in chunks (the manifest's row count of a TFRecord shard).
struct SparseflowFrameCounter {
  int64_t records;  // frames whose 12-byte header has been seen
  int64_t skip;  // bytes of the current frame's data and data CRC still to pass
  int64_t head_len;  // bytes of the current header seen so far
  uint8_t head[16];
};

extern "C" {

// Feeds `n` bytes of the stream to `state` (zeroed before the first chunk); returns the frames so far.
// The stream is whole when, after its last chunk, `skip` and `head_len` are both 0.
__attribute__((visibility("default"))) int64_t sparseflow_count_frames(SparseflowFrameCounter* state,
                                                                      const uint8_t* data, int64_t n) {
  int64_t i = 0;
  while (i < n) {
    if (state->skip > 0) {
      const int64_t step = state->skip < n - i ? state->skip : n - i;
      state->skip -= step;
      i += step;
      continue;
    }
    if (state->head_len == 0 && n - i >= 12) {
      uint64_t length = 0;
      for (int k = 0; k < 8; ++k) length |= static_cast<uint64_t>(data[i + k]) << (8 * k);
      state->records += 1;
      state->skip = FrameRest(length);
      i += 12;
      continue;
    }
    state->head[state->head_len++] = data[i++];
    if (state->head_len == 12) {
      uint64_t length = 0;
      for (int k = 0; k < 8; ++k) length |= static_cast<uint64_t>(state->head[k]) << (8 * k);
      state->records += 1;
      state->skip = FrameRest(length);
      state->head_len = 0;
    }
  }
  return state->records;
}

}  // extern "C"
