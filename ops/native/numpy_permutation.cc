// numpy_permutation.h as a plain C function, so that tests compare it with numpy itself.
#include "numpy_permutation.h"

#include <cstring>

extern "C" {

// out[0..n) = numpy.random.default_rng(entropy[0..count)).permutation(n).
__attribute__((visibility("default"))) void sparseflow_numpy_permutation(const uint64_t* entropy, int64_t count,
                                                                         int64_t n, int64_t* out) {
  const std::vector<int64_t> order = sparseflow::NumpyPermutation(std::vector<uint64_t>(entropy, entropy + count), n);
  if (n > 0) std::memcpy(out, order.data(), n * sizeof(int64_t));
}

}  // extern "C"
