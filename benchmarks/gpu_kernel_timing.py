"""The CUDA kernels timed against torch on the same device data: CUDA events, medians, the L2 flushed."""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks import kernel_references as ref
from benchmarks._cuda_kernels import block_plan
from benchmarks.gpu_kernel_data import STORAGE, from_dtype, to_dtype

# Timed shapes, full run and --quick: embedding (vocab, dim, bags); block-sparse ((M, K, N, block), densities).
EMBEDDING_SHAPES = {False: (1_000_000, 64, 4096), True: (200_000, 64, 4096)}
BLOCK_SPARSE_SHAPES = {False: ((8192, 4096, 4096, 32), (0.1, 0.5, 1.0)), True: ((2048, 2048, 2048, 32), (0.1, 1.0))}


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
    out, scratch = device.empty(4 * batch * dim), device.empty(kernels.forward_scratch_bytes(batch))
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
