// nvcuda::wmma for the CPU emulation: the 16x16x16 fragments (matrix_a, matrix_b: __half or __nv_bfloat16;
// accumulator: float) and the warp-wide load_matrix_sync, store_matrix_sync, mma_sync and fill_fragment.
//
// CUDA leaves the mapping of a fragment's elements to lanes unspecified; here element (r, c) of the 16x16 tile
// (r the row of A, C, D or the k of B) is x[i] of lane l where r * 16 + c = i * 32 + l: 8 elements per lane.
// The *_sync calls are warp operations: all 32 lanes must take part, with the same pointer, ldm and layout,
// the pointer 256-bit aligned and ldm a multiple of 16 bytes (the documented preconditions), else the launch
// faults. mma_sync multiplies exactly in float (16-bit products are exact) and adds k = 0..15 in order.
#ifndef SPARSEFLOW_CUDA_ON_CPU_WMMA_H_
#define SPARSEFLOW_CUDA_ON_CPU_WMMA_H_

#include <cstdint>

#include "cuda_on_cpu.h"
#include "cuda_on_cpu_half.h"

namespace cuda_on_cpu {
inline float to_float_value(float v) { return v; }
inline float to_float_value(__half v) { return __half2float(v); }
inline float to_float_value(__nv_bfloat16 v) { return __bfloat162float(v); }
}  // namespace cuda_on_cpu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the CPU emulation has the m16n16k16 fragments only");
  static_assert(!std::is_same_v<Use, accumulator> || std::is_same_v<T, float>, "float accumulators only");
  static constexpr int num_elements = 8;
  using element_type = T;
  T x[num_elements];
};

namespace detail {

struct MemoryArgs {
  const void* pointer;
  unsigned ldm;
  bool row_major;
  size_t element_bytes;
};

// Element (r, c) of lane `lane`'s slot i.
inline int tile_row(int lane, int i) { return (i * 32 + lane) / 16; }
inline int tile_col(int lane, int i) { return (i * 32 + lane) % 16; }

inline const char* check_same_memory_args(cuda_on_cpu::WarpOp* const* lanes) {
  const auto* first = static_cast<const MemoryArgs*>(lanes[0]->args);
  if (reinterpret_cast<uintptr_t>(first->pointer) % 32 != 0) return "the pointer is not 256-bit aligned";
  if (first->ldm * first->element_bytes % 16 != 0) return "ldm is not a multiple of 16 bytes";
  for (int lane = 1; lane < 32; ++lane) {
    const auto* other = static_cast<const MemoryArgs*>(lanes[lane]->args);
    if (other->pointer != first->pointer || other->ldm != first->ldm || other->row_major != first->row_major) {
      return "the lanes pass different pointers, ldm or layouts";
    }
  }
  return nullptr;
}

inline void memory_op(const char* name, const MemoryArgs& args) {
  cuda_on_cpu::WarpOp op;
  op.kind = cuda_on_cpu::kCollective;
  op.mask = 0xffffffffu;
  op.collective = check_same_memory_args;
  op.args = &args;
  op.name = name;
  cuda_on_cpu::warp_op(op);
}

template <typename T>
size_t offset(const MemoryArgs& args, int r, int c) {
  return args.row_major ? static_cast<size_t>(r) * args.ldm + c : static_cast<size_t>(c) * args.ldm + r;
}

template <typename FA, typename FB>
struct MmaArgs {
  fragment<accumulator, 16, 16, 16, float>* d;
  const FA* a;
  const FB* b;
  const fragment<accumulator, 16, 16, 16, float>* c;
};

template <typename FA, typename FB>
const char* multiply(cuda_on_cpu::WarpOp* const* lanes) {
  float a[16][16], b[16][16], c[16][16];
  for (int lane = 0; lane < 32; ++lane) {
    const auto* args = static_cast<const MmaArgs<FA, FB>*>(lanes[lane]->args);
    for (int i = 0; i < 8; ++i) {
      const int r = tile_row(lane, i), col = tile_col(lane, i);
      a[r][col] = cuda_on_cpu::to_float_value(args->a->x[i]);
      b[r][col] = cuda_on_cpu::to_float_value(args->b->x[i]);
      c[r][col] = args->c->x[i];
    }
  }
  for (int lane = 0; lane < 32; ++lane) {  // every input is read above: d may be one of them
    const auto* args = static_cast<const MmaArgs<FA, FB>*>(lanes[lane]->args);
    for (int i = 0; i < 8; ++i) {
      const int r = tile_row(lane, i), col = tile_col(lane, i);
      float sum = c[r][col];
      for (int k = 0; k < 16; ++k) sum += a[r][k] * b[k][col];
      args->d->x[i] = sum;
    }
  }
  return nullptr;
}

}  // namespace detail

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = value;
}

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* pointer, unsigned ldm) {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "matrix_a/matrix_b fragments name their layout; accumulators take a layout_t argument");
  const detail::MemoryArgs args{pointer, ldm, std::is_same_v<Layout, row_major>, sizeof(T)};
  detail::memory_op("wmma::load_matrix_sync", args);
  const int lane = cuda_on_cpu::lane_id();
  for (int i = 0; i < 8; ++i) f.x[i] = pointer[detail::offset<T>(args, detail::tile_row(lane, i), detail::tile_col(lane, i))];
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* pointer, unsigned ldm,
                             layout_t layout) {
  const detail::MemoryArgs args{pointer, ldm, layout == mem_row_major, sizeof(float)};
  detail::memory_op("wmma::load_matrix_sync", args);
  const int lane = cuda_on_cpu::lane_id();
  for (int i = 0; i < 8; ++i) f.x[i] = pointer[detail::offset<float>(args, detail::tile_row(lane, i), detail::tile_col(lane, i))];
}

inline void store_matrix_sync(float* pointer, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  const detail::MemoryArgs args{pointer, ldm, layout == mem_row_major, sizeof(float)};
  detail::memory_op("wmma::store_matrix_sync", args);
  const int lane = cuda_on_cpu::lane_id();
  for (int i = 0; i < 8; ++i) pointer[detail::offset<float>(args, detail::tile_row(lane, i), detail::tile_col(lane, i))] = f.x[i];
}

template <typename FA, typename FB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const FA& a, const FB& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  const detail::MmaArgs<FA, FB> args{&d, &a, &b, &c};
  cuda_on_cpu::WarpOp op;
  op.kind = cuda_on_cpu::kCollective;
  op.mask = 0xffffffffu;
  op.collective = detail::multiply<FA, FB>;
  op.args = &args;
  op.name = "wmma::mma_sync";
  cuda_on_cpu::warp_op(op);
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // SPARSEFLOW_CUDA_ON_CPU_WMMA_H_
