"""Every CUDA kernel against the numpy references of `benchmarks.kernel_references`, on random shapes."""

from __future__ import annotations

import functools

import numpy as np

from benchmarks import kernel_references as ref
from benchmarks._cuda_kernels import Kernels, block_plan
from benchmarks.gpu_kernel_data import BLOCK_SIZES, DTYPES, STORAGE, Bag, from_dtype, to_dtype


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
        scratch = device.empty(kernels.forward_scratch_bytes(s))
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
        for dtype in (*DTYPES, "tf32"):  # tf32: float32 on TF32 tensor cores, the opt-in
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
