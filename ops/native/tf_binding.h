// What both TensorFlow bindings (embedding_bag_ops.cc, block_sparse_ops.cc) share: the TensorFlow
// names they use and the bridge from a kernel's ParallelFor to TensorFlow's CPU thread pool.
#ifndef SPARSEFLOW_NATIVE_TF_BINDING_H_
#define SPARSEFLOW_NATIVE_TF_BINDING_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "embedding_bag_kernels.h"  // ParallelFor
#include "parallel_blocks.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

namespace sparseflow {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
namespace errors = ::tensorflow::errors;

// The kernels' work split over the calling thread and the op's CPU worker threads (TensorFlow's
// intra-op pool), the caller working from the start (parallel_blocks.h says why).
inline ParallelFor WorkersOf(OpKernelContext* context) {
  ::tensorflow::thread::ThreadPool* workers = context->device()->tensorflow_cpu_worker_threads()->workers;
  return [workers](int64_t count, int64_t cost_per_unit, const std::function<void(int64_t, int64_t)>& work) {
    RunBlocks(count, cost_per_unit, workers->NumThreads(),
              [workers](std::function<void()> closure) { workers->Schedule(std::move(closure)); }, work);
  };
}

}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_TF_BINDING_H_
