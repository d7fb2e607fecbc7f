"""The native embedding-bag kernel against a numpy reference and against the stock-op compositions.

Also: its selection by implementation="auto", the XLA path, thread-count
independence, and the fallback with one warning where no compiler exists.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import oracles
import pytest
import tensorflow as tf

import ops
from ops import _native, _native_build
from sparse_io import native_build as io_build

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not _native.available(), reason=f"native kernels unavailable here: {_native.unavailable_reason()}"
)


def _reference(table, rows, cols, gains, sample_count):
    """out[r] = sum of gains[k] * table[cols[k]] over entries with rows[k] == r; row S is padding."""
    return np.array(oracles.bags(table, (rows, cols, gains), sample_count)).reshape(sample_count, table.shape[1])


def _batch(seed, sample_count=9, vocab=12, dim=5, entries=40, padding=6, dtype=np.float32, shuffle=True):
    """Repeated ids (vocab is small), empty rows, padding entries with arbitrary gains, any entry order."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, sample_count, entries))
    rows = np.concatenate([rows, np.full(padding, sample_count)])
    cols = rng.integers(0, vocab, rows.size)
    gains = rng.uniform(-2.0, 2.0, rows.size).astype(dtype)
    if shuffle:
        order = rng.permutation(rows.size)
        rows, cols, gains = rows[order], cols[order], gains[order]
    table = rng.normal(size=(vocab, dim)).astype(dtype)
    return table, rows, cols, gains


def _uses_native_kernel(fn, *args) -> bool:
    graph = tf.function(fn).get_concrete_function(*args).graph
    return any(op.type == "SparseflowEmbeddingBag" for op in graph.get_operations())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("row_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("col_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shuffle", [False, True])
def test_forward_matches_the_numpy_reference(dtype, row_dtype, col_dtype, shuffle):
    table, rows, cols, gains = _batch(3, dtype=dtype, shuffle=shuffle)
    out = ops.embedding_bag(table, rows.astype(row_dtype), cols.astype(col_dtype), gains, 9, implementation="native")
    assert out.dtype == dtype and out.shape == (9, 5)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out.numpy(), _reference(table, rows, cols, gains, 9), rtol=tolerance, atol=tolerance)


# Unit roundoff of each 16-bit type: the kernel rounds a float32 sum once, so it is within this of the exact sum.
_HALF_EPS = {tf.float16: 2.0**-11, tf.bfloat16: 2.0**-8}


def _as_float64(tensor) -> np.ndarray:
    return tf.cast(tensor, tf.float64).numpy()


@pytest.mark.parametrize("dim", [8, 16, 32, 64, 128, 3, 63, 65])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_every_row_width_sums_as_the_reference(dim, dtype):
    # The forward keeps a bag's sum in registers for the widths 8-128 it is specialised for, and in memory
    # for any other; both must give the reference's sums, whatever the table dtype.
    table, rows, cols, gains = _batch(21 + dim, sample_count=40, vocab=50, dim=dim, entries=400, padding=5)
    table_t, gains_t = tf.cast(table, dtype), tf.cast(gains, dtype)
    out = ops.embedding_bag(table_t, rows, cols, gains_t, 40, implementation="native")
    assert out.dtype == dtype and out.shape == (40, dim)
    exact = _reference(_as_float64(table_t), rows, cols, _as_float64(gains_t), 40)
    magnitude = _reference(np.abs(_as_float64(table_t)), rows, cols, np.abs(_as_float64(gains_t)), 40)
    # A float32 (or float64) sum, rounded once to the table's dtype.
    eps = _HALF_EPS.get(tf.as_dtype(dtype), 0.0)
    sum_eps = 1e-14 if dtype == "float64" else 1e-6
    np.testing.assert_array_less(np.abs(_as_float64(out) - exact), eps * np.abs(exact) + sum_eps * magnitude + 1e-30)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
@pytest.mark.parametrize("shuffle", [False, True])
def test_16bit_tables_sum_in_float32_and_round_once(dtype, shuffle):
    table, rows, cols, gains = _batch(16, shuffle=shuffle)
    table16, gains16 = tf.cast(table, dtype), tf.cast(gains, dtype)
    out = ops.embedding_bag(table16, rows, cols, gains16, 9, implementation="native")
    assert out.dtype == dtype and out.shape == (9, 5)
    exact = _reference(_as_float64(table16), rows, cols, _as_float64(gains16), 9)
    eps = _HALF_EPS[dtype]
    # One rounding of a float32 sum: eps relative, plus float32's own error on the terms' magnitudes.
    magnitude = _reference(np.abs(_as_float64(table16)), rows, cols, np.abs(_as_float64(gains16)), 9)
    np.testing.assert_array_less(np.abs(_as_float64(out) - exact), eps * np.abs(exact) + 1e-6 * magnitude + 1e-30)
    # The composition rounds after every 16-bit product and addition: within a few roundings of the terms.
    composed = ops.embedding_bag(table16, rows, cols, gains16, 9, implementation="segment")
    assert composed.dtype == dtype
    np.testing.assert_array_less(np.abs(_as_float64(out) - _as_float64(composed)), 8 * eps * magnitude + 1e-30)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_16bit_gradients_match_the_composition(dtype):
    table, rows, cols, gains = _batch(17, shuffle=True)
    upstream = np.random.default_rng(18).normal(size=(9, 5))
    table16, gains16, upstream16 = (tf.cast(x, dtype) for x in (table, gains, upstream))
    d_table, d_gains = _gradients(table16, rows, cols, gains16, 9, "native", upstream16)
    assert isinstance(d_table, tf.IndexedSlices) and d_table.values.dtype == dtype and d_gains.dtype == dtype
    ref_table, ref_gains = _gradients(table16, rows, cols, gains16, 9, "segment", upstream16)
    eps = _HALF_EPS[dtype]
    real = rows < 9
    up, tab, gain = _as_float64(upstream16), _as_float64(table16), _as_float64(gains16)
    # Exact float64 gradients of the 16-bit values, and the sums of the terms' magnitudes as the error scale.
    exact_table, scale_table = np.zeros(table.shape), np.zeros(table.shape)
    np.add.at(exact_table, cols[real], gain[real, None] * up[rows[real]])
    np.add.at(scale_table, cols[real], np.abs(gain[real, None] * up[rows[real]]))
    padded_up = np.vstack([up, np.zeros((1, 5))])
    exact_gains = np.where(real, np.einsum("kd,kd->k", padded_up[rows], tab[cols]), 0.0)
    scale_gains = np.einsum("kd,kd->k", np.abs(padded_up[rows]), np.abs(tab[cols]))
    dense = _as_float64(tf.convert_to_tensor(d_table))
    gains_grad = _as_float64(d_gains)
    ref_dense = _as_float64(tf.convert_to_tensor(ref_table))
    ref_gains_grad = _as_float64(tf.convert_to_tensor(ref_gains))
    tiny = 1e-30
    np.testing.assert_array_less(np.abs(dense - exact_table), eps * np.abs(exact_table) + 1e-6 * scale_table + tiny)
    gains_bound = eps * np.abs(exact_gains) + 1e-6 * scale_gains + tiny
    np.testing.assert_array_less(np.abs(gains_grad - exact_gains), gains_bound)
    np.testing.assert_array_less(np.abs(dense - ref_dense), 8 * eps * scale_table + tiny)
    np.testing.assert_array_less(np.abs(gains_grad - ref_gains_grad), 8 * eps * scale_gains + tiny)


def test_auto_picks_the_native_kernel_for_16bit_tables_and_the_segment_composition_when_sharded():
    table, rows, cols, gains = _batch(19)
    table16 = tf.cast(table, tf.bfloat16)
    assert _uses_native_kernel(lambda: ops.embedding_bag(table16, rows, cols, gains, 9))
    sharded = [table16[:6], table16[6:]]
    graph = tf.function(lambda: ops.embedding_bag(sharded, rows, cols, gains, 9, partition_strategy="div"))
    operations = {op.type for op in graph.get_concrete_function().graph.get_operations()}
    assert "SparseflowEmbeddingBag" not in operations and "SparseMatrixMatMul" not in operations


def test_auto_picks_the_native_kernel_on_cpu_and_matches_csr():
    table, rows, cols, gains = _batch(4)

    def bag(implementation):
        return lambda: ops.embedding_bag(table, rows, cols, gains, 9, implementation=implementation)

    assert _uses_native_kernel(bag("auto"))
    assert not _uses_native_kernel(bag("csr"))
    np.testing.assert_allclose(bag("auto")().numpy(), bag("csr")().numpy(), rtol=1e-5, atol=1e-6)


def test_empty_batches_and_zero_samples():
    table = np.ones((4, 3), np.float32)
    empty = np.zeros(0, np.int64)
    out = ops.embedding_bag(table, empty, empty, np.zeros(0, np.float32), 5, implementation="native")
    np.testing.assert_array_equal(out.numpy(), np.zeros((5, 3)))
    only_padding = ops.embedding_bag(table, [2, 2], [1, 3], [1.0, 4.0], 2, implementation="native")
    np.testing.assert_array_equal(only_padding.numpy(), np.zeros((2, 3)))
    none = ops.embedding_bag(table, [0], [1], [1.0], 0, implementation="native")
    assert none.shape == (0, 3)


def test_non_finite_values_reach_their_own_rows_only():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    table[2, 1] = np.inf
    rows = np.array([0, 1, 1, 2, 3, 4])  # row 4 is padding: its inf row and NaN gain are skipped
    cols = np.array([0, 2, 1, 3, 1, 2])
    gains = np.array([1.0, 0.0, 1.0, np.nan, 2.0, np.nan], np.float32)
    out = ops.embedding_bag(table, rows, cols, gains, 4, implementation="native").numpy()
    composed = ops.embedding_bag(table, rows, cols, gains, 4, implementation="segment").numpy()
    with np.errstate(invalid="ignore"):
        expected = _reference(table, rows, cols, gains, 4)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(out[[0, 3]], expected[[0, 3]])
    assert np.isnan(out[1, 1]) and np.isnan(out[2]).all()  # 0 * inf, and a NaN gain
    np.testing.assert_array_equal(np.isnan(out), np.isnan(composed))


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_out_of_range_ids_are_rejected_with_the_composition_messages(id_dtype):
    table = np.ones((4, 2), np.float32)

    def bag(rows, cols):
        rows, cols = np.array(rows, id_dtype), np.array(cols, id_dtype)
        return ops.embedding_bag(
            table, rows, cols, np.ones(rows.size, np.float32), 2, name="user", implementation="native"
        )

    col_message = (
        r"embedding_bag\[user\]: check col_ids_in_range failed: col_ids must be table rows in \[0, vocab=4\); "
        "first offending position: 2"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=col_message):
        bag([0, 1, 1], [0, 3, 4])
    with pytest.raises(tf.errors.InvalidArgumentError, match=col_message.replace("2$", "2")):
        bag([0, 1, 5], [0, 3, -1])  # the column check is reported first, as in the composition
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"check row_ids_in_range failed: row_ids must be in \[0, sample_count=2\] \(sample_count itself "
        r"marks padding\); first offending position: 1",
    ):
        bag([0, -1, 3], [0, 3, 1])


def test_out_of_range_ids_are_rejected_inside_tf_function():
    table = np.ones((4, 2), np.float32)

    @tf.function
    def bag(cols):
        return ops.embedding_bag(table, tf.constant([0, 1]), cols, tf.constant([1.0, 1.0]), 2, implementation="native")

    bag(tf.constant([0, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="col_ids_in_range.*first offending position: 1"):
        bag(tf.constant([0, 4]))


def _gradients(table, rows, cols, gains, sample_count, implementation, upstream):
    table_var, gains_var = tf.Variable(table), tf.Variable(gains)
    with tf.GradientTape() as tape:
        out = ops.embedding_bag(table_var, rows, cols, gains_var, sample_count, implementation=implementation)
        loss = tf.reduce_sum(out * upstream)
    return tape.gradient(loss, [table_var, gains_var])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shuffle", [False, True])
def test_gradients_match_the_compositions(dtype, shuffle):
    table, rows, cols, gains = _batch(5, dtype=dtype, shuffle=shuffle)
    upstream = np.random.default_rng(6).normal(size=(9, 5)).astype(dtype)
    d_table, d_gains = _gradients(table, rows, cols, gains, 9, "native", upstream)
    assert isinstance(d_table, tf.IndexedSlices)
    # One row per distinct id of the non-padding entries; this batch's ids lie in one range of the table
    # gradient's partition (fewer than 512 entries, ids within 4096), so they come in first appearance order.
    real = rows < 9
    _, first = np.unique(cols[real], return_index=True)
    np.testing.assert_array_equal(d_table.indices.numpy(), cols[real][np.sort(first)])
    # Numpy: d_table[id] = sum of gains[k] * upstream[rows[k]], d_gains[k] = <upstream[rows[k]], table[cols[k]]>.
    expected_table = np.zeros(table.shape)
    np.add.at(expected_table, cols[real], gains[real, None].astype(np.float64) * upstream[rows[real]])
    expected_gains = np.where(
        real, np.einsum("kd,kd->k", np.vstack([upstream, np.zeros((1, 5))])[rows], table[cols].astype(np.float64)), 0.0
    )
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(tf.convert_to_tensor(d_table).numpy(), expected_table, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(d_gains.numpy(), expected_gains, rtol=tolerance, atol=tolerance)
    for implementation in ("segment", "csr"):
        ref_table, ref_gains = _gradients(table, rows, cols, gains, 9, implementation, upstream)
        np.testing.assert_allclose(
            tf.convert_to_tensor(d_table).numpy(),
            tf.convert_to_tensor(ref_table).numpy(),
            rtol=tolerance,
            atol=tolerance,
        )
        # The composition's gains gradient is an IndexedSlices when it reorders the entries.
        np.testing.assert_allclose(
            d_gains.numpy(), tf.convert_to_tensor(ref_gains).numpy(), rtol=tolerance, atol=tolerance
        )


def _documented_id_order(cols: np.ndarray) -> np.ndarray:
    """The table gradient's ids as docs/native_kernels.md states their order, written from that text."""
    _, first = np.unique(cols, return_index=True)
    appearance = cols[np.sort(first)]
    real = cols.size
    ranges = 1
    while ranges < 2**16 and ranges * 2 <= real // 256:
        ranges *= 2
    span = int(cols.max()) - int(cols.min())

    def bits_for(count):
        return next(bits for bits in range(64) if span >> bits < count)

    shift = min(bits_for(ranges), max(12, bits_for(2**16)))
    keys = (appearance.astype(np.int64) - int(cols.min())) >> shift
    return appearance[np.argsort(keys, kind="stable")]


@pytest.mark.parametrize("spread", [3_000, 200_000, 2**40])
def test_table_gradient_ids_come_by_id_range_then_first_appearance(spread):
    # 200k: many dense ranges of 4096 ids; 2**40: ids too spread for 2**16 dense ranges, hashed per range.
    rng = np.random.default_rng(13)
    samples, entries, dim = 500, 6000, 8
    rows = np.concatenate([np.sort(rng.integers(0, samples, entries)), np.full(30, samples)])
    cols = rng.integers(0, spread, rows.size).astype(np.int64)
    cols[rng.integers(0, rows.size, 2000)] = cols[:50][rng.integers(0, 50, 2000)]  # repeated ids
    gains = rng.normal(size=rows.size).astype(np.float32)
    d_out = rng.normal(size=(samples, dim)).astype(np.float32)
    ids, values = _native.library().sparseflow_embedding_bag_table_grad(
        d_out=d_out, row_ids=rows, col_ids=cols, gains=gains
    )
    real = rows < samples
    np.testing.assert_array_equal(ids.numpy(), _documented_id_order(cols[real]))
    expected = {}
    for row, col, gain in zip(rows[real], cols[real], gains[real].astype(np.float64)):
        expected[col] = expected.get(col, 0.0) + gain * d_out[row].astype(np.float64)
    np.testing.assert_allclose(values.numpy(), np.array([expected[i] for i in ids.numpy()]), rtol=1e-5, atol=1e-5)


def test_table_gradient_of_a_large_batch_matches_the_composition_after_densifying():
    table, rows, cols, gains = _batch(14, sample_count=300, vocab=20_000, dim=6, entries=4000, padding=10)
    upstream = np.random.default_rng(15).normal(size=(300, 6)).astype(np.float32)
    d_table, d_gains = _gradients(table, rows, cols, gains, 300, "native", upstream)
    ref_table, ref_gains = _gradients(table, rows, cols, gains, 300, "segment", upstream)
    assert isinstance(d_table, tf.IndexedSlices) and np.unique(d_table.indices.numpy()).size == d_table.indices.shape[0]
    np.testing.assert_allclose(
        tf.convert_to_tensor(d_table).numpy(), tf.convert_to_tensor(ref_table).numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(d_gains.numpy(), tf.convert_to_tensor(ref_gains).numpy(), rtol=1e-5, atol=1e-5)


def test_gradients_match_numeric_gradients():
    table, rows, cols, gains = _batch(7, sample_count=4, vocab=5, dim=3, entries=12, padding=2, dtype=np.float64)
    theoretical, numeric = tf.test.compute_gradient(
        lambda t, g: ops.embedding_bag(t, rows, cols, g, 4, implementation="native"),
        [tf.constant(table), tf.constant(gains)],
    )
    for analytic, estimate in zip(theoretical, numeric):
        np.testing.assert_allclose(analytic, estimate, rtol=1e-6, atol=1e-6)


def test_gradients_inside_tf_function_with_int64_ids():
    table, rows, cols, gains = _batch(8)
    table_var, gains_var = tf.Variable(table), tf.Variable(gains)

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(
                ops.embedding_bag(table_var, rows.astype(np.int64), cols.astype(np.int64), gains_var, 9) ** 2
            )
        return tape.gradient(loss, [table_var, gains_var])

    d_table, d_gains = grads()
    ref_table, ref_gains = _gradients(
        table, rows, cols, gains, 9, "csr", 2 * ops.embedding_bag(table, rows, cols, gains, 9, implementation="csr")
    )
    np.testing.assert_allclose(
        tf.convert_to_tensor(d_table).numpy(), tf.convert_to_tensor(ref_table).numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(d_gains.numpy(), tf.convert_to_tensor(ref_gains).numpy(), rtol=1e-5, atol=1e-5)


def test_xla_compiled_functions_run_the_composition():
    table, rows, cols, gains = _batch(9)

    @tf.function(jit_compile=True)
    def bag():
        return ops.embedding_bag(table, rows, cols, gains, 9, implementation="native")

    assert not any(op.type == "SparseflowEmbeddingBag" for op in bag.get_concrete_function().graph.get_operations())
    np.testing.assert_allclose(bag().numpy(), _reference(table, rows, cols, gains, 9), rtol=1e-5, atol=1e-5)


_THREADED = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
    import ops
    for case in sys.argv[2:]:
        ids, dtype, dim = case.split(":")
        dim = int(dim)
        rng = np.random.default_rng(0)
        lengths = rng.integers(0, 20, 3000)
        if ids == "skewed":
            lengths[[7, 1500, 2999]] = [4000, 2500, 3000]  # a few long bags among short ones
        rows = np.repeat(np.arange(3000), lengths)
        rows = np.concatenate([rows, np.full(50, 3000)])
        order = rng.permutation(rows.size)
        rows = rows[order]
        if ids == "skewed":
            cols = (rng.zipf(1.3, rows.size) - 1) % 500  # a few ids hold most entries
        else:
            cols = rng.integers(0, 500, rows.size)
        dtype = tf.as_dtype(dtype)
        table = tf.Variable(tf.cast(rng.normal(size=(500, dim)), dtype))
        gains = tf.Variable(tf.cast(rng.normal(size=rows.size), dtype))
        upstream = tf.cast(rng.normal(size=(3000, dim)), dtype)
        with tf.GradientTape() as tape:
            out = ops.embedding_bag(table, rows, cols, gains, 3000, implementation="native")
            loss = tf.reduce_sum(out * upstream)
        d_table, d_gains = tape.gradient(loss, [table, gains])
        digest = hashlib.sha256()
        for array in (out, d_table.indices, d_table.values, d_gains):
            digest.update(np.ascontiguousarray(tf.bitcast(array, tf.uint8).numpy()).tobytes())
        print(case, digest.hexdigest())
    """
)
# Row width 33 takes the forward's run-time-width loop, 64 the one compiled for that width.
_THREADED_CASES = ["uniform:float32:33", "skewed:float32:33", "skewed:float16:33", "skewed:bfloat16:33",
                   "uniform:float32:64", "skewed:float32:64", "skewed:float16:64", "skewed:bfloat16:64"]


@pytest.fixture(scope="module")
def digests_by_thread_count():
    """case -> its digest at 1, 3, 4 and again 4 intra-op threads (one process per count runs every case)."""
    digests: dict[str, list[str]] = {case: [] for case in _THREADED_CASES}
    for threads in (1, 3, 4, 4):
        done = subprocess.run([sys.executable, "-c", _THREADED, str(threads), *_THREADED_CASES],
                              capture_output=True, text=True, check=True, timeout=600)
        lines = [words for words in map(str.split, done.stdout.splitlines()) if words and words[0] in digests]
        assert [case for case, _ in lines] == _THREADED_CASES, done.stdout
        for case, digest in lines:
            digests[case].append(digest)
    return digests


@pytest.mark.parametrize("case", _THREADED_CASES)
def test_results_are_bitwise_the_same_for_any_thread_count(case, digests_by_thread_count):
    # Each output row (table-gradient row, gain) is summed by one thread, in entry order, however the
    # bags are split over the threads (by entry counts, so long bags get threads of their own).
    digests = digests_by_thread_count[case]
    assert len(digests) == 4 and len(set(digests)) == 1, digests


def _skewed_batch(seed, sample_count=400, vocab=300, dim=16):
    """Mostly short bags, a few thousand-id ones, Zipf ids, padding, entries shuffled."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 4, sample_count)
    lengths[[3, 200, sample_count - 1]] = [1500, 900, 1200]
    rows = np.concatenate([np.repeat(np.arange(sample_count), lengths), np.full(20, sample_count)])
    cols = (rng.zipf(1.3, rows.size) - 1) % vocab
    gains = rng.uniform(-2.0, 2.0, rows.size).astype(np.float32)
    order = rng.permutation(rows.size)
    table = rng.normal(size=(vocab, dim)).astype(np.float32)
    return table, rows[order], cols[order], gains[order]


def test_skewed_bags_match_the_composition():
    # More entries than one chunk of the balanced split holds, in bags far longer than the rest.
    table, rows, cols, gains = _skewed_batch(11)
    out = ops.embedding_bag(table, rows, cols, gains, 400, implementation="native")
    np.testing.assert_allclose(out.numpy(), _reference(table, rows, cols, gains, 400), rtol=1e-4, atol=1e-4)
    upstream = np.random.default_rng(12).normal(size=(400, 16)).astype(np.float32)
    d_table, d_gains = _gradients(table, rows, cols, gains, 400, "native", upstream)
    ref_table, ref_gains = _gradients(table, rows, cols, gains, 400, "segment", upstream)
    np.testing.assert_allclose(
        tf.convert_to_tensor(d_table).numpy(), tf.convert_to_tensor(ref_table).numpy(), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(d_gains.numpy(), tf.convert_to_tensor(ref_gains).numpy(), rtol=1e-4, atol=1e-4)


def test_without_a_compiler_the_composition_runs_after_one_warning_line(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        import ops
        table = np.arange(8, dtype=np.float32).reshape(4, 2)
        for implementation in ("auto", "native", "auto"):
            out = ops.embedding_bag(table, [0, 0, 2], [1, 3, 1], [1.0, 0.5, 3.0], 2, implementation=implementation)
            print(out.numpy().tolist())
        """
    )
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), SPARSEFLOW_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["[[5.0, 6.5], [0.0, 0.0]]"] * 3
    warnings = [line for line in result.stderr.splitlines() if "native kernels unavailable" in line]
    assert len(warnings) == 1 and "no-such-compiler" in warnings[0], result.stderr
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))


def test_build_script_without_a_compiler_warns_and_succeeds(tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), SPARSEFLOW_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "ops._native_build"], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0
    assert [line for line in result.stderr.splitlines() if "native kernels not built" in line]
    assert [line for line in result.stderr.splitlines() if "native I/O helpers not built" in line]


def test_the_build_step_before_the_demo_says_a_line_per_library_and_no_tensorflow_lines():
    # `make demo` and `make test` run it first, as a file (`import ops` would load TensorFlow before it can
    # quiet it): a new user sees its output before anything else.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "ops", "_native_build.py")], capture_output=True, text=True, env=env,
        timeout=300,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    kernels, helpers = result.stdout.splitlines()
    assert kernels.startswith("native CPU kernels: ") and kernels.endswith(_native_build.LIBRARY_NAME)
    assert helpers.startswith("native I/O helpers: ") and helpers.endswith(io_build.LIBRARY_NAME)


def test_the_cache_is_keyed_by_tensorflow_version_and_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEFLOW_CACHE_DIR", str(tmp_path / "cache"))
    path = _native_build.library_path()
    assert path.parent.parent == tmp_path / "cache"
    assert path.parent.name.startswith(f"tf{tf.__version__}-")
    edited = tmp_path / "native"
    edited.mkdir()
    for source in _native_build.SOURCES.iterdir():
        (edited / source.name).write_bytes(source.read_bytes())
    monkeypatch.setattr(_native_build, "SOURCES", edited)
    assert _native_build.library_path() == path
    with open(edited / "embedding_bag_ops.cc", "a") as source:
        source.write("\n// edited\n")
    assert _native_build.library_path() != path


@pytest.mark.parametrize("target", ["demo", "test"])
def test_both_readme_commands_build_the_native_kernels_first(target):
    plan = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    steps = plan.stdout.splitlines()
    build = next(i for i, line in enumerate(steps) if "ops/_native_build.py" in line)
    main = next(i for i, line in enumerate(steps) if "-m pytest" in line or "-m pipelines.demo" in line)
    assert build < main, steps


def test_a_variable_table_is_read_in_place_with_the_same_result():
    table, rows, cols, gains = _batch(10)
    variable = tf.Variable(table)
    # A sparse update puts the variable in copy-on-read mode, where a dense read copies the table.
    variable.scatter_add(tf.IndexedSlices(tf.ones([1, 5]), tf.constant([3])))
    table[3] += 1.0
    out = ops.embedding_bag(variable, rows, cols, gains, 9, implementation="native")
    np.testing.assert_allclose(out.numpy(), _reference(table, rows, cols, gains, 9), rtol=1e-5, atol=1e-5)
    graph = tf.function(lambda: ops.embedding_bag(variable, rows, cols, gains, 9)).get_concrete_function().graph
    assert "SparseflowEmbeddingBagVariable" in {op.type for op in graph.get_operations()}
    assert "ReadVariableOp" not in {op.type for op in graph.get_operations()}
