"""GPU timings of the model-side ops: embedding_bag and block-sparse matmul against their TensorFlow peers.

    python -m benchmarks.gpu [--small] [--reps N]

Needs TensorFlow's GPU build and a visible GPU for the timings. First, on
the CPU, ours is checked against its peer (the CPU reference); on a GPU each
op's GPU result is then checked against that CPU result before anything is
timed. Ours and the peer run alternately, each call waiting for the device
(`tf.test.experimental.sync_devices`), after a warm-up; medians, min-max and
ratios are printed with the bytes each op minimally moves and the FLOPs it
does, next to the rates achieved (GB/s, GFLOP/s).

Without a GPU the script says so ("no GPU visible to TensorFlow: skipping
GPU timings"), still runs the CPU reference check, and exits 0.

Costs per call (float32 values, int32 row ids, int64 column ids):

  embedding bag, batch B, dim D, nnz ids of which u distinct:
    bytes = 4*u*D (gather the distinct table rows) + 16*nnz (read row id, column id, gain)
            + 4*B*D (write the output)
    FLOPs = 2*nnz*D (one multiply-add per id and dimension)
  block-sparse x[M,K] @ W[K,N] with b blocks of s x s:
    bytes = 4*(M*K + b*s*s + M*N)      FLOPs = 2*M*s*s*b
  dense x[M,K] @ W[K,N]:
    bytes = 4*(M*K + K*N + M*N)        FLOPs = 2*M*K*N

These are the minimal traffic of one pass over the inputs and outputs; an
implementation that re-reads (e.g. the peer's sparse-to-dense steps) moves
more, so achieved GB/s is a lower bound on the traffic really moved.
"""

from __future__ import annotations

import argparse
import os
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny shapes (a smoke run of the script itself)")
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per contender")
    return parser


if __name__ == "__main__":
    _parser().parse_args()  # --help and a bad flag answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import ops
from benchmarks._timing import alternate, markdown_table, noisy, ratio
from benchmarks.embedding_bag_and_block_sparse import blocking

SKIP_MESSAGE = "no GPU visible to TensorFlow: skipping GPU timings"


def embedding_costs(batch: int, dim: int, nnz: int, distinct: int) -> dict:
    """Minimal bytes moved and FLOPs of one embedding-bag forward call (formulas in the module docstring)."""
    return {"bytes": 4 * distinct * dim + 16 * nnz + 4 * batch * dim, "flops": 2 * nnz * dim}


def matmul_costs(m: int, k: int, n: int, nnz_blocks: int | None = None, block: int | None = None) -> dict:
    """Minimal bytes moved and FLOPs of one block-sparse (nnz_blocks given) or dense product."""
    if nnz_blocks is None:
        return {"bytes": 4 * (m * k + k * n + m * n), "flops": 2 * m * k * n}
    return {"bytes": 4 * (m * k + nnz_blocks * block * block + m * n), "flops": 2 * m * block * block * nnz_blocks}


class Embedding:
    """A batch of multi-valued ids (1-19 a row) as COO for ours and as a SparseTensor for the peer."""

    def __init__(self, batch: int, vocab: int, dim: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(1, 20, batch)
        self.rows = np.repeat(np.arange(batch), lengths).astype(np.int32)
        self.cols = rng.integers(0, vocab, self.rows.size).astype(np.int64)
        self.gains = rng.uniform(0.5, 1.5, self.rows.size).astype(np.float32)
        positions = np.arange(self.rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        self.indices = np.stack([self.rows, positions], axis=1).astype(np.int64)
        self.shape = [batch, int(lengths.max())]
        self.table = rng.standard_normal((vocab, dim)).astype(np.float32)
        self.batch, self.dim = batch, dim
        self.costs = embedding_costs(batch, dim, self.rows.size, np.unique(self.cols).size)

    def functions(self, device: str):
        """(ours, peer) zero-argument functions whose tensors live on `device`."""
        with tf.device(device):
            table = tf.Variable(self.table)
            coo = [tf.constant(self.rows), tf.constant(self.cols), tf.constant(self.gains)]
            ids = tf.SparseTensor(self.indices, self.cols, self.shape)
            weights = tf.SparseTensor(self.indices, self.gains, self.shape)
        batch = self.batch

        @tf.function
        def ours():
            with tf.device(device):
                return ops.embedding_bag(table, *coo, batch)

        @tf.function
        def peer():
            with tf.device(device):
                return tf.nn.embedding_lookup_sparse(table, ids, weights, combiner="sum")

        return ours, peer


class BlockSparse:
    """x `[M, K]` times a block-sparse W of the given density, and the same W as a dense matrix."""

    def __init__(self, m: int, k: int, n: int, block: int, density: float, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.plan = ops.BlockSparseMatMul(ops.random_layout(k // block, n // block, density, seed=seed), block)
        self.x = rng.standard_normal((m, k)).astype(np.float32)
        self.w = rng.standard_normal(self.plan.weight_shape).astype(np.float32)
        self.dense_w = self.plan.to_dense(tf.constant(self.w)).numpy()
        self.density = density
        self.costs = matmul_costs(m, k, n, self.plan.nnz_blocks, block)
        self.dense_costs = matmul_costs(m, k, n)

    def functions(self, device: str):
        with tf.device(device):
            x, w, dense_w = tf.constant(self.x), tf.constant(self.w), tf.constant(self.dense_w)
        plan = self.plan

        @tf.function
        def ours():
            with tf.device(device):
                return plan(x, w)

        @tf.function
        def peer():
            with tf.device(device):
                return tf.linalg.matmul(x, dense_w)

        return ours, peer


def _close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    # GPUs may multiply in TF32 (TensorFlow's default on recent NVIDIA parts): about 1e-3 relative
    # per product, so the tolerance follows the size of the result rather than a fixed 1e-3.
    scale = max(1.0, float(np.max(np.abs(b))))
    if not np.allclose(a, b, rtol=1e-3, atol=1e-2 * scale):
        raise AssertionError(f"{what}: results differ, max |diff| {float(np.max(np.abs(a - b))):.3g}")


def cpu_reference(cases: dict) -> dict:
    """Ours against the peer on the CPU, per case; returns the CPU results the GPU ones are checked against."""
    reference = {}
    for name, case in cases.items():
        ours, peer = case.functions("/CPU:0")
        reference[name] = ours().numpy()
        _close(reference[name], peer().numpy(), f"CPU reference, {name}: ours vs peer")
        print(f"CPU reference: {name}: ours matches its peer")
    return reference



def gpu_timings(cases: dict, reference: dict, reps: int) -> list[dict]:
    """Checks each GPU result against the CPU one, then times ours against the peer on the GPU."""
    rows = []
    for name, case in cases.items():
        ours, peer = case.functions("/GPU:0")
        _close(ours().numpy(), reference[name], f"GPU vs CPU, {name}: ours")
        _close(peer().numpy(), reference[name], f"GPU vs CPU, {name}: peer")
        timings = alternate({"ours": blocking(ours), "peer": blocking(peer)}, reps=reps, warmup=3)
        a, b = timings["ours"], timings["peer"]
        peer_costs = getattr(case, "dense_costs", case.costs)
        rows.append(
            {
                "op": name,
                "ours_ms": a.median_s * 1e3,
                "ours_min-max_ms": f"{a.min_s * 1e3:.3g}-{a.max_s * 1e3:.3g}",
                "peer_ms": b.median_s * 1e3,
                "peer_min-max_ms": f"{b.min_s * 1e3:.3g}-{b.max_s * 1e3:.3g}",
                "ours/peer": ratio(a, b),
                "noisy": noisy(a, b),
                "MB": case.costs["bytes"] / 1e6,
                "GFLOP": case.costs["flops"] / 1e9,
                "ours GB/s": case.costs["bytes"] / a.median_s / 1e9,
                "ours GFLOP/s": case.costs["flops"] / a.median_s / 1e9,
                "peer MB": peer_costs["bytes"] / 1e6,
                "peer GFLOP": peer_costs["flops"] / 1e9,
                "peer GB/s": peer_costs["bytes"] / b.median_s / 1e9,
                "peer GFLOP/s": peer_costs["flops"] / b.median_s / 1e9,
            }
        )
    return rows


def make_cases(small: bool) -> dict:
    if small:
        cases = {"embedding_bag vs embedding_lookup_sparse": Embedding(256, 10_000, 32)}
        densities, shape = (0.25,), (128, 256, 256)
    else:
        cases = {"embedding_bag vs embedding_lookup_sparse": Embedding(16_384, 1_000_000, 128)}
        densities, shape = (0.05, 0.10, 0.25, 0.50), (4096, 4096, 4096)
    for density in densities:
        cases[f"block-sparse {density:.2f} vs dense matmul"] = BlockSparse(*shape, block=32, density=density)
    return cases


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cases = make_cases(args.small)
    reference = cpu_reference(cases)
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        print(SKIP_MESSAGE + " (the CPU reference check above still ran)")
        return 0
    print(f"GPU: {', '.join(g.name for g in gpus)}")
    rows = gpu_timings(cases, reference, args.reps)
    columns = ["op", "ours_ms", "ours_min-max_ms", "peer_ms", "peer_min-max_ms", "ours/peer", "noisy"]
    columns += ["MB", "GFLOP", "ours GB/s", "ours GFLOP/s", "peer MB", "peer GFLOP", "peer GB/s", "peer GFLOP/s"]
    print(markdown_table(rows, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
