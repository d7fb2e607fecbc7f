// Embedding tables on huge pages: a bag reads one random row per id, so a large table costs a TLB miss
// (a page walk) per row on 4 KiB pages; 2 MiB pages let the TLB cover hundreds of MiB.
//
// AdviseHugePages(data, bytes) asks Linux, once per table buffer of at least kHugePageTableBytes,
// to back the 2 MiB-aligned part of it with transparent huge pages: MADV_HUGEPAGE (later faults and
// khugepaged use huge pages) and MADV_COLLAPSE (Linux >= 6.1: collapse the pages already there, now).
// Where the kernel refuses (THP "never", an older kernel, another OS) nothing changes: the advice is
// best effort and the results are the same bytes either way. SPARSEFLOW_HUGE_PAGES=0 turns it off.
//
// A table is advised once per buffer address; an op that sees ever new buffers (a table that is a fresh
// tensor each step) stops advising after kMaxAdvisedBuffers, so the collapse never becomes a per-step cost.
#ifndef SPARSEFLOW_OPS_NATIVE_HUGE_PAGES_H_
#define SPARSEFLOW_OPS_NATIVE_HUGE_PAGES_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sparseflow {

constexpr int64_t kHugePageBytes = int64_t{2} << 20;
// Below this a table's rows fit the TLB's reach on 4 KiB pages (with the second-level TLB) well enough.
constexpr int64_t kHugePageTableBytes = int64_t{32} << 20;
constexpr size_t kMaxAdvisedBuffers = 64;

#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack it, older kernels answer EINVAL
#endif

inline bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* value = std::getenv("SPARSEFLOW_HUGE_PAGES");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return wanted;
}

// Whether the advice was given now (false: too small, already advised, turned off, or not Linux).
inline bool AdviseHugePages(const void* data, int64_t bytes) {
#if defined(__linux__)
  if (bytes < kHugePageTableBytes || !HugePagesWanted()) return false;
  static std::mutex mutex;
  static std::unordered_set<uintptr_t> advised;
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (advised.size() >= kMaxAdvisedBuffers || !advised.insert(start).second) return false;
  }
  const uintptr_t page = static_cast<uintptr_t>(kHugePageBytes);
  const uintptr_t begin = (start + page - 1) & ~(page - 1);
  const uintptr_t end = (start + static_cast<uintptr_t>(bytes)) & ~(page - 1);
  if (end <= begin) return false;
  void* range = reinterpret_cast<void*>(begin);
  const size_t length = static_cast<size_t>(end - begin);
  // Errors are expected where THP is off or the kernel is older: the table stays on small pages.
  if (madvise(range, length, MADV_HUGEPAGE) != 0) return false;
  (void)madvise(range, length, MADV_COLLAPSE);
  return true;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_OPS_NATIVE_HUGE_PAGES_H_
