"""The CUDA kernels where no GPU is present: the harness skips saying so, the sources compile with nvcc, and
the kernels' shared index logic (ops/cuda/bag_logic.h, block_plan.h), built for the host, matches numpy."""

import ctypes
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from benchmarks._cuda_kernels import Kernels, block_plan
from benchmarks.cuda_build import build_cuda_library, build_host_library, find_nvcc
from benchmarks.gpu_kernels import NO_GPU_MESSAGE, Bag

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
_p, _i64, _i32, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    try:
        lib = ctypes.CDLL(str(build_host_library(tmp_path_factory.mktemp("host"))))
    except RuntimeError as error:
        pytest.skip(f"no host build of the kernel logic: {error}")
    lib.sparseflow_host_embedding_bag_forward.argtypes = [_p, _i64, _i64, _p, _p, _p, _i64, _i32, _p]
    lib.sparseflow_host_embedding_bag_forward.restype = _int
    lib.sparseflow_host_embedding_bag_grad.argtypes = [_p, _i64, _p, _p, _p, _i64, _i32, _i64, _p, _p]
    lib.sparseflow_host_embedding_bag_grad.restype = _i64
    lib.sparseflow_host_embedding_bag_grad_gains.argtypes = [_p, _p, _i64, _i64, _p, _p, _i64, _i32, _p]
    lib.sparseflow_host_embedding_bag_grad_gains.restype = None
    lib.sparseflow_host_block_product.argtypes = [_p, _i64, _i32, _i32, _i32, _p, _p, _p, _p, _int, _p]
    lib.sparseflow_host_block_product.restype = None
    return lib


def _a(array):
    return array.ctypes.data


def _bags():
    rng = np.random.default_rng(5)
    return {
        "duplicates, empty bags, padding": Bag(rng, 37, 50, 64, 6, padding=5),
        "dim 3": Bag(rng, 50, 20, 3, 4, padding=2),
        "dim 256, long bags": Bag(rng, 9, 1000, 256, 40),
        "no entries": Bag(rng, 4, 10, 8, 0),
        "gains of both signs": Bag(rng, 20, 7, 12, 5, gain_range=(-2.0, 2.0)),
    }


@pytest.mark.parametrize("name", list(_bags()))
def test_forward_matches_the_numpy_sums(host, name):
    bag = _bags()[name]
    assert bag.n == 0 or np.all(np.diff(bag.rows) >= 0)
    out = np.full((bag.sample_count, bag.dim), np.nan, np.float32)  # every row must be written
    status = host.sparseflow_host_embedding_bag_forward(
        _a(bag.table), bag.vocab, bag.dim, _a(bag.rows), _a(bag.cols), _a(bag.gains), bag.n, bag.sample_count, _a(out)
    )
    assert status == 0
    want, bound = ref.embedding_bag(bag.table, bag.rows, bag.cols, bag.gains, bag.sample_count)
    ref.check_close(out, want, bound, "float32", name)
    if name.startswith("duplicates"):
        assert (bag.lengths == 0).any() and not out[bag.lengths == 0].any()  # empty bags are zero rows


def test_forward_refuses_rows_out_of_order(host):
    bag = Bag(np.random.default_rng(6), 10, 5, 4, 3, shuffle=True)
    assert np.any(np.diff(bag.rows) < 0)
    out = np.zeros((bag.sample_count, bag.dim), np.float32)
    args = (_a(bag.table), bag.vocab, bag.dim, _a(bag.rows), _a(bag.cols), _a(bag.gains), bag.n, bag.sample_count)
    assert host.sparseflow_host_embedding_bag_forward(*args, _a(out)) == -1


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("name", list(_bags()))
def test_gradient_has_one_summed_row_per_distinct_id_and_no_padding(host, name, shuffle):
    bag = _bags()[name]
    if shuffle:
        order = np.random.default_rng(7).permutation(bag.n)
        bag.rows, bag.cols, bag.gains = bag.rows[order], bag.cols[order], bag.gains[order]
    out_grad = np.random.default_rng(8).standard_normal((bag.sample_count, bag.dim)).astype(np.float32)
    ids = np.full(max(bag.n, 1), -1, np.int64)
    rows = np.zeros((max(bag.n, 1), bag.dim), np.float32)
    unique = host.sparseflow_host_embedding_bag_grad(
        _a(out_grad), bag.dim, _a(bag.rows), _a(bag.cols), _a(bag.gains), bag.n, bag.sample_count, bag.vocab,
        _a(ids), _a(rows),
    )
    want_ids, want_rows, bound = ref.embedding_bag_grad(
        out_grad, bag.rows, bag.cols, bag.gains, bag.sample_count, bag.vocab
    )
    np.testing.assert_array_equal(ids[:unique], want_ids)
    ref.check_close(rows[:unique], want_rows, bound, "float32", name)
    d_gains = np.full(max(bag.n, 1), np.nan, np.float32)
    host.sparseflow_host_embedding_bag_grad_gains(
        _a(out_grad), _a(bag.table), bag.vocab, bag.dim, _a(bag.rows), _a(bag.cols), bag.n, bag.sample_count,
        _a(d_gains),
    )
    want_g, bound_g = ref.embedding_bag_gains_grad(out_grad, bag.table, bag.rows, bag.cols, bag.sample_count)
    ref.check_close(d_gains[: bag.n], want_g, bound_g, "float32", name)
    padding = bag.rows == bag.sample_count
    if padding.any():
        assert not d_gains[: bag.n][padding].any()


def test_padding_ids_are_not_gradient_ids(host):
    # Ids 3 and 4 appear only in padding entries (row == sample_count = 2).
    rows = np.array([0, 1, 1, 2, 2], np.int32)
    cols = np.array([1, 1, 0, 3, 4], np.int64)
    gains = np.array([1.0, 2.0, 3.0, 0.0, 0.0], np.float32)
    out_grad = np.array([[1.0, 10.0], [100.0, 1000.0]], np.float32)
    ids, d_rows = np.zeros(5, np.int64), np.zeros((5, 2), np.float32)
    unique = host.sparseflow_host_embedding_bag_grad(
        _a(out_grad), 2, _a(rows), _a(cols), _a(gains), 5, 2, 5, _a(ids), _a(d_rows)
    )
    assert unique == 2
    assert ids[:2].tolist() == [0, 1]
    # id 0: 3 * out_grad[1]; id 1: 1 * out_grad[0] + 2 * out_grad[1].
    np.testing.assert_array_equal(d_rows[:2], [[300.0, 3000.0], [201.0, 2010.0]])


def _plan_by_hand(layout, by_column):
    """Members of each output in ascending partner order, from the layout's coordinates."""
    coords = [tuple(c) for c in np.argwhere(layout)]  # row-major: index i is w[i]
    outputs = layout.shape[1] if by_column else layout.shape[0]
    members = {o: [] for o in range(outputs)}
    for i, (r, c) in enumerate(coords):
        members[c if by_column else r].append((r if by_column else c, i))
    return [sorted(members[o]) for o in range(outputs)]


@pytest.mark.parametrize("by_column", [True, False])
def test_block_plan_lists_each_outputs_blocks(host, by_column):
    layout = np.random.default_rng(9).random((6, 7)) < 0.4
    layout[:, 3] = False
    layout[2, :] = False
    offsets, partners, slots = block_plan(host, layout, by_column)
    got = [list(zip(partners[offsets[o] : offsets[o + 1]], slots[offsets[o] : offsets[o + 1]]))
           for o in range(len(offsets) - 1)]
    assert [[(int(p), int(s)) for p, s in members] for members in got] == _plan_by_hand(layout, by_column)


@pytest.mark.parametrize("block", [8, 16, 32, 64])
def test_products_over_the_plan_match_the_dense_matrix(host, block):
    rng = np.random.default_rng(block)
    layout = rng.random((3, 4)) < 0.5
    layout[:, 1] = False
    layout[0, 0] = True
    m, k, n = 5, 3 * block, 4 * block
    nnz = int(layout.sum())
    x = rng.standard_normal((m, k)).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    w = rng.standard_normal((nnz, block, block)).astype(np.float32)
    dense = ref.block_dense(layout, w)
    for what, a, by_column, outputs, want, bound in (
        ("y", x, True, 4, x.astype(np.float64) @ dense, np.abs(x) @ np.abs(dense)),
        ("dx", dy, False, 3, dy.astype(np.float64) @ dense.T, np.abs(dy) @ np.abs(dense.T)),
    ):
        offsets, partners, slots = block_plan(host, layout, by_column)
        out = np.full((m, outputs * block), np.nan, np.float32)
        host.sparseflow_host_block_product(
            _a(a), m, a.shape[1] // block, outputs, block, _a(w), _a(offsets), _a(partners), _a(slots),
            int(not by_column), _a(out),
        )
        ref.check_close(out, want, bound, "float32", what)


def test_bfloat16_conversion_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.0e38], np.float32)
    bits = ref.bf16_bits(values)
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even one, 1; 1 + 3*2^-8 rounds up to 1 + 2^-6.
    assert bits.tolist()[:4] == [0x3F80, 0xC020, 0x3F80, 0x3F82]
    assert ref.bf16_values(bits).tolist()[:4] == [1.0, -2.5, 1.0, 1.0 + 2**-6]


def test_harness_without_a_gpu_exits_0_saying_so():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_kernels", "--quick"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert NO_GPU_MESSAGE in done.stdout


def test_kernel_sources_compile_with_nvcc(tmp_path, host):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): the CUDA sources cannot be compiled here")
    library = build_cuda_library("sm_90", tmp_path, nvcc)
    kernels = Kernels(library)  # every function of the C interface is exported
    # The library's host-side plan builder agrees with the host build's.
    layout = np.random.default_rng(10).random((4, 5)) < 0.5
    for by_column in (True, False):
        for ours, theirs in zip(block_plan(kernels.lib, layout, by_column), block_plan(host, layout, by_column)):
            np.testing.assert_array_equal(ours, theirs)


def test_plan_tables_for_the_tensorflow_ops_match_the_kernels_plan(host):
    from ops.gpu_ops import plan_tables

    rng = np.random.default_rng(11)
    for shape in ((1, 1), (5, 3), (8, 9)):
        layout = rng.random(shape) < 0.5
        for by_column in (True, False):
            for ours, kernels_plan in zip(plan_tables(layout, by_column), block_plan(host, layout, by_column)):
                np.testing.assert_array_equal(ours, kernels_plan[: len(ours)])


def test_gpu_ops_target_says_when_tensorflow_has_no_cuda(tmp_path):
    # A TensorFlow without CUDA, as `import tensorflow` sees it.
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(
        "class test:\n    @staticmethod\n    def is_built_with_cuda():\n        return False\n"
    )
    done = subprocess.run(
        ["make", "-s", "gpu-ops", f"GPU_PY=env PYTHONPATH={tmp_path} {sys.executable}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[0] == (
        "error: gpu-ops needs TensorFlow built with CUDA; this TensorFlow has no CUDA support"
    )


def test_gpu_ops_build_and_register_gpu_kernels_where_tensorflow_has_cuda(tmp_path):
    tf = pytest.importorskip("tensorflow")
    if not tf.test.is_built_with_cuda():
        pytest.skip("this TensorFlow has no CUDA: `make gpu-ops` refuses (tested above)")
    if find_nvcc() is None:
        pytest.skip("nvcc not found: `make gpu-ops` cannot build here")
    # A compile-and-register check: where no nvcc of TensorFlow's CUDA release is installed (this machine has
    # 13.0 for TensorFlow's 12.5), any release builds it, as GPU_OPS_ANY_NVCC allows; nothing runs on a GPU here.
    done = subprocess.run(
        ["make", "-s", "gpu-ops", f"GPU_PY={sys.executable}", f"GPU_OPS_DIR={tmp_path}", "GPU_ARCHS=sm_90",
         "GPU_OPS_ANY_NVCC=1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    from tensorflow.python.framework import kernels

    from ops import _native
    from ops.gpu_ops import OP_NAMES, load

    _native.library()  # the CPU kernels' ops first, as in a training process: the names must not clash
    library = load(tmp_path / "libsparseflow_gpu_ops.so")
    assert hasattr(library, "sparseflow_gpu_embedding_bag") and hasattr(library, "sparseflow_gpu_block_sparse_mat_mul")
    for name in OP_NAMES.values():
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(name).kernel}
        assert devices == {"GPU"}, (name, devices)
    # Plans and block lists come in host memory, where they are checked against the shapes before any launch.
    host_memory = {
        name: {arg for k in kernels.get_registered_kernels_for_op(OP_NAMES[name]).kernel for arg in k.host_memory_arg}
        for name in ("block_sparse_matmul", "block_sparse_weight_grad")
    }
    assert host_memory == {"block_sparse_matmul": {"offsets", "partners", "slots"},
                           "block_sparse_weight_grad": {"blocks"}}
    # The entries' check costs a host synchronisation each step: off unless asked for.
    from tensorflow.python.framework import op_def_registry

    attrs = {a.name: a for a in op_def_registry.get(OP_NAMES["embedding_bag"]).attr}
    assert attrs["validate"].default_value.b is False
    # TF32 tensor cores for float32 are opt-in on both block-sparse ops.
    for name in ("block_sparse_matmul", "block_sparse_weight_grad"):
        attrs = {a.name: a for a in op_def_registry.get(OP_NAMES[name]).attr}
        assert attrs["allow_tf32"].default_value.b is False, name


def test_loading_unbuilt_gpu_ops_names_the_build_command(tmp_path):
    from ops.gpu_ops import load

    with pytest.raises(FileNotFoundError, match="run `make gpu-ops`"):
        load(tmp_path / "missing.so")


def test_the_gpu_run_script_as_the_docs_give_it_refuses_without_a_gpu(tmp_path):
    # The script is what a CUDA machine runs to check the kernels under compute-sanitizer: exiting 0 where nothing ran
    # would read as a pass, so it refuses (exit 2) with one line instead; the harness itself still exits 0 (above).
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OUT=str(tmp_path / "results"), PYTHON=sys.executable)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        ["bash", "benchmarks/gpu_kernels_run.sh"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "refused: no CUDA GPU visible; nothing checked or timed" in done.stderr
    assert (tmp_path / "results" / "environment.txt").exists()
    assert not (tmp_path / "results" / "GPU_RESULTS.md").exists()


class _HostMemory:
    """Stands in for the harness's CUDA device: buffers are numpy bytes, addresses are host addresses."""

    library = "host"

    def put(self, array):
        from benchmarks._cuda_device import Buffer

        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8).copy()
        return Buffer(raw, raw.ctypes.data, raw.nbytes)

    def empty(self, nbytes):
        from benchmarks._cuda_device import Buffer

        raw = np.zeros(max(int(nbytes), 1), np.uint8)
        return Buffer(raw, raw.ctypes.data, raw.nbytes)

    def get(self, buffer, dtype, shape):
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return buffer.handle[:count].view(dtype).reshape(shape).copy()

    def fill_zero(self, buffer):
        buffer.handle[:] = 0

    def copy(self, dst, src):
        dst.handle[:] = src.handle

    def synchronize(self):
        pass

    def event(self):
        return _ClockEvent()


class _ClockEvent:
    def record(self):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_ms(self, later):
        return (later.at - self.at) * 1e3


class _HostKernels:
    """The harness's kernel calls answered by the host build (float32 paths) and numpy (the rest)."""

    def __init__(self, host, memory):
        self.lib, self.host, self.memory = host, host, memory

    def _array(self, buffer, dtype, count):
        return buffer.handle[: count * np.dtype(dtype).itemsize].view(dtype)

    def forward_scratch_bytes(self, sample_count):
        return 8 * (sample_count + 2)

    def bag_forward(self, table, vocab, dim, rows, cols, gains, n, sample_count, rows_sorted, scratch, out):
        r, c, g = self._array(rows, np.int32, n), self._array(cols, np.int64, n), self._array(gains, np.float32, n)
        order = np.argsort(r, kind="stable")
        r, c, g = (np.ascontiguousarray(a[order]) for a in (r, c, g))
        assert self.host.sparseflow_host_embedding_bag_forward(
            table.ptr, vocab, dim, r.ctypes.data, c.ctypes.data, g.ctypes.data, n, sample_count, out.ptr) == 0

    def bag_check(self, rows, cols, n, sample_count, vocab, first_bad):
        got = ref.first_bad_entries(self._array(rows, np.int32, n), self._array(cols, np.int64, n), sample_count, vocab)
        first_bad.handle[:16] = np.array(got, np.int64).view(np.uint8)

    def grad_workspace_bytes(self, n, vocab):
        return 8 * max(n, 1) * 64

    def grad_ids(self, rows, cols, n, sample_count, vocab, workspace, unique_ids, num_unique):
        self._grad = (rows, cols, n, sample_count, vocab, unique_ids, num_unique)

    def grad_rows(self, out_grad, dim, rows, gains, n, workspace, num_unique, max_unique, d_rows):
        rows, cols, n, sample_count, vocab, unique_ids, count = self._grad
        unique = self.host.sparseflow_host_embedding_bag_grad(
            out_grad.ptr, dim, rows.ptr, cols.ptr, gains.ptr, n, sample_count, vocab, unique_ids.ptr, d_rows.ptr)
        count.handle[:8] = np.array([unique], np.int64).view(np.uint8)

    def grad_gains(self, out_grad, table, vocab, dim, rows, cols, n, sample_count, d_gains):
        self.host.sparseflow_host_embedding_bag_grad_gains(
            out_grad.ptr, table.ptr, vocab, dim, rows.ptr, cols.ptr, n, sample_count, d_gains.ptr)

    def _values(self, buffer, dtype, count):
        from benchmarks.gpu_kernels import STORAGE, from_dtype

        return from_dtype(self._array(buffer, STORAGE[dtype], count), dtype).astype(np.float32)

    def _store(self, buffer, values, dtype):
        from benchmarks.gpu_kernels import to_dtype

        raw, _ = to_dtype(values, dtype)
        buffer.handle[: raw.nbytes] = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)

    def product(self, dtype, a, m, a_blocks, outputs, block, w, plan, transpose_blocks, out):
        offsets, partners, slots = plan
        nnz = int(self._array(offsets, np.int32, outputs + 1)[-1])
        a32 = np.ascontiguousarray(self._values(a, dtype, m * a_blocks * block))
        w32 = np.ascontiguousarray(self._values(w, dtype, nnz * block * block))
        result = np.zeros((m, outputs * block), np.float32)
        self.host.sparseflow_host_block_product(
            a32.ctypes.data, m, a_blocks, outputs, block, w32.ctypes.data, offsets.ptr, partners.ptr, slots.ptr,
            int(transpose_blocks), result.ctypes.data)
        self._store(out, result, dtype)

    def weight_grad(self, dtype, x, dy, m, k_blocks, n_blocks, block, blocks, nnz, dw):
        xs = self._values(x, dtype, m * k_blocks * block).reshape(m, -1).astype(np.float64)
        ds = self._values(dy, dtype, m * n_blocks * block).reshape(m, -1).astype(np.float64)
        at = self._array(blocks, np.int32, 2 * nnz).reshape(-1, 2)
        grads = [xs[:, r * block:(r + 1) * block].T @ ds[:, c * block:(c + 1) * block] for r, c in at]
        self._store(dw, np.array(grads, np.float32).reshape(nnz, block, block), dtype)


def test_the_harness_checks_and_report_run_end_to_end_on_host_stand_ins(host, tmp_path):
    from benchmarks import gpu_kernels

    memory = _HostMemory()
    checks = gpu_kernels.Checks()
    rng = np.random.default_rng(12)
    gpu_kernels.check_embedding_bag(_HostKernels(host, memory), memory, checks, rng)
    gpu_kernels.check_block_sparse(_HostKernels(host, memory), memory, checks, rng)
    assert checks.failed == 0, [row for row in checks.rows if not row["ok"]]
    kernels = {row["kernel"] for row in checks.rows}
    assert {"embedding_bag forward", "embedding_bag grad ids+rows", "embedding_bag grad gains", "embedding_bag check",
            "block-sparse forward", "block-sparse grad x", "block-sparse grad w"} <= kernels
    assert {row["dtype"] for row in checks.rows if row["kernel"].startswith("block")} == {"float32", "float16",
                                                                                        "bfloat16", "tf32"}
    # A wrong result is reported as a failure, not raised.
    checks.record("deliberately wrong", "case", "float32",
                  lambda: ref.check_close(np.ones(3), np.zeros(3), np.zeros(3), "float32", "wrong"))
    assert checks.failed == 1
    timing = gpu_kernels.timing_row("embedding_bag fwd, uniform ids", "torch", {"median_ms": 1.0, "min_ms": 0.9,
                                    "max_ms": 1.2, "reps": 3}, {"median_ms": 2.0, "min_ms": 1.9, "max_ms": 2.5,
                                    "reps": 3}, bound="b", target="t", met=True)
    assert timing["speedup"] == 2.0
    report = tmp_path / "GPU_RESULTS.md"
    gpu_kernels.write_report(report, {"GPU": "none (host stand-ins)"}, checks, [timing], ["a note"])
    text = report.read_text()
    assert f"{len(checks.rows) - 1} of {len(checks.rows)} checks pass" in text
    assert "| embedding_bag fwd, uniform ids | torch | 1 | 0.9-1.2 | 2 | 1.9-2.5 | 2 | b | t | yes |" in text
    assert "FAIL: wrong (float32)" in text
    pytest.importorskip("matplotlib")
    assert gpu_kernels.plot(tmp_path / "gpu_kernels.png", [timing]) and (tmp_path / "gpu_kernels.png").stat().st_size


def test_the_harness_timings_run_end_to_end_on_host_stand_ins(host, monkeypatch):
    from benchmarks import gpu_kernels

    monkeypatch.setitem(gpu_kernels.EMBEDDING_SHAPES, True, (1000, 8, 64))
    monkeypatch.setitem(gpu_kernels.BLOCK_SPARSE_SHAPES, True, ((64, 64, 96, 32), (0.5, 1.0)))
    memory = _HostMemory()
    kernels = _HostKernels(host, memory)
    timer = gpu_kernels.Timer(memory, reps=2, warmup=1, flush_bytes=1024)
    checks = gpu_kernels.Checks()
    bandwidth = gpu_kernels.copy_bandwidth(memory, timer, size=1 << 20)
    assert bandwidth > 0
    rows = gpu_kernels.time_embedding_bag(kernels, memory, timer, None, bandwidth, True, checks)
    rows += gpu_kernels.time_block_sparse(kernels, memory, timer, None, True, checks)
    assert checks.failed == 0 and len(checks.rows) == 2  # the timed embedding data checked, both id sets
    whats = [row["what"] for row in rows]
    assert "embedding_bag fwd, zipf(1.2) ids" in whats and "block-sparse bfloat16 density 1.0 fwd+bwd" in whats
    assert all(row["ours_ms"] > 0 for row in rows if "ours_ms" in row)
    assert all("speedup" not in row for row in rows)  # no torch on the device: no peer rows
