// The TensorFlow op names of the sparseflow kernels, in one place: the GPU binding registers its kernels
// under these names, and a CPU binding registering kernels for the same ops must use the same strings.
#ifndef SPARSEFLOW_TF_OP_NAMES_H_
#define SPARSEFLOW_TF_OP_NAMES_H_

#define SPARSEFLOW_OP_EMBEDDING_BAG "SparseflowGpuEmbeddingBag"
#define SPARSEFLOW_OP_EMBEDDING_BAG_GRAD "SparseflowGpuEmbeddingBagGrad"
#define SPARSEFLOW_OP_BLOCK_SPARSE_MATMUL "SparseflowGpuBlockSparseMatMul"
#define SPARSEFLOW_OP_BLOCK_SPARSE_WEIGHT_GRAD "SparseflowGpuBlockSparseWeightGrad"

#endif  // SPARSEFLOW_TF_OP_NAMES_H_
