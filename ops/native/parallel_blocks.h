// A parallel for in which the calling thread works from the start and pool threads join as they wake.
//
// Why not the pool's own ParallelFor: it hands every block but the first to the pool and waits on a
// barrier, so a call costs at least the time a sleeping pool thread takes to wake. On a virtual machine
// that is 0.1-0.5 ms (the idle virtual CPU has to be rescheduled by the host), as long as a whole
// embedding-bag forward over 40k cold rows. Here the blocks are taken from one shared counter: the
// caller starts at once, each pool thread takes blocks once it runs, and the caller waits only for
// blocks a pool thread has already begun. When the pool is slow the caller simply does more blocks.
//
// Which thread runs a block never changes what the block computes, so kernels whose blocks are
// independent (all of ops/native) give the same bits for any thread count and any timing.
#ifndef SPARSEFLOW_OPS_NATIVE_PARALLEL_BLOCKS_H_
#define SPARSEFLOW_OPS_NATIVE_PARALLEL_BLOCKS_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace sparseflow {

// Below this many cycles of work a call runs on the caller alone: waking a thread would cost more.
constexpr int64_t kMinParallelCycles = 100000;
// A block is at least this many cycles, so taking one from the counter is negligible against it.
constexpr int64_t kMinBlockCycles = 20000;
// Blocks per participating thread, so a thread that joins late still finds work to share.
constexpr int64_t kBlocksPerThread = 4;

// Runs work(begin, end) over disjoint ranges covering [0, count). `pool_threads` threads are reachable
// through `schedule` (which runs a closure on one of them, some time later); the caller is one more.
inline void RunBlocks(int64_t count, int64_t cost_per_unit, int pool_threads,
                      const std::function<void(std::function<void()>)>& schedule,
                      const std::function<void(int64_t, int64_t)>& work) {
  if (count <= 0) return;
  const int64_t cost = std::max<int64_t>(1, cost_per_unit);
  if (pool_threads <= 0 || count == 1 || count * cost < kMinParallelCycles) {
    work(0, count);
    return;
  }
  const int64_t threads = pool_threads + 1;
  const int64_t by_count = (count + threads * kBlocksPerThread - 1) / (threads * kBlocksPerThread);
  const int64_t by_cost = (kMinBlockCycles + cost - 1) / cost;
  const int64_t block = std::max<int64_t>(1, std::max(by_count, by_cost));
  const int64_t blocks = (count + block - 1) / block;
  if (blocks == 1) {
    work(0, count);
    return;
  }

  // Shared with pool closures that may start after this call has returned: they then find no block
  // left and touch nothing else (`work` is only called for a block taken before the caller's wait ends).
  struct State {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mutex;
    std::condition_variable finished;
  };
  auto state = std::make_shared<State>();
  const std::function<void(int64_t, int64_t)>* work_ptr = &work;
  auto drain = [state, work_ptr, block, blocks, count] {
    int64_t ran = 0;
    for (int64_t b = state->next.fetch_add(1); b < blocks; b = state->next.fetch_add(1)) {
      (*work_ptr)(b * block, std::min(count, (b + 1) * block));
      ++ran;
    }
    if (ran > 0 && state->done.fetch_add(ran) + ran == blocks) {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->finished.notify_all();
    }
  };
  const int64_t helpers = std::min<int64_t>(pool_threads, blocks - 1);
  for (int64_t h = 0; h < helpers; ++h) schedule(drain);
  drain();
  std::unique_lock<std::mutex> lock(state->mutex);
  state->finished.wait(lock, [&] { return state->done.load() == blocks; });
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_PARALLEL_BLOCKS_H_
