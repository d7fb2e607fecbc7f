// The device functions of ../warp_mma.h for the CPU emulation: ldmatrix, mma.sync (m16n8k16 f16/bf16, m16n8k8 tf32)
// and cp.async, with the fragment layouts the PTX ISA documents (see ../warp_mma.h for them).
//
// ldmatrix and mma are warp operations: all 32 lanes take part (else the launch faults, as the .aligned forms
// require); the rows ldmatrix reads must be 16-byte aligned. mma multiplies exactly in float (f16, bf16 and tf32
// products are exact in float) and adds k = 0..K-1 in order to the accumulator: the tensor cores' internal rounding
// is not modelled. cp.async copies are held per thread and done when a cp_async_wait<N> leaves at most N committed
// groups pending, so a kernel that reads a tile before waiting for it reads the poisoned (NaN) shared memory.
#ifndef SPARSEFLOW_CUDA_ON_CPU_MMA_H_
#define SPARSEFLOW_CUDA_ON_CPU_MMA_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "cuda_on_cpu.h"
#include "cuda_on_cpu_half.h"

namespace sparseflow {

template <typename T>
struct MmaType;
template <>
struct MmaType<__half> {
  static constexpr bool kBfloat16 = false;
};
template <>
struct MmaType<__nv_bfloat16> {
  static constexpr bool kBfloat16 = true;
};

namespace emulated_mma {

struct LdmatrixArgs {
  const void* row;
  uint32_t* out;
};

inline uint16_t element(const void* row, int i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const char*>(row) + 2 * i, 2);
  return v;
}

template <int N, bool kTrans>
const char* ldmatrix_lanes(cuda_on_cpu::WarpOp* const* lanes) {
  const void* rows[32];
  for (int lane = 0; lane < 32; ++lane) rows[lane] = static_cast<const LdmatrixArgs*>(lanes[lane]->args)->row;
  for (int lane = 0; lane < 8 * N; ++lane) {
    if (reinterpret_cast<uintptr_t>(rows[lane]) % 16 != 0) return "a row address is not 16-byte aligned";
  }
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t* out = static_cast<const LdmatrixArgs*>(lanes[lane]->args)->out;
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < N; ++i) {
      const uint16_t lo = kTrans ? element(rows[8 * i + 2 * t], g) : element(rows[8 * i + g], 2 * t);
      const uint16_t hi = kTrans ? element(rows[8 * i + 2 * t + 1], g) : element(rows[8 * i + g], 2 * t + 1);
      out[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
  return nullptr;
}

struct MmaArgs {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
};

template <bool kBfloat16>
float half_value(uint32_t word, int upper) {
  const uint16_t bits = static_cast<uint16_t>(upper ? word >> 16 : word & 0xffffu);
  if constexpr (kBfloat16) return cuda_on_cpu::bits_float(static_cast<uint32_t>(bits) << 16);
  __half h;
  h.bits = bits;
  return __half2float(h);
}

// D (16 x 8) += A (16 x K) B (K x 8), the fragments gathered from and scattered to the lanes.
template <int K>
void multiply_tiles(cuda_on_cpu::WarpOp* const* lanes, const float (&a)[16][16], const float (&b)[16][8]) {
  for (int lane = 0; lane < 32; ++lane) {
    float* d = static_cast<const MmaArgs*>(lanes[lane]->args)->d;
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i / 2), c = 2 * t + i % 2;
      float sum = d[i];
      for (int k = 0; k < K; ++k) sum += a[r][k] * b[k][c];
      d[i] = sum;
    }
  }
}

template <bool kBfloat16>
const char* mma_16816_lanes(cuda_on_cpu::WarpOp* const* lanes) {
  float a[16][16], b[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const auto* args = static_cast<const MmaArgs*>(lanes[lane]->args);
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i % 2), k = 2 * t + 8 * (i / 2);
      a[r][k] = half_value<kBfloat16>(args->a[i], 0);
      a[r][k + 1] = half_value<kBfloat16>(args->a[i], 1);
    }
    for (int i = 0; i < 2; ++i) {
      b[2 * t + 8 * i][g] = half_value<kBfloat16>(args->b[i], 0);
      b[2 * t + 8 * i + 1][g] = half_value<kBfloat16>(args->b[i], 1);
    }
  }
  multiply_tiles<16>(lanes, a, b);
  return nullptr;
}

inline const char* mma_1688_tf32_lanes(cuda_on_cpu::WarpOp* const* lanes) {
  float a[16][16] = {}, b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const auto* args = static_cast<const MmaArgs*>(lanes[lane]->args);
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      if (args->a[i] & 0x1fffu) return "an A operand is not a tf32 value (low 13 bits set)";
      a[g + 8 * (i % 2)][t + 4 * (i / 2)] = cuda_on_cpu::bits_float(args->a[i]);
    }
    for (int i = 0; i < 2; ++i) {
      if (args->b[i] & 0x1fffu) return "a B operand is not a tf32 value (low 13 bits set)";
      b[t + 4 * i][g] = cuda_on_cpu::bits_float(args->b[i]);
    }
  }
  multiply_tiles<8>(lanes, a, b);
  return nullptr;
}

inline void warp_collective(const char* name, const char* (*collective)(cuda_on_cpu::WarpOp* const*),
                            const void* args) {
  cuda_on_cpu::WarpOp op;
  op.kind = cuda_on_cpu::kCollective;
  op.mask = 0xffffffffu;
  op.collective = collective;
  op.args = args;
  op.name = name;
  cuda_on_cpu::warp_op(op);
}

// Each thread's cp.async copies, oldest group first; the last group is the open (uncommitted) one.
struct Copy {
  void* dst;
  const void* src;
  int bytes;
};

inline std::map<uint64_t, std::deque<std::vector<Copy>>>& pending_copies() {
  static std::map<uint64_t, std::deque<std::vector<Copy>>> pending;
  return pending;
}

inline uint64_t thread_key() {
  const uint3 t = cuda_on_cpu::current_thread_idx, b = cuda_on_cpu::current_block_idx;
  const dim3 bd = cuda_on_cpu::current_block_dim, gd = cuda_on_cpu::current_grid_dim;
  const uint64_t block = b.x + static_cast<uint64_t>(gd.x) * (b.y + static_cast<uint64_t>(gd.y) * b.z);
  const uint64_t thread = t.x + static_cast<uint64_t>(bd.x) * (t.y + static_cast<uint64_t>(bd.y) * t.z);
  return (block << 20) | thread;
}

inline std::deque<std::vector<Copy>>& thread_groups() {
  auto& groups = pending_copies()[thread_key()];
  if (groups.empty()) groups.emplace_back();  // the open group
  return groups;
}

inline void perform(const std::vector<Copy>& group) {
  for (const Copy& c : group) {
    std::memset(c.dst, 0, 16);
    if (c.bytes > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
  }
}

}  // namespace emulated_mma

template <int N, bool kTrans>
void ldmatrix(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const emulated_mma::LdmatrixArgs args{row, r};
  emulated_mma::warp_collective("ldmatrix", emulated_mma::ldmatrix_lanes<N, kTrans>, &args);
}

template <typename T>
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const emulated_mma::MmaArgs args{d, a, b};
  emulated_mma::warp_collective("mma.sync.m16n8k16", emulated_mma::mma_16816_lanes<MmaType<T>::kBfloat16>, &args);
}

// cvt.rna.tf32.f32: 10 mantissa bits, rounded to nearest with ties away from zero; infinities and NaN kept.
inline uint32_t to_tf32(float v) {
  uint32_t x = cuda_on_cpu::float_bits(v);
  if ((x & 0x7f800000u) == 0x7f800000u) return (x & 0x1fffu) ? 0x7fffffffu : x;
  x += 0x1000u;  // half of the dropped ulp: ties round away from zero in sign-magnitude
  return x & ~0x1fffu;
}

inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const emulated_mma::MmaArgs args{d, a, b};
  emulated_mma::warp_collective("mma.sync.m16n8k8.tf32", emulated_mma::mma_1688_tf32_lanes, &args);
}

inline void cp_async_16(void* dst, const void* src, int bytes) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 || (bytes > 0 && reinterpret_cast<uintptr_t>(src) % 16)) {
    cuda_on_cpu::fault("cp.async: an address is not 16-byte aligned");
  }
  if (bytes < 0 || bytes > 16) cuda_on_cpu::fault("cp.async: the source size is not 0..16 bytes");
  emulated_mma::thread_groups().back().push_back({dst, src, bytes});
}

inline void cp_async_commit() { emulated_mma::thread_groups().emplace_back(); }

template <int N>
void cp_async_wait() {
  auto& groups = emulated_mma::thread_groups();
  while (groups.size() > static_cast<size_t>(N) + 1) {  // committed groups beyond the newest N, oldest first
    emulated_mma::perform(groups.front());
    groups.pop_front();
  }
  if (groups.size() == 1 && groups.front().empty()) emulated_mma::pending_copies().erase(emulated_mma::thread_key());
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_CUDA_ON_CPU_MMA_H_
