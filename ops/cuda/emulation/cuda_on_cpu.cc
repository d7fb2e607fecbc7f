// The scheduler and runtime of cuda_on_cpu.h: blocks one after another, a block's threads as fibers
// (ucontext) on the calling thread, switched at synchronisation points; faults stop the launch.
#include "cuda_on_cpu.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace cuda_on_cpu {

uint3 current_thread_idx;
uint3 current_block_idx;
dim3 current_block_dim;
dim3 current_grid_dim;

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kMaxThreads = 1024;

enum class State { kRunnable, kAtBarrier, kAtWarpOp, kExited };

struct Fiber {
  ucontext_t context;
  State state = State::kRunnable;
  WarpOp* op = nullptr;
  int predicate = 0;
  int barrier_result = 0;
  uint3 idx{};
  char* stack = nullptr;  // kStackBytes, below it one guard page
};

struct Runtime {
  std::mutex launch_mutex;
  std::vector<Fiber> fibers = std::vector<Fiber>(kMaxThreads);
  ucontext_t scheduler;
  int current = -1;
  int count = 0;
  const std::function<void()>* body = nullptr;
  std::string fault;           // set by the running thread or the scheduler
  std::string fault_message;   // kept for cuda_on_cpu_fault()
  cudaError_t last_error = cudaSuccess;
  cudaError_t sticky_error = cudaSuccess;
  std::string log;
  bool descending = false;
  int cub_calls_before_failure = -1;  // set by cuda_on_cpu_fail_cub_call; -1: no failure planned
  cudaError_t cub_failure = cudaSuccess;
  cudaError_t device_query_error = cudaSuccess;  // set by cuda_on_cpu_fail_device_query
  std::vector<std::pair<void*, size_t>> shared;  // the registered __shared__ variables
};

Runtime& runtime() {
  static Runtime* r = new Runtime();  // never destroyed: fibers may hold pointers into it at exit
  return *r;
}

char* stack_for(Fiber& f) {
  if (f.stack == nullptr) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* base = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    mprotect(base, page, PROT_NONE);  // a stack overflow faults instead of corrupting the neighbour
    f.stack = static_cast<char*>(base) + page;
  }
  return f.stack;
}

void yield_to_scheduler() {
  Runtime& r = runtime();
  swapcontext(&r.fibers[r.current].context, &r.scheduler);
}

void fiber_main() {
  Runtime& r = runtime();
  (*r.body)();
  r.fibers[r.current].state = State::kExited;
  swapcontext(&r.fibers[r.current].context, &r.scheduler);
}

std::string where(int thread) {
  char text[96];
  std::snprintf(text, sizeof text, "thread %d (warp %d, lane %d) of block (%u,%u,%u)", thread, thread / 32, thread % 32,
                current_block_idx.x, current_block_idx.y, current_block_idx.z);
  return text;
}

// The lanes of warp `w` that have not returned (lanes past the block's end count as returned).
unsigned live_lanes(const Runtime& r, int w) {
  unsigned live = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int t = w * 32 + lane;
    if (t < r.count && r.fibers[t].state != State::kExited) live |= 1u << lane;
  }
  return live;
}

// Completes a built-in shuffle or vote for the lanes of `group` (all waiting with the same kind and mask).
std::string complete_builtin(Runtime& r, int w, unsigned group) {
  const int kind = r.fibers[w * 32 + __builtin_ctz(group)].op->kind;
  uint64_t ballot = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if ((group >> lane) & 1u) ballot |= static_cast<uint64_t>(r.fibers[w * 32 + lane].op->value != 0) << lane;
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (!((group >> lane) & 1u)) continue;
    WarpOp& op = *r.fibers[w * 32 + lane].op;
    switch (kind) {
      case kBallot: op.result = ballot; break;
      case kAny: op.result = ballot != 0; break;
      case kAll: op.result = ballot == group; break;
      case kSyncWarp: break;
      default: {
        // PTX shfl.sync: a segment of `width` lanes; the source outside the segment reads the lane itself.
        const int seg_start = lane & ~(op.width - 1);
        const int seg_end = seg_start | (op.width - 1);
        int source = lane;
        bool inside = true;
        if (kind == kShflIdx) {
          source = seg_start | (op.arg & (op.width - 1));
        } else if (kind == kShflUp) {
          source = lane - op.arg;
          inside = source >= seg_start;
        } else if (kind == kShflDown) {
          source = lane + op.arg;
          inside = source <= seg_end;
        } else {
          source = lane ^ op.arg;
          inside = source <= seg_end;
        }
        if (!inside) source = lane;
        if (source < 0 || source > 31 || !((group >> source) & 1u)) {
          return "a shuffle of " + where(w * 32 + lane) + " reads lane " +
                 std::to_string(source) + ", which does not take part (returned, or outside the mask)";
        }
        op.result = r.fibers[w * 32 + source].op->value;
      }
    }
  }
  return "";
}

// Completes every warp operation whose group has fully arrived; returns whether any thread was released.
bool complete_warp_ops(Runtime& r) {
  bool released = false;
  const int warps = (r.count + 31) / 32;
  for (int w = 0; w < warps && r.fault.empty(); ++w) {
    const unsigned live = live_lanes(r, w);
    unsigned done = 0;
    for (int lane = 0; lane < 32 && r.fault.empty(); ++lane) {
      const int t = w * 32 + lane;
      if (t >= r.count || ((done >> lane) & 1u) || r.fibers[t].state != State::kAtWarpOp) continue;
      const WarpOp& first = *r.fibers[t].op;
      const unsigned group = first.mask & live;
      bool arrived = true;
      for (int other = 0; other < 32; ++other) {
        if (!((group >> other) & 1u)) continue;
        const Fiber& f = r.fibers[w * 32 + other];
        if (f.state != State::kAtWarpOp) {
          arrived = false;
          break;
        }
        if (f.op->kind != first.kind || f.op->mask != first.mask || f.op->collective != first.collective) {
          r.fault = where(w * 32 + other) + " is at a different warp operation (" + f.op->name + ", mask " +
                    std::to_string(f.op->mask) + ") than lane " + std::to_string(lane) + " (" + first.name +
                    ", mask " + std::to_string(first.mask) + ")";
          return false;
        }
      }
      if (!arrived) continue;
      if (first.kind == kCollective) {
        WarpOp* lanes[32] = {};
        for (int other = 0; other < 32; ++other) {
          if ((group >> other) & 1u) lanes[other] = r.fibers[w * 32 + other].op;
        }
        if (group != 0xffffffffu) {
          r.fault = std::string(first.name) + " needs all 32 lanes of warp " + std::to_string(w) +
                    "; lanes that take part: mask " + std::to_string(group);
          return false;
        }
        if (const char* error = first.collective(lanes)) {
          r.fault = std::string(first.name) + " in warp " + std::to_string(w) + ": " + error;
          return false;
        }
      } else {
        std::string error = complete_builtin(r, w, group);
        if (!error.empty()) {
          r.fault = error;
          return false;
        }
      }
      for (int other = 0; other < 32; ++other) {
        if (!((group >> other) & 1u)) continue;
        r.fibers[w * 32 + other].state = State::kRunnable;
        r.fibers[w * 32 + other].op = nullptr;
      }
      done |= group;
      released = true;
    }
  }
  return released;
}

// Releases a __syncthreads every thread has reached; a fault when some have returned or wait elsewhere.
bool release_barrier(Runtime& r) {
  int at_barrier = 0, exited = 0, at_warp = -1;
  int count = 0;
  for (int t = 0; t < r.count; ++t) {
    const State s = r.fibers[t].state;
    if (s == State::kAtBarrier) {
      ++at_barrier;
      count += r.fibers[t].predicate != 0;
    } else if (s == State::kExited) {
      ++exited;
    } else if (s == State::kAtWarpOp && at_warp < 0) {
      at_warp = t;
    }
  }
  if (at_barrier == 0) return false;
  if (at_barrier == r.count) {
    for (int t = 0; t < r.count; ++t) {
      r.fibers[t].state = State::kRunnable;
      r.fibers[t].barrier_result = count;
    }
    return true;
  }
  if (at_warp >= 0) {
    r.fault = "deadlock: " + std::to_string(at_barrier) + " threads wait at __syncthreads while " +
              where(at_warp) + " waits at " + r.fibers[at_warp].op->name +
              " for lanes that do not arrive";
  } else {
    r.fault = std::to_string(at_barrier) + " threads wait at __syncthreads, which " + std::to_string(exited) +
              " threads of the block skipped by returning";
  }
  return false;
}

void set_indices(Runtime& r, int t) {
  r.current = t;
  current_thread_idx = r.fibers[t].idx;
}

// Runs one block to completion; false with r.fault set when it faults.
bool run_block(Runtime& r) {
  for (const auto& [address, bytes] : r.shared) std::memset(address, 0xFF, bytes);
  for (int t = 0; t < r.count; ++t) {
    Fiber& f = r.fibers[t];
    char* stack = stack_for(f);
    if (stack == nullptr) {
      r.fault = "no memory for the threads' stacks";
      return false;
    }
    f.state = State::kRunnable;
    f.op = nullptr;
    f.idx = uint3{t % current_block_dim.x, (t / current_block_dim.x) % current_block_dim.y,
                  t / (current_block_dim.x * current_block_dim.y)};
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
  }
  while (true) {
    for (int i = 0; i < r.count; ++i) {
      const int t = r.descending ? r.count - 1 - i : i;
      if (r.fibers[t].state != State::kRunnable) continue;
      set_indices(r, t);
      swapcontext(&r.scheduler, &r.fibers[t].context);
      if (!r.fault.empty()) return false;
    }
    if (complete_warp_ops(r)) continue;
    if (!r.fault.empty()) return false;
    bool all_exited = true;
    for (int t = 0; t < r.count; ++t) all_exited = all_exited && r.fibers[t].state == State::kExited;
    if (all_exited) return true;
    if (release_barrier(r)) continue;
    if (r.fault.empty()) {
      for (int t = 0; t < r.count; ++t) {
        if (r.fibers[t].state == State::kAtWarpOp) {
          r.fault = "deadlock: " + where(t) + " waits at " + r.fibers[t].op->name + " (mask " +
                    std::to_string(r.fibers[t].op->mask) + ") for lanes that never arrive";
          break;
        }
      }
    }
    return false;
  }
}

void append_log(Runtime& r, const char* name, const LaunchShape& s) {
  char text[160];
  std::snprintf(text, sizeof text, "\t%u,%u,%u\t%u,%u,%u\n", s.grid.x, s.grid.y, s.grid.z, s.block.x, s.block.y,
                s.block.z);
  r.log += name;
  r.log += text;
}

}  // namespace

void warp_op(WarpOp& op) {
  Runtime& r = runtime();
  const int lane = r.current % 32;
  if (!((op.mask >> lane) & 1u)) fault("a warp operation's mask does not include the calling lane");
  Fiber& f = r.fibers[r.current];
  f.op = &op;
  if (op.name[0] == '\0') {
    static const char* const names[] = {"", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                        "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp", "collective"};
    op.name = names[op.kind];
  }
  f.state = State::kAtWarpOp;
  yield_to_scheduler();
}

int sync_block(int predicate) {
  Runtime& r = runtime();
  Fiber& f = r.fibers[r.current];
  f.predicate = predicate;
  f.state = State::kAtBarrier;
  yield_to_scheduler();
  return f.barrier_result;
}

void fault(const char* message) {
  Runtime& r = runtime();
  r.fault = where(r.current) + ": " + message;
  while (true) yield_to_scheduler();  // never resumed: the scheduler abandons the block
}

void register_shared(void* address, size_t bytes) {
  Runtime& r = runtime();
  for (const auto& known : r.shared) {
    if (known.first == address) return;
  }
  r.shared.emplace_back(address, bytes);
  std::memset(address, 0xFF, bytes);  // the first thread to declare it has not written it yet
}

void log_call(const char* name, int64_t items) {
  Runtime& r = runtime();
  r.log += name;
  r.log += "\t" + std::to_string(items) + "\t\n";
}

cudaError_t cub_planned_error() {
  Runtime& r = runtime();
  if (r.cub_calls_before_failure < 0) return cudaSuccess;
  if (r.cub_calls_before_failure-- > 0) return cudaSuccess;
  return r.cub_failure;
}

const char* unqualified_name(const char* pretty, char* buffer, size_t size) {
  // "... [with auto Kernel = a::{anonymous}::name<args>]": keep what follows the last "::" outside <...>.
  const char* start = std::strstr(pretty, "= ");
  start = start ? start + 2 : pretty;
  const char* end = start + std::strlen(start);
  if (end > start && end[-1] == ']') --end;
  const char* name = start;
  int depth = 0;
  for (const char* p = start; p + 1 < end; ++p) {
    if (*p == '<') ++depth;
    if (*p == '>') --depth;
    if (depth == 0 && p[0] == ':' && p[1] == ':') name = p + 2;
  }
  const size_t length = std::min(static_cast<size_t>(end - name), size - 1);
  std::memcpy(buffer, name, length);
  buffer[length] = '\0';
  return buffer;
}

void run_grid(const char* name, const LaunchShape& shape, const std::function<void()>& body) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.launch_mutex);
  append_log(r, name, shape);
  if (r.sticky_error != cudaSuccess) {
    r.last_error = r.sticky_error;
    return;
  }
  const dim3 g = shape.grid, b = shape.block;
  const unsigned long long threads = static_cast<unsigned long long>(b.x) * b.y * b.z;
  if (!shape.fits || g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535 ||
      threads == 0 || threads > kMaxThreads || b.z > 64 || shape.shared_bytes != 0) {
    r.last_error = cudaErrorInvalidConfiguration;  // dynamic shared memory is not emulated either
    return;
  }
  current_grid_dim = g;
  current_block_dim = b;
  r.count = static_cast<int>(threads);
  r.body = &body;
  r.fault.clear();
  const unsigned long long blocks = static_cast<unsigned long long>(g.x) * g.y * g.z;
  for (unsigned long long i = 0; i < blocks; ++i) {
    const unsigned long long linear = r.descending ? blocks - 1 - i : i;
    current_block_idx = uint3{static_cast<unsigned>(linear % g.x), static_cast<unsigned>((linear / g.x) % g.y),
                              static_cast<unsigned>(linear / (static_cast<unsigned long long>(g.x) * g.y))};
    if (!run_block(r)) {
      r.fault_message = std::string(name) + ": " + r.fault;
      r.sticky_error = r.last_error = cudaErrorLaunchFailure;
      break;
    }
  }
  r.body = nullptr;
  r.current = -1;
}

cudaError_t cudaGetLastError() {
  Runtime& r = runtime();
  const cudaError_t error = r.last_error;
  r.last_error = r.sticky_error;
  return error;
}

cudaError_t cudaPeekAtLastError() { return runtime().last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetDevice(int* device) {
  if (runtime().device_query_error != cudaSuccess) return runtime().device_query_error;
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attribute) {
    case cudaDevAttrComputeCapabilityMajor: *value = __CUDA_ARCH__ / 100; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = __CUDA_ARCH__ % 100 / 10; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  if (p == nullptr && bytes > 0) return cudaErrorInvalidValue;
  if (bytes > 0) std::memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) { return cudaMemsetAsync(p, value, bytes); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  if ((dst == nullptr || src == nullptr) && bytes > 0) return cudaErrorInvalidValue;
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind);
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return runtime().sticky_error; }
cudaError_t cudaDeviceSynchronize() { return runtime().sticky_error; }

}  // namespace cuda_on_cpu

extern "C" {

void cuda_on_cpu_reset(void) {
  cuda_on_cpu::Runtime& r = cuda_on_cpu::runtime();
  std::lock_guard<std::mutex> lock(r.launch_mutex);
  r.log.clear();
  r.fault_message.clear();
  r.last_error = r.sticky_error = cudaSuccess;
  r.cub_calls_before_failure = -1;
  r.device_query_error = cudaSuccess;
}

size_t cuda_on_cpu_launches(char* buffer, size_t size) {
  const std::string& log = cuda_on_cpu::runtime().log;
  if (buffer != nullptr && size > 0) {
    const size_t n = std::min(log.size(), size - 1);
    std::memcpy(buffer, log.data(), n);
    buffer[n] = '\0';
  }
  return log.size();
}

const char* cuda_on_cpu_fault(void) { return cuda_on_cpu::runtime().fault_message.c_str(); }

void cuda_on_cpu_set_order(int descending) { cuda_on_cpu::runtime().descending = descending != 0; }

void cuda_on_cpu_fail_device_query(int error) {
  cuda_on_cpu::runtime().device_query_error = static_cast<cudaError_t>(error);
}

void cuda_on_cpu_fail_cub_call(int calls_before, int error) {
  cuda_on_cpu::Runtime& r = cuda_on_cpu::runtime();
  r.cub_calls_before_failure = calls_before;
  r.cub_failure = static_cast<cudaError_t>(error);
}

}  // extern "C"
