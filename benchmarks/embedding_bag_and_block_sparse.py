"""Embedding bag and block-sparse matmul against their peers, on this machine's CPU (`benchmarks.gpu` on a GPU).

    python -m benchmarks.embedding_bag_and_block_sparse [--quick] [--json PATH]

Embedding bag (64-dim, multi-valued ids: 1-19 per sample, about 10): ours
(`ops.embedding_bag` over COO; "ours" is its stock-op composition
`implementation="csr"`, "native" its fused CPU kernel, what "auto" picks on a
CPU) against `tf.nn.embedding_lookup_sparse` on
the same batch, forward and forward+backward (gradient for the table), with
and without per-id weights, for uniform ids over a large table and for
Zipf-skewed ids; and against `torch.nn.functional.embedding_bag` when torch
is importable. Block-sparse matmul (block 32) at several densities, ours ("ours": the
stock-op composition; "native": the fused CPU kernels, what "auto" picks on a
CPU) against a dense `tf.linalg.matmul` of the same shape and, forward only, against
`scipy.sparse.bsr_matrix` products of the same blocks at densities up to
SCIPY_MAX_DENSITY (scipy has no block-masked product for the weight
gradient, and its BSR product, a plain loop over blocks, takes tens of
seconds a call beyond that at the full size). Contenders run alternately in
one process; the table gives medians, min-max spreads and ratios (ours /
peer: below 1 is faster), plus bytes moved and FLOPs per call so that a GPU
run can be set against the device's limits.

Memory-bandwidth limit: beside each op, a numpy copy that moves the same
number of bytes as the op minimally moves (a copy of n bytes reads n and
writes n, so it copies half the op's bytes) runs in the same rotation; its
time is the floor a bandwidth-bound op could reach here.

Embedding-bag calls start cold: before each timed call a 64 MiB copy (twice
the L3) evicts the table rows the previous call left cached, as a new
batch's ids would find them. An untimed busy step runs right after each torch
contender (`_timing.busy`): torch's OpenMP threads spin on the cores for a
while after their work, longer than the flush lasts. Beside torch, `tf.unique` + `tf.gather` of the
distinct rows alone are timed: the first two steps of our design as stock
kernels, which no combine after them can make faster.

GEMM floor of the block-sparse products: the batched matmuls the plan runs
(its buckets' shapes, chunk by chunk, in the transposed form it uses on
CPU) alone, on inputs already gathered, in the same rotation. However the
blocks are gathered, a formulation built on these matmuls cannot go faster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes and few repetitions")
    parser.add_argument("--json", help="also write the results to this file")
    return parser


if __name__ == "__main__":
    _parser().parse_args()  # --help and a bad flag answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import scipy.sparse
import tensorflow as tf

import ops
from benchmarks._timing import alternate, busy, markdown_table, noisy, ratio

DIM = 64
BLOCK = 32
DENSITIES = (0.05, 0.10, 0.25, 0.50, 1.00)
QUICK_DENSITIES = (0.10, 1.00)
SCIPY_MAX_DENSITY = 0.10


def run(quick: bool = False) -> dict:
    """Runs every measurement, prints markdown tables and returns them as a JSON-able dict."""
    results = {"quick": quick, "embedding_bag": _embedding_bag(quick), "block_sparse": _block_sparse(quick)}
    results["torch"] = _torch_embedding_bag(quick)
    return results


# Embedding bag ----------------------------------------------------------------------------------


def _ids_batch(rng, batch, vocab, skewed):
    lengths = rng.integers(1, 20, batch)
    rows = np.repeat(np.arange(batch), lengths).astype(np.int32)
    if skewed:
        cols = (rng.zipf(1.2, rows.size) - 1) % vocab
    else:
        cols = rng.integers(0, vocab, rows.size)
    positions = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    indices = np.stack([rows, positions], axis=1).astype(np.int64)
    weights = rng.uniform(0.5, 1.5, rows.size).astype(np.float32)
    return rows, cols.astype(np.int64), weights, indices, [batch, int(lengths.max())]


def _embedding_bag(quick: bool) -> dict:
    batch, vocab, reps = (1024, 100_000, 5) if quick else (4096, 1_000_000, 15)
    rng = np.random.default_rng(0)
    table = tf.Variable(rng.standard_normal((vocab, DIM)).astype(np.float32))
    upstream = tf.constant(rng.standard_normal((batch, DIM)).astype(np.float32))
    flush = cache_flush()  # each call starts with cold table rows, as for a new batch
    rows_out = []
    for skewed in (False,) if quick else (False, True):
        rows, cols, weights, indices, shape = _ids_batch(rng, batch, vocab, skewed)
        nnz, distinct = rows.size, np.unique(cols).size
        for weighted in (True, False):
            gains = weights if weighted else np.ones_like(weights)
            coo = [tf.constant(rows), tf.constant(cols), tf.constant(gains)]
            sp_ids = tf.SparseTensor(indices, cols, shape)
            sp_weights = tf.SparseTensor(indices, weights, shape) if weighted else None

            def ours(coo=coo):
                return ops.embedding_bag(table, *coo, batch, implementation="csr")

            def native(coo=coo):
                return ops.embedding_bag(table, *coo, batch, implementation="native")

            def peer(sp_ids=sp_ids, sp_weights=sp_weights):
                return tf.nn.embedding_lookup_sparse(table, sp_ids, sp_weights, combiner="sum")

            costs = {
                step: _embedding_costs(nnz, distinct, batch, backward=step == "fwd+bwd")
                for step in ("fwd", "fwd+bwd")
            }
            contenders = {
                "ours fwd": blocking(tf.function(ours)),
                "peer fwd": blocking(tf.function(peer)),
                "ours fwd+bwd": blocking(_forward_backward(ours, table, upstream)),
                "peer fwd+bwd": blocking(_forward_backward(peer, table, upstream)),
                "native fwd": blocking(tf.function(native)),
                "native fwd+bwd": blocking(_forward_backward(native, table, upstream)),
                "copy fwd": copy_limit(costs["fwd"]["mbytes"] * 1e6),
                "copy fwd+bwd": copy_limit(costs["fwd+bwd"]["mbytes"] * 1e6),
            }
            timings = alternate(contenders, reps=reps, warmup=2, before=flush)
            for step in ("fwd", "fwd+bwd"):
                a, b, c = timings[f"ours {step}"], timings[f"peer {step}"], timings[f"copy {step}"]
                rows_out.append(
                    {
                        "ids": "zipf(1.2)" if skewed else "uniform",
                        "weights": weighted,
                        "pass": step,
                        "ids_per_call": nnz,
                        "distinct_ids": distinct,
                        "ours_ms": a.median_s * 1e3,
                        "ours_spread_ms": [a.min_s * 1e3, a.max_s * 1e3],
                        "peer_ms": b.median_s * 1e3,
                        "peer_spread_ms": [b.min_s * 1e3, b.max_s * 1e3],
                        "ours_ns_per_id": a.median_s / nnz * 1e9,
                        "peer_ns_per_id": b.median_s / nnz * 1e9,
                        "copy_limit_ms": c.median_s * 1e3,
                        "copy_limit_spread_ms": [c.min_s * 1e3, c.max_s * 1e3],
                        "ratio": ratio(a, b),
                        "noisy": noisy(a, b),
                        **costs[step],
                    }
                )
                rows_out[-1]["ours_gbps"] = rows_out[-1]["mbytes"] / (a.median_s * 1e3)  # MB per ms
                rows_out[-1].update(_native_columns(timings[f"native {step}"], a, b, c))
    columns = ["ids", "weights", "pass", "ours_ms", "peer_ms", "ratio", "ours_ns_per_id", "peer_ns_per_id"]
    columns += ["noisy", "mbytes", "mflops", "ours_gbps", "copy_limit_ms"]
    columns += ["native_ms", "native_vs_peer", "native_vs_ours", "native_over_copy"]
    print(f"\n### Embedding bag vs tf.nn.embedding_lookup_sparse (batch {batch}, dim {DIM}, vocab {vocab})\n")
    print(markdown_table(rows_out, columns))
    print(
        "\ncopy_limit_ms: a numpy copy moving the same bytes. ours_ms far above it means the time goes to "
        "random row fetches (latency), hashing the ids and per-op overhead, not to bandwidth."
    )
    return {"batch": batch, "dim": DIM, "vocab": vocab, "reps": reps, "rows": rows_out}


def _native_columns(native, composition, peer, copy) -> dict:
    """The native kernel's figures beside a row's composition, peer and copy bound (ratios: above 1 is slower)."""
    return {
        "native_ms": native.median_s * 1e3,
        "native_spread_ms": [native.min_s * 1e3, native.max_s * 1e3],
        "native_vs_peer": ratio(native, peer),
        "native_vs_ours": ratio(native, composition),
        "native_over_copy": native.median_s / copy.median_s,
        "native_noisy": noisy(native, peer),
    }


def _forward_backward(fn, table, upstream):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(fn() * upstream)
        # The loss is returned too: the table gradient does not depend on the forward output, so
        # without it the forward pass would be pruned from the graph and not timed.
        return loss, tape.gradient(loss, table).values  # IndexedSlices for both contenders

    return step


def _embedding_costs(nnz, distinct, batch, backward):
    """Bytes a minimal implementation moves and FLOPs it does (float32 rows, int64 ids)."""
    row = DIM * 4
    moved = distinct * row + nnz * (4 + 8 + 4) + batch * row  # gather, read COO, write output
    flops = 2 * nnz * DIM
    if backward:
        moved += batch * row + distinct * row + distinct * 8  # read dy, write gradient rows and ids
        flops *= 2
    return {"mbytes": moved / 1e6, "mflops": flops / 1e6}


# Block-sparse matmul ----------------------------------------------------------------------------


def _block_sparse(quick: bool) -> dict:
    m, k, n, reps = (512, 1024, 1024, 3) if quick else (4096, 2048, 2048, 5)
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((m, k)).astype(np.float32)
    x = tf.constant(x_np)
    dy = tf.constant(rng.standard_normal((m, n)).astype(np.float32))
    dense_w = tf.Variable(rng.standard_normal((k, n)).astype(np.float32) * 0.02)
    x_t = np.ascontiguousarray(x_np.T)  # scipy multiplies sparse @ dense natively, so compute (W^T x^T)^T
    plans, weights, scipy_w_t = {}, {}, {}
    natives = {}
    for density in QUICK_DENSITIES if quick else DENSITIES:
        layout = ops.random_layout(k // BLOCK, n // BLOCK, density, seed=2)
        plan = ops.BlockSparseMatMul(layout, BLOCK, implementation="composition")
        plans[density] = plan
        natives[density] = ops.BlockSparseMatMul(layout, BLOCK, implementation="native")
        weights[density] = tf.Variable(rng.standard_normal(plan.weight_shape).astype(np.float32))
        if density <= SCIPY_MAX_DENSITY:
            scipy_w_t[density] = scipy_bsr(plan, weights[density].numpy()).T.tobsr()
            _check_scipy(plan(x, weights[density]).numpy(), scipy_w_t[density], x_t, density)

    forward = {"dense": blocking(tf.function(lambda: tf.linalg.matmul(x, dense_w)))}
    backward = {"dense": blocking(_matmul_grads(lambda: tf.linalg.matmul(x, dense_w), x, dense_w, dy))}
    for density, plan in plans.items():
        w = weights[density]
        forward[density] = blocking(tf.function(lambda plan=plan, w=w: plan(x, w)))
        if density in scipy_w_t:
            forward[f"scipy {density}"] = lambda w_t=scipy_w_t[density]: w_t @ x_t
        forward[f"copy {density}"] = copy_limit(_matmul_costs(plan, m, backward=False)["mbytes"] * 1e6)
        forward[f"gemm {density}"] = blocking(gemm_floor(plan, m, backward=False))
        backward[f"gemm {density}"] = blocking(gemm_floor(plan, m, backward=True))
        backward[density] = blocking(_matmul_grads(lambda plan=plan, w=w: plan(x, w), x, w, dy))
        native = natives[density]
        forward[f"native {density}"] = blocking(tf.function(lambda native=native, w=w: native(x, w)))
        backward[f"native {density}"] = blocking(_matmul_grads(lambda native=native, w=w: native(x, w), x, w, dy))
        backward[f"copy {density}"] = copy_limit(_matmul_costs(plan, m, backward=True)["mbytes"] * 1e6)
    rows_out = []
    for step, contenders in (("fwd", forward), ("fwd+bwd", backward)):
        timings = alternate(contenders, reps=reps, warmup=1)
        dense = timings["dense"]
        for density, plan in plans.items():
            t, copy, gemm = timings[density], timings[f"copy {density}"], timings[f"gemm {density}"]
            row = {
                "pass": step,
                "density": density,
                "blocks": plan.nnz_blocks,
                "ours_ms": t.median_s * 1e3,
                "ours_spread_ms": [t.min_s * 1e3, t.max_s * 1e3],
                "dense_ms": dense.median_s * 1e3,
                "dense_spread_ms": [dense.min_s * 1e3, dense.max_s * 1e3],
                "ratio": ratio(t, dense),
                "ratio_per_density": ratio(t, dense) / density,
                "noisy": noisy(t, dense),
                "copy_limit_ms": copy.median_s * 1e3,
                "copy_limit_spread_ms": [copy.min_s * 1e3, copy.max_s * 1e3],
                "gemm_floor_ms": gemm.median_s * 1e3,
                "gemm_floor_spread_ms": [gemm.min_s * 1e3, gemm.max_s * 1e3],
                **_matmul_costs(plan, m, backward=step == "fwd+bwd"),
            }
            native = timings[f"native {density}"]
            row.update(
                {
                    "native_ms": native.median_s * 1e3,
                    "native_spread_ms": [native.min_s * 1e3, native.max_s * 1e3],
                    "native_ratio": ratio(native, dense),
                    "native_noisy": noisy(native, dense),
                    "native_gflops_per_s": row["gflops"] / native.median_s,
                }
            )
            if f"scipy {density}" in timings:
                s = timings[f"scipy {density}"]
                row["scipy_bsr_ms"] = s.median_s * 1e3
                row["scipy_bsr_spread_ms"] = [s.min_s * 1e3, s.max_s * 1e3]
                row["ratio_vs_scipy"] = ratio(t, s)
                row["noisy_vs_scipy"] = noisy(t, s)
            rows_out.append(row)
    summary = {}
    for step in ("fwd", "fwd+bwd"):
        summary[step] = _break_even([r for r in rows_out if r["pass"] == step])
    columns = ["pass", "density", "ours_ms", "dense_ms", "ratio", "ratio_per_density", "noisy"]
    columns += ["scipy_bsr_ms", "ratio_vs_scipy", "gemm_floor_ms", "copy_limit_ms", "gflops", "dense_gflops"]
    columns += ["mbytes", "native_ms", "native_ratio", "native_gflops_per_s"]
    print(f"\n### Block-sparse matmul (block {BLOCK}) vs dense tf.linalg.matmul and scipy BSR, M={m} K={k} N={n}\n")
    print(markdown_table(rows_out, columns))
    for step, where in summary.items():
        print(f"\n{step}: block-sparse stops winning at density {where}")
    return {
        "m": m,
        "k": k,
        "n": n,
        "block_size": BLOCK,
        "reps": reps,
        "rows": rows_out,
        "break_even": summary,
    }


def scipy_bsr(plan, w: np.ndarray) -> scipy.sparse.bsr_matrix:
    """W `[K, N]` as a scipy BSR matrix; `np.argwhere` order is row-major, which is BSR's block order."""
    block_rows = plan.blocks[:, 0]
    indptr = np.zeros(plan.layout.shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(block_rows, minlength=plan.layout.shape[0]), out=indptr[1:])
    return scipy.sparse.bsr_matrix(
        (w, plan.blocks[:, 1].astype(np.int32), indptr), shape=(plan.in_features, plan.out_features)
    )


def _check_scipy(ours: np.ndarray, w_t, x_t: np.ndarray, density: float) -> None:
    """The peer must compute the same product before its time means anything."""
    theirs = (w_t @ x_t).T
    if not np.allclose(ours, theirs, rtol=1e-3, atol=1e-3):
        worst = float(np.max(np.abs(ours - theirs)))
        raise AssertionError(f"scipy BSR product differs from ours at density {density}: max |diff| {worst}")


def gemm_floor(plan, m: int, backward: bool):
    """The batched matmuls of `plan`'s products alone (see the module docstring), as a callable."""
    bs = plan.block_size
    rows = min(plan.chunk_rows, m)
    chunks = -(-m // rows)
    rng = np.random.default_rng(3)

    def operand(*shape):
        # Variables, not constants: grappler would fold a product of constants at trace time.
        return tf.Variable(rng.standard_normal(shape).astype(np.float32))

    shapes = plan.gemm_shapes()
    products = [(operand(n, bs, w * bs), operand(n, w * bs, rows), False) for n, w in shapes["y"]]
    if backward:
        products += [(operand(n, bs, w * bs), operand(n, w * bs, rows), False) for n, w in shapes["dx"]]
        products += [(operand(n, w * bs, rows), operand(n, bs, rows), True) for n, w in shapes["y"]]

    def one_chunk(_):
        # A corner of each product keeps it live without timing a reduction over it.
        return tf.add_n(
            [tf.reduce_sum(tf.matmul(a, b, transpose_b=t)[:, :1, :1]) for a, b, t in products]
            + [tf.constant(0.0)]
        )

    return tf.function(
        lambda: tf.map_fn(one_chunk, tf.range(chunks), fn_output_signature=tf.float32, parallel_iterations=1)
    )


def copy_limit(nbytes: float):
    """A numpy copy that moves `nbytes` (reads plus writes): the memory-bandwidth floor for that traffic."""
    elements = max(1, int(nbytes / 2) // 4)
    source = np.ones(elements, dtype=np.float32)
    target = np.empty_like(source)
    return lambda: np.copyto(target, source)


def _matmul_grads(fn, x, w, dy):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn()
        # y is returned too: neither gradient depends on it, so it would be pruned and not timed.
        return y, tape.gradient(y, [x, w], output_gradients=dy)

    return step


def _matmul_costs(plan, m, backward):
    """FLOPs and minimal bytes (read x and w, write y) of the block-sparse and the dense product."""
    k, n, bs = plan.in_features, plan.out_features, plan.block_size
    products = 3 if backward else 1  # y; dx and dw for the backward pass
    flops = 2 * m * bs * bs * plan.nnz_blocks * products
    dense_flops = 2 * m * k * n * products
    moved = 4 * (m * k + plan.nnz_blocks * bs * bs + m * n) * products
    dense_moved = 4 * (m * k + k * n + m * n) * products
    return {
        "gflops": flops / 1e9,
        "dense_gflops": dense_flops / 1e9,
        "mbytes": moved / 1e6,
        "dense_mbytes": dense_moved / 1e6,
    }


def _break_even(rows) -> str:
    """The density where the time ratio crosses 1, interpolated between measured densities."""
    previous = None
    for row in rows:
        if row["ratio"] >= 1.0:
            if previous is None:
                return f"<= {row['density']:.2f} (slower at every density)"
            d0, r0, d1, r1 = previous["density"], previous["ratio"], row["density"], row["ratio"]
            return f"~{d0 + (1.0 - r0) * (d1 - d0) / (r1 - r0):.2f} (between {d0:.2f} and {d1:.2f})"
        previous = row
    return "> 1.00 (faster at every density measured)"


# torch ------------------------------------------------------------------------------------------


_AFTER_TORCH = ("after torch fwd (not reported)", "after torch fwd+bwd (not reported)")


def _torch_embedding_bag(quick: bool) -> dict:
    try:
        import torch
    except ImportError:
        message = "torch is not importable here: torch.nn.functional.embedding_bag comparison skipped"
        print(f"\n{message}")
        return {"skipped": message}
    torch.set_num_threads(2)
    batch, vocab, reps = (1024, 100_000, 5) if quick else (4096, 1_000_000, 15)
    rng = np.random.default_rng(0)
    rows, cols, weights, _, _ = _ids_batch(rng, batch, vocab, skewed=False)
    table_np = rng.standard_normal((vocab, DIM)).astype(np.float32)
    table = tf.Variable(table_np)
    upstream_np = rng.standard_normal((batch, DIM)).astype(np.float32)
    upstream = tf.constant(upstream_np)
    weight = torch.nn.Parameter(torch.from_numpy(table_np.copy()))
    offsets = torch.from_numpy(np.searchsorted(rows, np.arange(batch)).astype(np.int64))
    t_ids, t_weights = torch.from_numpy(cols), torch.from_numpy(weights)
    t_upstream = torch.from_numpy(upstream_np)
    coo = [tf.constant(rows), tf.constant(cols), tf.constant(weights)]

    def ours():
        return ops.embedding_bag(table, *coo, batch, implementation="csr")

    def native():
        return ops.embedding_bag(table, *coo, batch, implementation="native")

    def unique_gather():
        # The first two steps of the design (each distinct id read once): with stock TensorFlow
        # ops they run as separate kernels, and their time bounds ours from below.
        unique_ids, slot = tf.unique(coo[1], out_idx=tf.int64)
        return tf.gather(table, unique_ids), slot

    def torch_forward():
        with torch.no_grad():
            return torch.nn.functional.embedding_bag(
                t_ids, weight, offsets, mode="sum", per_sample_weights=t_weights
            )

    def torch_forward_backward():
        weight.grad = None
        out = torch.nn.functional.embedding_bag(
            t_ids, weight, offsets, mode="sum", per_sample_weights=t_weights, sparse=True
        )
        (out * t_upstream).sum().backward()
        return weight.grad

    timings = alternate(
        {
            "ours fwd": blocking(tf.function(ours)),
            "unique+gather": blocking(tf.function(unique_gather)),
            "torch fwd": torch_forward,
            _AFTER_TORCH[0]: busy(0.3),  # untimed in the results: takes torch's spinning threads
            "ours fwd+bwd": blocking(_forward_backward(ours, table, upstream)),
            "torch fwd+bwd": torch_forward_backward,
            _AFTER_TORCH[1]: busy(0.3),
            "native fwd": blocking(tf.function(native)),
            "native fwd+bwd": blocking(_forward_backward(native, table, upstream)),
        },
        reps=reps,
        warmup=2,
        before=cache_flush(),  # cold rows, as a new batch's
    )
    rows_out = []
    for step in ("fwd", "fwd+bwd"):
        a, b = timings[f"ours {step}"], timings[f"torch {step}"]
        rows_out.append(
            {
                "pass": step,
                "ours_ms": a.median_s * 1e3,
                "torch_ms": b.median_s * 1e3,
                "ours_spread_ms": [a.min_s * 1e3, a.max_s * 1e3],
                "torch_spread_ms": [b.min_s * 1e3, b.max_s * 1e3],
                "ratio": ratio(a, b),
                "ours_ns_per_id": a.median_s / rows.size * 1e9,
                "torch_ns_per_id": b.median_s / rows.size * 1e9,
                "noisy": noisy(a, b),
            }
        )
        n = timings[f"native {step}"]
        rows_out[-1].update(
            {
                "native_ms": n.median_s * 1e3,
                "native_spread_ms": [n.min_s * 1e3, n.max_s * 1e3],
                "native_vs_torch": ratio(n, b),
                "native_noisy": noisy(n, b),
            }
        )
    floor, torch_fwd = timings["unique+gather"], timings["torch fwd"]
    floor_row = {
        "unique_gather_ms": floor.median_s * 1e3,
        "unique_gather_spread_ms": [floor.min_s * 1e3, floor.max_s * 1e3],
        "unique_gather_ns_per_id": floor.median_s / rows.size * 1e9,
        "unique_gather_over_torch_fwd": floor.median_s / torch_fwd.median_s,
    }
    print(f"\n### Embedding bag vs torch.nn.functional.embedding_bag (weighted, batch {batch})\n")
    print(
        markdown_table(
            rows_out,
            ["pass", "ours_ms", "native_ms", "torch_ms", "ratio", "native_vs_torch", "ours_ns_per_id"]
            + ["torch_ns_per_id"],
        )
    )
    print(
        f"\ntf.unique + tf.gather of the distinct rows alone: {floor_row['unique_gather_ms']:.2f} ms, "
        f"{floor_row['unique_gather_over_torch_fwd']:.2f}x torch's whole forward"
    )
    return {"rows": rows_out, "unique_gather": floor_row}


def cache_flush(nbytes: int = 64 << 20):
    """A numpy copy of `nbytes` (twice this machine's 32 MiB L3): evicts the table rows a call left cached."""
    source = np.ones(nbytes // 8)
    target = np.empty_like(source)
    return lambda: np.copyto(target, source)


def blocking(fn):
    """Waits for the devices, so that a timing covers the work and not only its dispatch (on GPU).

    Without a GPU it returns `fn` itself: CPU ops have finished when their call returns, and the
    wait would only add its own cost (0.38 ms after the cache flush, measured), which torch's
    contenders do not pay.
    """
    if not tf.config.list_logical_devices("GPU"):
        return fn

    def call():
        out = fn()
        tf.test.experimental.sync_devices()
        return out

    return call


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    results = run(quick=args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
