// crc32c_extend.h as a plain C function, so that tests compare it with google-crc32c (which writes
// the record batches' checksums the op checks).
#include "crc32c_extend.h"

extern "C" {

// `crc` extended by the n bytes at `data`, as google_crc32c.extend(crc, data) computes it.
__attribute__((visibility("default"))) uint32_t sparseflow_crc32c_extend(uint32_t crc, const uint8_t* data,
                                                                         int64_t n) {
  return sparseflow::Crc32cExtend(crc, data, static_cast<size_t>(n));
}

}  // extern "C"
