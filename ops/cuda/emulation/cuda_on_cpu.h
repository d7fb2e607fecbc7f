// CUDA on the CPU: what the kernel sources of ops/cuda/ use from CUDA, for a host build (g++) that runs the
// same __global__ functions on small inputs where no GPU is present. benchmarks/cuda_build.py
// (build_emulated_library) force-includes this header, puts emulation/include/ (cuda_runtime_api.h, cuda_fp16.h,
// cuda_bf16.h, mma.h, cub/cub.cuh) first on the include path, and rewrites each launch
// `kernel<<<grid, block, smem, stream>>>(args)` into `::cuda_on_cpu::launch<&kernel>(grid, block, smem,
// stream)(args)` and registers each `__shared__` variable (register_shared) in a copy; the .cu files
// themselves are compiled unchanged.
//
// Execution model (cuda_on_cpu.cc): a launch runs its blocks one after another; a block's threads are
// fibers on the calling thread, each run until it reaches a synchronisation point (__syncthreads, a warp
// shuffle, vote or __syncwarp, a WMMA load/store/mma) or returns. When every thread of the block waits, the
// warp operations whose lanes have all arrived are completed, then a __syncthreads that every thread reached
// is released. Anything else is a fault (a deadlock, a __syncthreads some threads skipped by returning, a
// shuffle reading an exited lane, mismatched masks or WMMA arguments): the launch stops and the sticky error
// cudaErrorLaunchFailure is reported by cudaGetLastError, with the reason in cuda_on_cpu_fault().
// `__shared__` variables are function-local statics: one block runs at a time, so each block has them to
// itself; the build registers each one, and every block starts with it filled with 0xFF bytes (NaN as float).
// The device code path is compiled (__CUDA_ARCH__ 800: compute capability 8.0, the tensor-core kernels' bodies).
// Not provided: dynamic shared memory (`extern __shared__`), cooperative groups, textures, printf.
#ifndef SPARSEFLOW_CUDA_ON_CPU_H_
#define SPARSEFLOW_CUDA_ON_CPU_H_

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
// Kernel headers that wrap inline PTX (warp_mma.h) pick their emulated implementation on this.
#define SPARSEFLOW_CUDA_ON_CPU 1
#define __CUDA_ARCH__ 800
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static

// ---- The CUDA runtime's types and calls (host memory stands in for device memory) ----
enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9,
                 cudaErrorInvalidDevice = 101, cudaErrorLaunchFailure = 719 };
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };

// C++ names (not the C symbols of libcudart), so a process holding the real runtime keeps its own.
namespace cuda_on_cpu {
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();
}  // namespace cuda_on_cpu
using cuda_on_cpu::cudaDeviceGetAttribute;
using cuda_on_cpu::cudaDeviceSynchronize;
using cuda_on_cpu::cudaGetDevice;
using cuda_on_cpu::cudaGetErrorString;
using cuda_on_cpu::cudaGetLastError;
using cuda_on_cpu::cudaMemcpy;
using cuda_on_cpu::cudaMemcpyAsync;
using cuda_on_cpu::cudaMemset;
using cuda_on_cpu::cudaMemsetAsync;
using cuda_on_cpu::cudaPeekAtLastError;
using cuda_on_cpu::cudaStreamSynchronize;

// ---- Vector types ----
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
constexpr int warpSize = 32;

namespace cuda_on_cpu {

// The running thread's coordinates; the scheduler sets them before it resumes a thread.
extern uint3 current_thread_idx;
extern uint3 current_block_idx;
extern dim3 current_block_dim;
extern dim3 current_grid_dim;

// The calling thread's lane: its linear index in the block, modulo 32.
inline int lane_id() {
  const uint3 t = current_thread_idx;
  const dim3 b = current_block_dim;
  return static_cast<int>((t.x + b.x * (t.y + b.y * t.z)) % 32);
}

// One lane's part in a warp operation. Lanes of a group (the non-exited lanes of `mask`) must agree on
// kind and mask; `collective` (WMMA) sees all 32 lanes' records and returns a fault message or nullptr.
struct WarpOp {
  int kind = 0;
  unsigned mask = 0;
  uint64_t value = 0;  // shuffles: the lane's bits; votes: its predicate
  int arg = 0;         // shuffles: source lane, delta or lane mask
  int width = 32;
  uint64_t result = 0;
  const char* (*collective)(WarpOp* const* lanes) = nullptr;
  const void* args = nullptr;
  void* out = nullptr;
  const char* name = "";
};
enum WarpOpKind { kShflIdx = 1, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncWarp, kCollective };

// Blocks the calling thread until its warp group has arrived and the operation is complete.
void warp_op(WarpOp& op);
// __syncthreads with a predicate: returns the number of threads of the block whose predicate was non-zero.
int sync_block(int predicate);
// Stops the launch with a fault (the message says what the kernel did wrong).
[[noreturn]] void fault(const char* message);

template <typename T>
T shuffle(int kind, unsigned mask, T value, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of at most 8 bytes");
  WarpOp op;
  op.kind = kind;
  op.mask = mask;
  std::memcpy(&op.value, &value, sizeof(T));
  op.arg = arg;
  op.width = width;
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) fault("shuffle width is not a power of 2 up to 32");
  warp_op(op);
  T out;
  std::memcpy(&out, &op.result, sizeof(T));
  return out;
}

inline unsigned vote(int kind, unsigned mask, int predicate) {
  WarpOp op;
  op.kind = kind;
  op.mask = mask;
  op.value = predicate != 0;
  warp_op(op);
  return static_cast<unsigned>(op.result);
}

// ---- Launch ----
struct LaunchShape {
  dim3 grid, block;
  size_t shared_bytes = 0;
  bool fits = true;  // every dimension representable (the launch reports cudaErrorInvalidConfiguration if not)
};

template <typename D>
dim3 to_dim3(const D& value, bool& fits) {
  if constexpr (std::is_integral_v<D>) {
    if (value < 0 || static_cast<unsigned long long>(value) > std::numeric_limits<unsigned>::max()) fits = false;
    return dim3(static_cast<unsigned>(value));
  } else {
    return dim3(value);
  }
}

// Runs `body` (the kernel, arguments bound) for every thread of the grid; records `name` in the launch log.
void run_grid(const char* name, const LaunchShape& shape, const std::function<void()>& body);

// "product_simt<float, 8>" from the compiler's signature of kernel_name<&sparseflow::{anonymous}::product_simt<...>>.
const char* unqualified_name(const char* pretty, char* buffer, size_t size);

template <auto Kernel>
const char* kernel_name() {
  static char buffer[256];
  return unqualified_name(__PRETTY_FUNCTION__, buffer, sizeof buffer);
}

template <typename P>
P pass_argument(P value) { return value; }  // the implicit conversion a kernel call makes

template <auto Kernel>
class Launch {
 public:
  explicit Launch(const LaunchShape& shape) : shape_(shape) {}
  template <typename... A>
  void operator()(A&&... args) const {
    invoke(Kernel, std::forward<A>(args)...);
  }

 private:
  template <typename... P, typename... A>
  void invoke(void (*kernel)(P...), A&&... args) const {
    static_assert(sizeof...(P) == sizeof...(A), "the launch passes a different number of arguments");
    std::tuple<std::decay_t<P>...> params(pass_argument<std::decay_t<P>>(std::forward<A>(args))...);
    run_grid(kernel_name<Kernel>(), shape_, [&] { std::apply(kernel, params); });
  }
  LaunchShape shape_;
};

template <auto Kernel, typename G, typename B>
Launch<Kernel> launch(const G& grid, const B& block, size_t shared_bytes = 0, cudaStream_t = nullptr) {
  LaunchShape shape;
  shape.grid = to_dim3(grid, shape.fits);
  shape.block = to_dim3(block, shape.fits);
  shape.shared_bytes = shared_bytes;
  return Launch<Kernel>(shape);
}

}  // namespace cuda_on_cpu

#define threadIdx (static_cast<const uint3&>(::cuda_on_cpu::current_thread_idx))
#define blockIdx (static_cast<const uint3&>(::cuda_on_cpu::current_block_idx))
#define blockDim (static_cast<const dim3&>(::cuda_on_cpu::current_block_dim))
#define gridDim (static_cast<const dim3&>(::cuda_on_cpu::current_grid_dim))

// ---- Synchronisation, warp intrinsics ----
inline void __syncthreads() { cuda_on_cpu::sync_block(0); }
inline int __syncthreads_count(int predicate) { return cuda_on_cpu::sync_block(predicate); }
inline int __syncthreads_and(int predicate) {
  const dim3 b = cuda_on_cpu::current_block_dim;
  return cuda_on_cpu::sync_block(predicate) == static_cast<int>(b.x * b.y * b.z);
}
inline int __syncthreads_or(int predicate) { return cuda_on_cpu::sync_block(predicate) > 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { cuda_on_cpu::vote(cuda_on_cpu::kSyncWarp, mask, 0); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = warpSize) {
  return cuda_on_cpu::shuffle(cuda_on_cpu::kShflIdx, mask, value, src_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  return cuda_on_cpu::shuffle(cuda_on_cpu::kShflUp, mask, value, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  return cuda_on_cpu::shuffle(cuda_on_cpu::kShflDown, mask, value, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  return cuda_on_cpu::shuffle(cuda_on_cpu::kShflXor, mask, value, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return cuda_on_cpu::vote(cuda_on_cpu::kBallot, mask, predicate);
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(cuda_on_cpu::vote(cuda_on_cpu::kAny, mask, predicate));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(cuda_on_cpu::vote(cuda_on_cpu::kAll, mask, predicate));
}

// ---- Loads and atomics (one thread runs at a time; atomic_ref keeps the operations' meaning explicit) ----
template <typename T>
T __ldg(const T* p) { return *p; }

template <typename T>
T atomicAdd(T* address, T value) { return std::atomic_ref<T>(*address).fetch_add(value); }
template <typename T>
T atomicSub(T* address, T value) { return std::atomic_ref<T>(*address).fetch_sub(value); }
template <typename T>
T atomicExch(T* address, T value) { return std::atomic_ref<T>(*address).exchange(value); }
template <typename T>
T atomicMin(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (value < old && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <typename T>
T atomicMax(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (value > old && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value either way
}
template <typename T>
T atomicAnd(T* address, T value) { return std::atomic_ref<T>(*address).fetch_and(value); }
template <typename T>
T atomicOr(T* address, T value) { return std::atomic_ref<T>(*address).fetch_or(value); }
template <typename T>
T atomicXor(T* address, T value) { return std::atomic_ref<T>(*address).fetch_xor(value); }

// ---- Control of the emulation (exported for the test harness) ----
extern "C" {
// Clears the launch log, the last and sticky errors and the fault message.
void cuda_on_cpu_reset(void);
// The kernels launched since the last reset, one "name<TAB>grid.x,y,z<TAB>block.x,y,z" line each (CUB's device-wide
// calls as "cub::...<TAB>items<TAB>", items the num_items they ran over) into buffer (NUL-terminated, truncated to size); returns the full length.
size_t cuda_on_cpu_launches(char* buffer, size_t size);
// Why the last faulting launch stopped; "" when none did.
const char* cuda_on_cpu_fault(void);
// 0: threads and blocks in ascending order; 1: descending (orders in which a missing barrier shows up differ).
void cuda_on_cpu_set_order(int descending);
// Makes the CUB call after the next `calls_before` ones (temporary-storage queries count) return `error`, as a
// failed device query or launch would; cleared by cuda_on_cpu_reset.
void cuda_on_cpu_fail_cub_call(int calls_before, int error);
// Makes cudaGetDevice return `error` (as with no usable device) until cuda_on_cpu_reset.
void cuda_on_cpu_fail_device_query(int error);
}

namespace cuda_on_cpu {
// Records a device-wide library call (CUB) over `items` items in the launch log.
void log_call(const char* name, int64_t items);
// The error cuda_on_cpu_fail_cub_call planned for this CUB call, cudaSuccess for the others.
cudaError_t cub_planned_error();
// Registers a __shared__ variable (the build's rewrite calls this after each declaration): it is filled with
// 0xFF bytes now if new, and before every later block, so reading what the block did not write shows up.
void register_shared(void* address, size_t bytes);
}  // namespace cuda_on_cpu

#endif  // SPARSEFLOW_CUDA_ON_CPU_H_
