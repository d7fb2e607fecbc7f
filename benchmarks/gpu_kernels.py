"""The CUDA kernels of `ops/cuda/` on a GPU, without TensorFlow: checked against numpy, timed against torch.

    python -m benchmarks.gpu_kernels [--quick] [--reps N] [--output-dir DIR]

Needs a CUDA GPU, `nvcc`, and PyTorch or CuPy (for device memory and CUDA
events; the peers are torch's, so with CuPy alone only ours is timed). It
builds the kernels for the GPU's architecture (into a temporary directory),
then:

1. checks every kernel against the numpy references of
   `benchmarks.kernel_references` on random shapes: duplicate ids, padding
   entries, empty bags, unsorted rows, widths not a multiple of 4, the
   check kernel's first offending positions; block sizes 8, 16, 32 and 64
   in float32, float16 and bfloat16, with partial row tiles and empty block
   columns (tolerances in that module's docstring);
2. times, ours against the peer on the same device data, alternating, with
   CUDA events around each call, medians over repetitions, the L2 cache
   flushed (a 256 MiB write) before each call:
   - embedding bag (4096 bags of 1-19 ids, dim 64, 1M-row float32 table;
     uniform and Zipf(1.2) ids) against `torch.nn.functional.embedding_bag`
     (mode "sum", per_sample_weights; backward: sparse gradient and the
     weights' gradient), and the bytes-moved bound at the measured
     device-copy bandwidth;
   - block-sparse x[8192, 4096] @ W[4096, 4096], 32-blocks, densities 0.1,
     0.5 and 1.0, float32 and bfloat16, against dense `torch.matmul`
     (cuBLAS; torch's default: no TF32 for float32) and torch's BSR matmul
     where it runs; forward and forward+backward (dx and dw).
3. writes GPU_RESULTS.md (GPU, driver, CUDA, every check, every timing row
   with ours / peer / speed-up / bound / target), GPU_RESULTS.json and a
   plot, into benchmarks/ and into --output-dir.

Without a visible GPU it says so and exits 0. Exits 1 when a check fails
(the timings still run and the failures are listed in the results).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

from benchmarks import kernel_references as ref
from benchmarks._cuda_device import find_device
from benchmarks._cuda_kernels import Kernels, block_plan
from benchmarks.cuda_build import build_cuda_library, find_nvcc

NO_GPU_MESSAGE = "no CUDA GPU visible (torch or CuPy): skipping the CUDA kernel checks and timings"
BENCH_DIR = pathlib.Path(__file__).resolve().parent
BLOCK_SIZES = (8, 16, 32, 64)
# Timed shapes, full run and --quick: embedding (vocab, dim, bags); block-sparse ((M, K, N, block), densities).
EMBEDDING_SHAPES = {False: (1_000_000, 64, 4096), True: (200_000, 64, 4096)}
BLOCK_SPARSE_SHAPES = {False: ((8192, 4096, 4096, 32), (0.1, 0.5, 1.0)), True: ((2048, 2048, 2048, 32), (0.1, 1.0))}
DTYPES = ("float32", "float16", "bfloat16")


# ---------------------------------------------------------------- data on the device


def to_dtype(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(device representation, its exact values as float64) of float32 values in `dtype`."""
    values = np.asarray(values, np.float32)
    if dtype == "float32":
        return values, values.astype(np.float64)
    if dtype == "float16":
        half = values.astype(np.float16)
        return half, half.astype(np.float64)
    bits = ref.bf16_bits(values)
    return bits, ref.bf16_values(bits).astype(np.float64)


def from_dtype(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return ref.bf16_values(raw).astype(np.float64)
    return raw.astype(np.float64)


STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


class Bag:
    """A COO batch: rows (int32, sorted unless shuffled), ids (int64), gains (float32)."""

    def __init__(self, rng, sample_count, vocab, dim, max_ids, *, padding=0, zipf=None, shuffle=False,
                 gain_range=(0.5, 1.5)):
        lengths = rng.integers(0, max_ids + 1, sample_count)
        rows = np.repeat(np.arange(sample_count), lengths)
        if zipf:
            cols = (rng.zipf(zipf, rows.size) - 1) % vocab
        else:
            cols = rng.integers(0, vocab, rows.size)
        gains = rng.uniform(*gain_range, rows.size)
        # Padding as ops.pad_coo writes it: row == sample_count, id 0, gain 0.
        rows = np.concatenate([rows, np.full(padding, sample_count)])
        cols = np.concatenate([cols, np.zeros(padding, np.int64)])
        gains = np.concatenate([gains, np.zeros(padding)])
        if shuffle:
            order = rng.permutation(rows.size)
            rows, cols, gains = rows[order], cols[order], gains[order]
        self.rows, self.cols = rows.astype(np.int32), cols.astype(np.int64)
        self.gains = gains.astype(np.float32)
        self.lengths = lengths
        self.sample_count, self.vocab, self.dim, self.n = sample_count, vocab, dim, rows.size
        self.table = rng.standard_normal((vocab, dim)).astype(np.float32)


# ---------------------------------------------------------------- checks


class Checks:
    def __init__(self):
        self.rows: list[dict] = []

    def record(self, kernel: str, case: str, dtype: str, fn) -> None:
        try:
            worst = fn()
            self.rows.append({"kernel": kernel, "case": case, "dtype": dtype, "worst": worst, "ok": True, "error": ""})
        except Exception as error:  # every failure is reported, the run goes on
            self.rows.append({"kernel": kernel, "case": case, "dtype": dtype, "worst": float("nan"), "ok": False,
                              "error": str(error).splitlines()[0][:300]})
        last = self.rows[-1]
        status = "ok" if last["ok"] else f"FAILED: {last['error']}"
        print(f"check {kernel} [{case}, {dtype}]: {status}", flush=True)

    @property
    def failed(self) -> int:
        return sum(not row["ok"] for row in self.rows)


def check_embedding_bag(kernels: Kernels, device, checks: Checks, rng) -> None:
    cases = {
        "duplicates, empty bags, padding": Bag(rng, 37, 50, 64, 6, padding=5),
        "dim 3 (scalar loads)": Bag(rng, 50, 20, 3, 4, padding=2),
        "dim 256, long bags": Bag(rng, 40, 1000, 256, 40),
        "unsorted rows, padding": Bag(rng, 64, 30, 16, 5, padding=7, shuffle=True),
        "no entries": Bag(rng, 4, 10, 8, 0),
        "one bag, one id": Bag(rng, 1, 1, 4, 1),
    }
    for name, bag in cases.items():
        _check_bag(kernels, device, checks, rng, name, bag)
    _check_positions(kernels, device, checks)


def _check_bag(kernels: Kernels, device, checks: Checks, rng, name: str, bag: Bag) -> None:
    b = {k: device.put(getattr(bag, k)) for k in ("table", "rows", "cols", "gains")}
    s, v, d, n = bag.sample_count, bag.vocab, bag.dim, bag.n
    want, bound = ref.embedding_bag(bag.table, bag.rows, bag.cols, bag.gains, s)
    sorted_rows = bool(np.all(np.diff(bag.rows) >= 0))

    def forward(mode):
        out = device.empty(4 * s * d)
        scratch = device.empty(4)
        kernels.bag_forward(b["table"], v, d, b["rows"], b["cols"], b["gains"], n, s, mode, scratch, out)
        return ref.check_close(device.get(out, np.float32, (s, d)), want, bound, "float32", "forward")

    for mode in ((1, 0, -1) if sorted_rows else (0, -1)):
        case = f"{name}; rows_sorted={mode}"
        checks.record("embedding_bag forward", case, "float32", functools.partial(forward, mode))

    out_grad = rng.standard_normal((s, d)).astype(np.float32)
    g = device.put(out_grad)

    def grad():
        workspace = device.empty(kernels.grad_workspace_bytes(n, v))
        ids, count = device.empty(8 * max(n, 1)), device.empty(8)
        d_rows = device.empty(4 * max(n, 1) * d)
        kernels.grad_ids(b["rows"], b["cols"], n, s, v, workspace, ids, count)
        kernels.grad_rows(g, d, b["rows"], b["gains"], n, workspace, count, n, d_rows)
        unique = int(device.get(count, np.int64, (1,))[0])
        want_ids, want_rows, want_bound = ref.embedding_bag_grad(out_grad, bag.rows, bag.cols, bag.gains, s, v)
        got_ids = device.get(ids, np.int64, (max(n, 1),))[:unique]
        if not np.array_equal(got_ids, want_ids):
            raise AssertionError(f"gradient ids {got_ids[:8]}... ({unique}) vs {want_ids[:8]}... ({want_ids.size})")
        got_rows = device.get(d_rows, np.float32, (max(n, 1), d))[:unique]
        return ref.check_close(got_rows, want_rows, want_bound, "float32", "table gradient rows")

    checks.record("embedding_bag grad ids+rows", name, "float32", grad)

    def gains_grad():
        d_gains = device.empty(4 * max(n, 1))
        kernels.grad_gains(g, b["table"], v, d, b["rows"], b["cols"], n, s, d_gains)
        want_g, bound_g = ref.embedding_bag_gains_grad(out_grad, bag.table, bag.rows, bag.cols, s)
        return ref.check_close(device.get(d_gains, np.float32, (max(n, 1),))[:n], want_g, bound_g, "float32",
                               "gains gradient")

    checks.record("embedding_bag grad gains", name, "float32", gains_grad)


def _check_positions(kernels: Kernels, device, checks: Checks) -> None:
    def check_positions():
        rows = np.array([0, 0, 1, -1, 2, 9, 3, 3], np.int32)
        cols = np.array([1, 4, 2, 3, 0, 1, 2, 7], np.int64)
        # sample_count 3 and vocab 5: row -1 (position 3) and 9 (5) are bad, id 7 (position 7) is bad.
        for rows_, cols_, s, v in ((rows, cols, 3, 5), (rows[:3], cols[:3], 3, 5)):
            first = device.empty(16)
            kernels.bag_check(device.put(rows_), device.put(cols_), rows_.size, s, v, first)
            got = tuple(int(x) for x in device.get(first, np.int64, (2,)))
            want = ref.first_bad_entries(rows_, cols_, s, v)
            if got != want:
                raise AssertionError(f"first bad (id, row) positions {got}, expected {want}")
        return 0.0

    checks.record("embedding_bag check", "out-of-range ids and rows", "int64", check_positions)


def check_block_sparse(kernels: Kernels, device, checks: Checks, rng) -> None:
    for block in BLOCK_SIZES:
        # 3 x 5 blocks with block column 2 empty; 257 rows: partial tiles for every tile height.
        layout = rng.random((3, 5)) < 0.6
        layout[:, 2] = False
        layout[0, 0] = True
        m = 257
        by_col = [device.put(a) for a in block_plan(kernels.lib, layout, True)]
        by_row = [device.put(a) for a in block_plan(kernels.lib, layout, False)]
        blocks = device.put(np.argwhere(layout).astype(np.int32))
        for dtype in DTYPES:
            _check_block_dtype(kernels, device, checks, rng, layout, block, m, by_col, by_row, blocks, dtype)


def _check_block_dtype(kernels, device, checks, rng, layout, block, m, by_col, by_row, blocks, dtype) -> None:
    k, n = layout.shape[0] * block, layout.shape[1] * block
    nnz = int(layout.sum())
    x_raw, x = to_dtype(rng.standard_normal((m, k)), dtype)
    w_raw, w = to_dtype(rng.standard_normal((nnz, block, block)), dtype)
    dy_raw, dy = to_dtype(rng.standard_normal((m, n)), dtype)
    bx, bw, bdy = device.put(x_raw), device.put(w_raw), device.put(dy_raw)
    dense = ref.block_dense(layout, w)
    size = np.dtype(STORAGE[dtype]).itemsize

    def forward():
        y = device.empty(size * m * n)
        kernels.product(dtype, bx, m, layout.shape[0], layout.shape[1], block, bw, by_col, False, y)
        got = from_dtype(device.get(y, STORAGE[dtype], (m, n)), dtype)
        return ref.check_close(got, x @ dense, np.abs(x) @ np.abs(dense), dtype, "y = x @ W")

    def grad_x():
        dx = device.empty(size * m * k)
        kernels.product(dtype, bdy, m, layout.shape[1], layout.shape[0], block, bw, by_row, True, dx)
        got = from_dtype(device.get(dx, STORAGE[dtype], (m, k)), dtype)
        return ref.check_close(got, dy @ dense.T, np.abs(dy) @ np.abs(dense.T), dtype, "dx = dy @ W^T")

    def grad_w():
        dw = device.empty(size * nnz * block * block)
        kernels.weight_grad(dtype, bx, bdy, m, layout.shape[0], layout.shape[1], block, blocks, nnz, dw)
        got = from_dtype(device.get(dw, STORAGE[dtype], (nnz, block, block)), dtype)
        full, bound = x.T @ dy, np.abs(x.T) @ np.abs(dy)
        want = np.stack([full[r * block:(r + 1) * block, c * block:(c + 1) * block] for r, c in np.argwhere(layout)])
        bounds = np.stack([bound[r * block:(r + 1) * block, c * block:(c + 1) * block]
                           for r, c in np.argwhere(layout)])
        return ref.check_close(got, want, bounds, dtype, "dw = x^T @ dy")

    case = f"block {block}, {m}x{k} @ {k}x{n}, {nnz} blocks"
    checks.record("block-sparse forward", case, dtype, forward)
    checks.record("block-sparse grad x", case, dtype, grad_x)
    checks.record("block-sparse grad w", case, dtype, grad_w)


# ---------------------------------------------------------------- timing


class Timer:
    """Times zero-argument callables with CUDA events, alternating, the L2 cache flushed before each call."""

    def __init__(self, device, reps: int, warmup: int = 3, flush_bytes: int = 256 << 20):
        self.device, self.reps, self.warmup = device, reps, warmup
        self._flush = device.empty(flush_bytes)

    def run(self, contenders: dict) -> dict[str, dict]:
        names = list(contenders)
        for _ in range(self.warmup):
            for name in names:
                contenders[name]()
        self.device.synchronize()
        times = {name: [] for name in names}
        for round_index in range(self.reps):
            start = round_index % len(names)
            for name in names[start:] + names[:start]:
                self.device.fill_zero(self._flush)
                begin, end = self.device.event(), self.device.event()
                begin.record()
                contenders[name]()
                end.record()
                end.synchronize()
                times[name].append(begin.elapsed_ms(end))
        return {name: {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "reps": len(t)}
                for name, t in times.items()}


def copy_bandwidth(device, timer: Timer, size: int = 1 << 30) -> float:
    """Device-to-device copy of `size` bytes (1 GiB): bytes read plus written per second."""
    src, dst = device.empty(size), device.empty(size)
    device.fill_zero(src)
    got = timer.run({"copy": lambda: device.copy(dst, src)})["copy"]
    return 2 * size / (got["median_ms"] * 1e-3)


def timing_row(what, peer, ours, theirs, **extra) -> dict:
    row = {"what": what, "peer": peer, "ours_ms": ours["median_ms"],
           "ours_range": f"{ours['min_ms']:.3g}-{ours['max_ms']:.3g}"}
    if theirs is not None:
        row.update(peer_ms=theirs["median_ms"], peer_range=f"{theirs['min_ms']:.3g}-{theirs['max_ms']:.3g}",
                   speedup=theirs["median_ms"] / ours["median_ms"])
    row.update(extra)
    return row


def time_embedding_bag(kernels, device, timer, torch, bandwidth, quick, checks) -> list[dict]:
    rows_out = []
    rng = np.random.default_rng(3)
    vocab, dim, batch = EMBEDDING_SHAPES[quick]
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    t_table = device.put(table)
    for label, zipf in (("uniform ids", None), ("zipf(1.2) ids", 1.2)):
        rows_out += _time_bag_case(
            kernels, device, timer, torch, bandwidth, checks, rng, t_table, table, batch, label, zipf
        )
    return rows_out


def _time_bag_case(kernels, device, timer, torch, bandwidth, checks, rng, t_table, table, batch, label, zipf):
    """Rows of one id distribution: forward (sorted rows, and sortedness unknown) and forward+backward."""
    vocab, dim = table.shape
    rows_out = []
    lengths = rng.integers(1, 20, batch)
    rows = np.repeat(np.arange(batch), lengths).astype(np.int32)
    cols = ((rng.zipf(zipf, rows.size) - 1) % vocab if zipf else rng.integers(0, vocab, rows.size)).astype(np.int64)
    gains = rng.uniform(0.5, 1.5, rows.size).astype(np.float32)
    n, distinct = rows.size, np.unique(cols).size
    b_rows, b_cols, b_gains = device.put(rows), device.put(cols), device.put(gains)
    out, scratch = device.empty(4 * batch * dim), device.empty(4)
    out_grad = rng.standard_normal((batch, dim)).astype(np.float32)
    b_grad = device.put(out_grad)
    workspace = device.empty(kernels.grad_workspace_bytes(n, vocab))
    ids, count = device.empty(8 * n), device.empty(8)
    d_rows, d_gains = device.empty(4 * n * dim), device.empty(4 * n)

    def ours_forward(mode=1):
        kernels.bag_forward(t_table, vocab, dim, b_rows, b_cols, b_gains, n, batch, mode, scratch, out)

    def ours_both():
        ours_forward()
        kernels.grad_ids(b_rows, b_cols, n, batch, vocab, workspace, ids, count)
        kernels.grad_rows(b_grad, dim, b_rows, b_gains, n, workspace, count, n, d_rows)
        kernels.grad_gains(b_grad, t_table, vocab, dim, b_rows, b_cols, n, batch, d_gains)

    fwd_bytes = 16 * n + 4 * distinct * dim + 4 * batch * dim
    # Backward: ids and gains read, out_grad read, distinct rows and ids written, table rows read for the
    # gains' gradient, the gains' gradient written.
    bwd_bytes = 16 * n + 4 * batch * dim + distinct * (4 * dim + 8) + 4 * distinct * dim + 4 * n
    contenders = {"ours": ours_forward, "ours, rows_sorted unknown": lambda: ours_forward(-1)}
    both = {"ours": ours_both}
    if torch is not None:
        F = torch.nn.functional
        t_weight = t_table.handle.view(torch.float32).view(vocab, dim)
        t_ids = torch.from_numpy(cols).cuda()
        t_offsets = torch.from_numpy((np.cumsum(lengths) - lengths).astype(np.int64)).cuda()
        t_gains = torch.from_numpy(gains).cuda()
        leaf = t_weight.detach().requires_grad_(True)
        leaf_gains = t_gains.detach().requires_grad_(True)
        t_out_grad = torch.from_numpy(out_grad).cuda()

        def peer_forward():
            with torch.no_grad():
                F.embedding_bag(t_ids, t_weight, t_offsets, mode="sum", per_sample_weights=t_gains)

        def peer_both():
            result = F.embedding_bag(t_ids, leaf, t_offsets, mode="sum", per_sample_weights=leaf_gains, sparse=True)
            torch.autograd.grad(result, [leaf, leaf_gains], t_out_grad)

        contenders["torch"] = peer_forward
        both["torch"] = peer_both

    def against_reference():
        ours_forward()
        want, bound = ref.embedding_bag(table, rows, cols, gains, batch)
        return ref.check_close(device.get(out, np.float32, (batch, dim)), want, bound, "float32", "forward")

    checks.record("embedding_bag forward, timed data", label, "float32", against_reference)
    fwd = timer.run(contenders)
    fb = timer.run(both)
    peer = "torch.nn.functional.embedding_bag" if torch is not None else "(torch absent: no peer)"
    achieved = fwd_bytes / (fwd["ours"]["median_ms"] * 1e-3)
    bound_ms = fwd_bytes / bandwidth * 1e3
    meta = f"{batch} bags, {n} ids ({distinct} distinct), dim {dim}, {vocab} rows"
    rows_out.append(timing_row(
        f"embedding_bag fwd, {label}", peer, fwd["ours"], fwd.get("torch"),
        bound=f"{fwd_bytes / 1e6:.2f} MB: copy bound {bound_ms:.3g} ms; ours {achieved / 1e9:.0f} GB/s = "
              f"{achieved / bandwidth:.0%} of copy bandwidth",
        target=">= 50% of copy bandwidth, >= 1x torch",
        met=achieved >= 0.5 * bandwidth
        and ("torch" not in fwd or fwd["torch"]["median_ms"] >= fwd["ours"]["median_ms"]),
        data=meta))
    rows_out.append(timing_row(f"embedding_bag fwd, {label}, rows_sorted unknown", peer,
                               fwd["ours, rows_sorted unknown"], fwd.get("torch"), data=meta,
                               bound="sortedness checked on the device (one more pass, both kernels launched)"))
    bwd_ours = fb["ours"]["median_ms"] - fwd["ours"]["median_ms"]
    extra = {}
    if "torch" in fb:
        bwd_peer = fb["torch"]["median_ms"] - fwd["torch"]["median_ms"]
        extra = {"backward alone (fwd+bwd minus fwd)": f"ours {bwd_ours:.3g} ms, torch {bwd_peer:.3g} ms: "
                                                       f"{bwd_peer / bwd_ours:.2f}x"}
    rows_out.append(timing_row(
        f"embedding_bag fwd+bwd, {label}", peer + " (sparse=True, weights' gradient)", fb["ours"], fb.get("torch"),
        bound=f"backward {bwd_bytes / 1e6:.2f} MB: copy bound {bwd_bytes / bandwidth * 1e3:.3g} ms",
        target=">= 1x torch", met="torch" not in fb or fb["torch"]["median_ms"] >= fb["ours"]["median_ms"],
        data=meta, **extra))
    return rows_out


def time_block_sparse(kernels, device, timer, torch, quick, checks) -> list[dict]:
    rows_out = []
    rng = np.random.default_rng(4)
    (m, k, n, block), densities = BLOCK_SPARSE_SHAPES[quick]
    for dtype in ("float32", "bfloat16"):
        size = np.dtype(STORAGE[dtype]).itemsize
        x_raw, _ = to_dtype(rng.standard_normal((m, k)).astype(np.float32), dtype)
        dy_raw, _ = to_dtype(rng.standard_normal((m, n)).astype(np.float32), dtype)
        bx, bdy = device.put(x_raw), device.put(dy_raw)
        y, dx = device.empty(size * m * n), device.empty(size * m * k)
        for density in densities:
            rows_out += _time_block_case(kernels, device, timer, torch, checks, rng, (m, k, n, block), dtype, density,
                                         bx, bdy, y, dx)
    return rows_out


def _time_block_case(kernels, device, timer, torch, checks, rng, shape, dtype, density, bx, bdy, y, dx) -> list[dict]:
    """Rows of one dtype and density: forward and forward+backward against dense, forward against BSR."""
    m, k, n, block = shape
    kb, nb = k // block, n // block
    size = np.dtype(STORAGE[dtype]).itemsize
    targets = {0.1: 5.0, 0.5: 1.5}
    rows_out = []
    layout = rng.random((kb, nb)) < density if density < 1 else np.ones((kb, nb), bool)
    nnz = int(layout.sum())
    w_raw, _ = to_dtype(rng.standard_normal((nnz, block, block)).astype(np.float32) / np.sqrt(k * density), dtype)
    bw = device.put(w_raw)
    by_col = [device.put(a) for a in block_plan(kernels.lib, layout, True)]
    by_row = [device.put(a) for a in block_plan(kernels.lib, layout, False)]
    blocks = device.put(np.argwhere(layout).astype(np.int32))
    dw = device.empty(size * nnz * block * block)
    data = f"x[{m},{k}] @ W[{k},{n}], {block}-blocks, {nnz} blocks"

    def ours_forward():
        kernels.product(dtype, bx, m, kb, nb, block, bw, by_col, False, y)

    def ours_both():
        kernels.product(dtype, bx, m, kb, nb, block, bw, by_col, False, y)
        kernels.product(dtype, bdy, m, nb, kb, block, bw, by_row, True, dx)
        kernels.weight_grad(dtype, bx, bdy, m, kb, nb, block, blocks, nnz, dw)

    fwd = {"ours": ours_forward}
    both = {"ours": ours_both}
    bsr_note = "torch absent"
    if torch is not None:
        tdt = torch.float32 if dtype == "float32" else torch.bfloat16
        tx = bx.handle.view(tdt).view(m, k)
        tdy = bdy.handle.view(tdt).view(m, n)
        tw = bw.handle.view(tdt).view(nnz, block, block)
        dense = torch.zeros(kb, nb, block, block, dtype=tdt, device="cuda")
        where = torch.from_numpy(np.argwhere(layout)).cuda()
        dense[where[:, 0], where[:, 1]] = tw
        dense = dense.permute(0, 2, 1, 3).reshape(k, n).contiguous()
        fwd["dense torch.matmul"] = lambda: torch.matmul(tx, dense)
        both["dense torch.matmul"] = lambda: (
            torch.matmul(tx, dense), torch.matmul(tdy, dense.t()), torch.matmul(tx.t(), tdy))

        def against_dense():
            ours_forward()
            expect = torch.matmul(tx.double(), dense.double())
            got = torch.from_numpy(from_dtype(device.get(y, STORAGE[dtype], (m, n)), dtype)).cuda()
            error = float((got - expect).norm() / expect.norm())
            allowed = 1e-5 if dtype == "float32" else 1e-2  # relative Frobenius error
            if error > allowed:
                raise AssertionError(f"relative error {error:.3g} against the float64 dense product")
            return error / allowed

        checks.record("block-sparse forward, timed data", f"{data}, density {density}", dtype, against_dense)
        try:
            w_bsr = dense.t().contiguous().to_sparse_bsr((block, block))
            x_t = tx.t().contiguous()
            torch.matmul(w_bsr, x_t)
            fwd["torch BSR matmul"] = lambda: torch.matmul(w_bsr, x_t)
            bsr_note = "torch BSR: W^T (BSR) @ x^T"
        except Exception as error:  # torch builds differ in what BSR supports
            bsr_note = f"torch BSR unavailable: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
    got_fwd = timer.run(fwd)
    got_both = timer.run(both)
    flops = 2 * m * block * block * nnz
    target = targets.get(density)
    label = f"block-sparse {dtype} density {density:.1f}"
    for name, got, factor in (("fwd", got_fwd, 1), ("fwd+bwd", got_both, 3)):
        peer = got.get("dense torch.matmul")
        rate = factor * flops / (got["ours"]["median_ms"] * 1e-3) / 1e12
        bound = f"ours {rate:.1f} TFLOP/s on {factor * flops / 1e9:.1f} GFLOP"
        if peer is not None:
            dense_rate = factor * 2 * m * k * n / (peer["median_ms"] * 1e-3) / 1e12
            bound += f"; dense {dense_rate:.1f} TFLOP/s"
        rows_out.append(timing_row(
            f"{label} {name}", "dense torch.matmul (cuBLAS)" if peer else "(torch absent: no peer)",
            got["ours"], peer, bound=bound, data=data,
            target=f">= {target}x dense" if target else "",
            met=(peer is not None and peer["median_ms"] / got["ours"]["median_ms"] >= target) if target else ""))
    if "torch BSR matmul" in got_fwd:
        rows_out.append(timing_row(f"{label} fwd", "torch BSR matmul", got_fwd["ours"],
                                   got_fwd["torch BSR matmul"], data=data, bound=bsr_note))
    else:
        rows_out.append({"what": f"{label} fwd", "peer": "torch BSR matmul", "bound": bsr_note, "data": data})
    print(f"timed {label}", flush=True)
    return rows_out


# ---------------------------------------------------------------- report


def nvcc_version(nvcc: str) -> str:
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if "release" in line]
    return lines[0].strip() if lines else "unknown"


def write_report(path: pathlib.Path, machine: dict, checks: Checks, timings: list[dict], notes: list[str]) -> None:
    columns = ["what", "peer", "ours_ms", "ours_range", "peer_ms", "peer_range", "speedup", "bound", "target", "met"]
    lines = ["# CUDA kernels on a GPU (`python -m benchmarks.gpu_kernels`)", ""]
    lines += [f"- {key}: {value}" for key, value in machine.items()]
    lines += ["", "Speed-up is the peer's median time over ours: above 1 means ours is faster. Times are CUDA-event",
              "times of one call each (medians, min-max over the repetitions), the L2 cache flushed before each call.",
              ""]
    lines += ["## Correctness", "",
              f"{len(checks.rows) - checks.failed} of {len(checks.rows)} checks pass. Tolerances: "
              "`|ours - ref| <= rtol*|ref| + scale*bound` (bound: the same sum over absolute values), "
              + ", ".join(f"{k} rtol {r:g} scale {s:g}" for k, (r, s) in ref.TOLERANCES.items())
              + "; `worst` is the largest error over its allowance (<= 1 passes).", "",
              "| kernel | case | dtype | worst | result |", "| --- | --- | --- | ---: | --- |"]
    for row in checks.rows:
        lines.append(f"| {row['kernel']} | {row['case']} | {row['dtype']} | {row['worst']:.3g} | "
                     f"{'pass' if row['ok'] else 'FAIL: ' + row['error']} |")
    lines += ["", "## Timings", "", "| " + " | ".join(columns) + " | data |", "|" + " --- |" * (len(columns) + 1)]
    for row in timings:
        cells = []
        for column in columns + ["data"]:
            value = row.get(column, "")
            if isinstance(value, bool):
                value = "yes" if value else "no"
            cells.append(f"{value:.3g}" if isinstance(value, float) else str(value))
        lines.append("| " + " | ".join(cells) + " |")
        for key, value in row.items():
            if key.startswith("backward alone"):
                lines.append(f"| ↳ {key}: {value} |" + " |" * len(columns))
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    path.write_text("\n".join(lines) + "\n")


def plot(path: pathlib.Path, timings: list[dict]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [row for row in timings if "speedup" in row]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.5))
    ax.barh([f"{r['what']} vs {r['peer'].split(' (')[0]}" for r in rows], [r["speedup"] for r in rows])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speed-up over the peer (peer time / ours)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions (a smoke run)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per contender (default 20, quick 5)")
    parser.add_argument("--output-dir", default=None, help="also write the results here")
    parser.add_argument("--build-dir", default=None, help="where the kernels are compiled (default: a temporary dir)")
    parser.add_argument("--no-timings", action="store_true", help="run the checks only")
    args = parser.parse_args(argv)
    device = find_device()
    if device is None:
        print(NO_GPU_MESSAGE)
        return 0
    nvcc = find_nvcc()
    if nvcc is None:
        print("error: a GPU is visible but nvcc was not found (PATH, $CUDA_HOME, /usr/local/cuda)", file=sys.stderr)
        return 1
    began = time.perf_counter()
    print(f"GPU: {device.name} ({device.arch}), driver {device.driver}, {device.runtime}", flush=True)
    library = build_cuda_library(device.arch, args.build_dir, nvcc)
    print(f"built {library.name} in {time.perf_counter() - began:.0f} s", flush=True)
    kernels = Kernels(library)
    rng = np.random.default_rng(0)
    checks = Checks()
    check_embedding_bag(kernels, device, checks, rng)
    check_block_sparse(kernels, device, checks, rng)
    try:
        import torch

        torch = torch if device.library == "torch" or torch.cuda.is_available() else None
    except ImportError:
        torch = None
    timings, notes = [], []
    bandwidth = None
    if not args.no_timings:
        timer = Timer(device, args.reps or (5 if args.quick else 20))
        bandwidth = copy_bandwidth(device, timer)
        print(f"device-copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write)", flush=True)
        parts = (
            ("embedding bag", lambda: time_embedding_bag(kernels, device, timer, torch, bandwidth, args.quick, checks)),
            ("block-sparse", lambda: time_block_sparse(kernels, device, timer, torch, args.quick, checks)),
        )
        for what, fn in parts:
            try:
                timings += fn()
            except Exception as error:  # the report says which part failed and why
                notes.append(f"{what} timings failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
                print(notes[-1], flush=True)
    if torch is None:
        notes.append("torch not importable with CUDA: no peers timed")
    elif not args.no_timings:
        notes.append(f"torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32}")
    machine = {
        "GPU": f"{device.name} (compute capability {device.capability[0]}.{device.capability[1]})",
        "driver": device.driver,
        "CUDA runtime": device.runtime,
        "nvcc": nvcc_version(nvcc),
        "device-copy bandwidth": f"{bandwidth / 1e9:.0f} GB/s (1 GiB device-to-device copy, read + write)"
        if bandwidth else "not measured",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.gpu_kernels" + (" --quick" if args.quick else ""),
        "run time": f"{time.perf_counter() - began:.0f} s",
    }
    targets = [BENCH_DIR]
    if args.output_dir:
        targets.append(pathlib.Path(args.output_dir))
    for directory in targets:
        directory.mkdir(parents=True, exist_ok=True)
        write_report(directory / "GPU_RESULTS.md", machine, checks, timings, notes)
        (directory / "GPU_RESULTS.json").write_text(
            json.dumps({"machine": machine, "checks": checks.rows, "timings": timings, "notes": notes}, indent=1,
                       default=str))
        plot((directory / "plots" if directory == BENCH_DIR else directory) / "gpu_kernels.png", timings)
        print(f"wrote {directory / 'GPU_RESULTS.md'}", flush=True)
    print(f"{len(checks.rows) - checks.failed} of {len(checks.rows)} checks pass; {len(timings)} timing rows; "
          f"{time.perf_counter() - began:.0f} s", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
