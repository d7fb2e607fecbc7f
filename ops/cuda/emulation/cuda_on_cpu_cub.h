// CUB's device-wide calls used by ops/cuda/, for the CPU emulation: DeviceRadixSort::SortPairs,
// DeviceRunLengthEncode::Encode and DeviceScan::ExclusiveSum, with CUB's two-phase protocol (a null
// d_temp_storage asks for the bytes; too few bytes, a negative count or a bad bit range return
// cudaErrorInvalidValue). Results are CUB's: a stable radix sort on bits [begin_bit, end_bit) of the keys,
// runs and their lengths written for the runs only, the exclusive prefix sum. A call planned to fail by
// cuda_on_cpu_fail_cub_call returns its error before anything else. The sort keeps its permutation
// in the temporary storage, so a workspace that overlaps it is caught by the results.
#ifndef SPARSEFLOW_CUDA_ON_CPU_CUB_H_
#define SPARSEFLOW_CUDA_ON_CPU_CUB_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "cuda_on_cpu.h"

namespace cub {

namespace detail {
constexpr size_t kMinimumTempBytes = 256;
inline size_t align_up(size_t bytes) { return (bytes + 255) & ~static_cast<size_t>(255); }
}  // namespace detail

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                               KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out,
                               NumItemsT num_items, int begin_bit = 0, int end_bit = sizeof(KeyT) * 8,
                               cudaStream_t = nullptr) {
    static_assert(std::is_integral_v<KeyT>, "the emulated radix sort takes integer keys");
    if (const cudaError_t planned = cuda_on_cpu::cub_planned_error()) return planned;
    if (num_items < 0 || begin_bit < 0 || end_bit > static_cast<int>(sizeof(KeyT) * 8) || begin_bit > end_bit) {
      return cudaErrorInvalidValue;
    }
    const size_t n = static_cast<size_t>(num_items);
    const size_t needed = detail::align_up(n * sizeof(uint32_t)) + detail::kMinimumTempBytes;
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = needed;
      return cudaSuccess;
    }
    if (temp_storage_bytes < needed) return cudaErrorInvalidValue;
    cuda_on_cpu::log_call("cub::DeviceRadixSort::SortPairs", static_cast<int64_t>(num_items));
    using Bits = std::make_unsigned_t<KeyT>;
    const int bits = end_bit - begin_bit;
    const Bits field = bits >= static_cast<int>(sizeof(Bits) * 8) ? ~Bits{0} : (Bits{1} << bits) - 1;
    auto digit = [&](KeyT key) {
      Bits b = static_cast<Bits>(key);
      if constexpr (std::is_signed_v<KeyT>) b ^= Bits{1} << (sizeof(Bits) * 8 - 1);  // CUB's twiddle
      return static_cast<Bits>((b >> begin_bit) & field);
    };
    auto* order = static_cast<uint32_t*>(d_temp_storage);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    std::stable_sort(order, order + n, [&](uint32_t x, uint32_t y) { return digit(d_keys_in[x]) < digit(d_keys_in[y]); });
    for (size_t i = 0; i < n; ++i) {
      d_keys_out[i] = d_keys_in[order[i]];
      d_values_out[i] = d_values_in[order[i]];
    }
    return cudaSuccess;
  }
};

struct DeviceRunLengthEncode {
  template <typename InputIt, typename UniqueOutIt, typename LengthsOutIt, typename NumRunsOutIt,
            typename NumItemsT>
  static cudaError_t Encode(void* d_temp_storage, size_t& temp_storage_bytes, InputIt d_in, UniqueOutIt d_unique_out,
                            LengthsOutIt d_counts_out, NumRunsOutIt d_num_runs_out, NumItemsT num_items,
                            cudaStream_t = nullptr) {
    if (const cudaError_t planned = cuda_on_cpu::cub_planned_error()) return planned;
    if (num_items < 0) return cudaErrorInvalidValue;
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = detail::kMinimumTempBytes;
      return cudaSuccess;
    }
    if (temp_storage_bytes < detail::kMinimumTempBytes) return cudaErrorInvalidValue;
    cuda_on_cpu::log_call("cub::DeviceRunLengthEncode::Encode", static_cast<int64_t>(num_items));
    using Length = std::remove_reference_t<decltype(*d_counts_out)>;
    int64_t runs = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(num_items);) {
      int64_t j = i + 1;
      while (j < static_cast<int64_t>(num_items) && d_in[j] == d_in[i]) ++j;
      d_unique_out[runs] = d_in[i];
      d_counts_out[runs] = static_cast<Length>(j - i);
      ++runs;
      i = j;
    }
    *d_num_runs_out = static_cast<std::remove_reference_t<decltype(*d_num_runs_out)>>(runs);
    return cudaSuccess;
  }
};

struct DeviceScan {
  template <typename InputIt, typename OutputIt, typename NumItemsT>
  static cudaError_t ExclusiveSum(void* d_temp_storage, size_t& temp_storage_bytes, InputIt d_in, OutputIt d_out,
                                  NumItemsT num_items, cudaStream_t = nullptr) {
    if (const cudaError_t planned = cuda_on_cpu::cub_planned_error()) return planned;
    if (num_items < 0) return cudaErrorInvalidValue;
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = detail::kMinimumTempBytes;
      return cudaSuccess;
    }
    if (temp_storage_bytes < detail::kMinimumTempBytes) return cudaErrorInvalidValue;
    cuda_on_cpu::log_call("cub::DeviceScan::ExclusiveSum", static_cast<int64_t>(num_items));
    using Value = typename std::iterator_traits<InputIt>::value_type;
    using Sum = std::conditional_t<std::is_integral_v<Value>, std::make_unsigned_t<Value>, Value>;  // wraps, like CUB
    Sum running{};
    for (int64_t i = 0; i < static_cast<int64_t>(num_items); ++i) {
      const Value v = d_in[i];  // read before the write: d_out may be d_in
      d_out[i] = static_cast<Value>(running);
      running = static_cast<Sum>(running + static_cast<Sum>(v));
    }
    return cudaSuccess;
  }
};

}  // namespace cub

#endif  // SPARSEFLOW_CUDA_ON_CPU_CUB_H_
