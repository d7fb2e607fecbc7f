"""ops.convert_to_coo against a plain reference of the ConvertToCooTensor contract."""

import doctest
import importlib

import numpy as np
import pytest
import tensorflow as tf
from coo_reference import assert_coo_equal, batches, graph_nodes, host_memory_data, ops_without_gpu_kernel
from hypothesis import given
from hypothesis import strategies as st

import ops

COMBINERS = ("sum", "mean", "sqrtn")


def _index_for(batch, kind: str, index_dtype):
    if kind == "dense":
        return np.zeros(0, dtype=index_dtype)
    if kind == "sparse":
        return batch.sparse_indices(index_dtype)
    return batch.row_splits(index_dtype)


def _weights_for(batch, form: str):
    """The batch's weights in one of the forms convert_to_coo accepts."""
    if batch.shared is None:
        return tf.constant(batch.weights)
    return {
        "float": batch.shared,
        "scalar": tf.constant(batch.shared, tf.float32),
        "one": tf.constant([batch.shared], tf.float32),
    }[form]


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(["dense", "sparse", "ragged"]))
    return (
        kind,
        draw(batches(dense=kind == "dense")),
        draw(st.sampled_from(COMBINERS)),
        draw(st.sampled_from([np.int32, np.int64])),
        draw(st.sampled_from(["float", "scalar", "one"])),
    )


@given(cases())
def test_eager_result_matches_reference_for_every_kind_combiner_and_weight_form(case):
    kind, batch, combiner, index_dtype, form = case
    got = ops.convert_to_coo(
        _index_for(batch, kind, index_dtype),
        tf.constant(batch.ids),
        _weights_for(batch, form),
        sample_count=batch.sample_count,
        combiner=combiner,
    )
    assert_coo_equal(got, batch.reference(combiner), batch.ids.dtype)


@given(
    batches(max_rows=40, max_length=1),
    st.sampled_from(COMBINERS),
    st.sampled_from([np.int32, np.int64]),
    st.sampled_from(["float", "scalar", "one"]),
)
def test_rows_of_at_most_one_id_match_reference_on_the_one_per_row_path(batch, combiner, index_dtype, form):
    # Ragged one-hot rows (some empty) skip run detection; the result must not change.
    got = ops.convert_to_coo(
        batch.row_splits(index_dtype),
        tf.constant(batch.ids),
        _weights_for(batch, form),
        sample_count=batch.sample_count,
        combiner=combiner,
    )
    assert_coo_equal(got, batch.reference(combiner), batch.ids.dtype)


def test_one_row_of_two_equal_ids_among_one_hot_rows_still_merges():
    splits = tf.constant([0, 1, 1, 3, 4], tf.int64)
    ids = tf.constant([5, 9, 9, 5], tf.int64)
    rows, cols, gains, _ = ops.convert_to_coo(splits, ids, 2.0, sample_count=4, combiner="mean")
    assert rows.numpy().tolist() == [0, 2, 3]
    assert cols.numpy().tolist() == [5, 9, 5]
    assert gains.numpy().tolist() == [1.0, 1.0, 1.0]
    rows, cols, gains, _ = ops.convert_to_coo(splits, ids, [1.0, 1.0, 3.0, 0.0], sample_count=4, combiner="sum")
    assert rows.numpy().tolist() == [0, 2, 3]
    assert gains.numpy().tolist() == [1.0, 4.0, 0.0]


_GRAPH_FUNCTIONS = {}


def _graph_function(rank: int, combiner: str):
    """One tf.function per (index rank, combiner) with every length and the sample count unknown."""
    key = (rank, combiner)
    if key not in _GRAPH_FUNCTIONS:

        @tf.function(
            input_signature=[
                tf.TensorSpec([None] * rank, tf.int64),
                tf.TensorSpec([None], tf.int64),
                tf.TensorSpec([None], tf.float32),
                tf.TensorSpec([], tf.int32),
            ]
        )
        def convert(index, values, weights, sample_count):
            return ops.convert_to_coo(index, values, weights, sample_count=sample_count, combiner=combiner)

        _GRAPH_FUNCTIONS[key] = convert
    return _GRAPH_FUNCTIONS[key]


@given(cases())
def test_graph_with_unknown_shapes_chooses_kind_and_weight_path_at_run_time(case):
    kind, batch, combiner, _, _ = case
    index = _index_for(batch, kind, np.int64)
    weights = np.array([batch.shared], np.float32) if batch.shared is not None else batch.weights
    convert = _graph_function(index.ndim, combiner)
    got = convert(index, batch.ids.astype(np.int64), weights, np.int32(batch.sample_count))
    assert_coo_equal(got, batch.reference(combiner), np.int64)


def test_dataset_map_converts_each_ragged_batch():
    ids = tf.ragged.constant([[4, 4, 1], [], [2, 2], [7], [3, 3, 3], []], dtype=tf.int64)
    ds = tf.data.Dataset.from_tensor_slices(ids).batch(4)  # a short last batch: dynamic shapes
    ds = ds.map(
        lambda x: ops.convert_to_coo(
            x.row_splits, x.flat_values, 2.0, sample_count=tf.cast(x.nrows(), tf.int32), combiner="mean"
        )
    )
    got = [tuple(t.numpy().tolist() for t in coo) for coo in ds]
    assert got == [
        ([0, 0, 2, 3], [4, 1, 2, 7], [pytest.approx(2 / 3), pytest.approx(1 / 3), 1.0, 1.0], 4),
        ([0], [3], [1.0], 2),
    ]


def test_only_adjacent_duplicates_merge_and_runs_do_not_cross_rows():
    rows, cols, gains, _ = ops.convert_to_coo(
        tf.constant([0, 4, 6], tf.int64),
        tf.constant([5, 5, 6, 5, 5, 8]),
        tf.ones([6]),
        sample_count=2,
    )
    # Row 0 is [5, 5, 6, 5] and row 1 is [5, 8]: the second 5-run of row 0 stays apart from
    # the first, and the 5 that opens row 1 does not join the 5 that closes row 0.
    assert rows.numpy().tolist() == [0, 0, 0, 1, 1]
    assert cols.numpy().tolist() == [5, 6, 5, 5, 8]
    assert gains.numpy().tolist() == [2.0, 1.0, 1.0, 1.0, 1.0]


# --- the fast paths, pinned by graph structure and by allocator counts ---------------------


def _graph_ops(fn, *specs):
    return graph_nodes(fn.get_concrete_function(*specs))


def _ragged_fn(combiner, weights_len):
    def convert(splits, values, weights):
        return ops.convert_to_coo(splits, values, weights, sample_count=64, combiner=combiner)

    specs = (
        tf.TensorSpec([65], tf.int64),
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([weights_len], tf.float32),
    )
    return tf.function(convert), specs


def test_sum_combiner_builds_no_scale_and_mean_does():
    def scale_ops(combiner):
        fn, specs = _ragged_fn(combiner, None)
        return [n.op for n in _graph_ops(fn, *specs) if n.op in ("DivNoNan", "Sqrt")]

    assert scale_ops("sum") == []
    assert "DivNoNan" in scale_ops("mean")
    assert {"DivNoNan", "Sqrt"} <= set(scale_ops("sqrtn"))


def _allocated_bytes(combiner, weights, values):
    """Bytes the TF allocator hands out in one run (RunMetadata step stats), inputs excluded."""
    splits = np.arange(0, 4 * 2049, 4, dtype=np.int64)  # 2048 rows of 4 ids
    graph = tf.Graph()
    with graph.as_default():
        feeds = [tf.compat.v1.placeholder(tf.int64, [None]) for _ in range(2)]
        w = tf.compat.v1.placeholder(tf.float32, [weights.size])
        outputs = ops.convert_to_coo(*feeds, w, sample_count=2048, combiner=combiner, validate=False)
    with tf.compat.v1.Session(graph=graph) as session:
        metadata = tf.compat.v1.RunMetadata()
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        session.run(outputs[:3], {feeds[0]: splits, feeds[1]: values, w: weights}, options, metadata)
    return sum(m.total_bytes for d in metadata.step_stats.dev_stats for s in d.node_stats for m in s.memory)


DISTINCT_IDS = np.arange(8192, dtype=np.int64)
ID_PAIRS = np.repeat(np.arange(4096, dtype=np.int64), 2)  # every id twice in a row: runs to merge


@pytest.mark.parametrize("values", [DISTINCT_IDS, ID_PAIRS], ids=["distinct", "pairs"])
@pytest.mark.parametrize("combiner", ["mean", "sqrtn"])
def test_single_weight_needs_fewer_bytes_than_per_id_weights(combiner, values):
    # The per-id path also needs its N-float weight array, which the single-weight path never has.
    weights = np.ones(values.size, np.float32)
    per_id = _allocated_bytes(combiner, weights, values) + weights.nbytes
    single = _allocated_bytes(combiner, weights[:1], values) + 4
    assert single < per_id


@pytest.mark.parametrize("values", [DISTINCT_IDS, ID_PAIRS], ids=["distinct", "pairs"])
@pytest.mark.parametrize("weights_len", [1, 8192])
def test_sum_combiner_allocates_less_than_mean_and_sqrtn(weights_len, values):
    weights = np.ones(min(weights_len, values.size), np.float32)
    summed = _allocated_bytes("sum", weights, values)
    assert summed < _allocated_bytes("mean", weights, values)
    assert summed < _allocated_bytes("sqrtn", weights, values)


def test_every_path_runs_on_gpu_kernels_with_its_data_in_device_memory():
    # Kernel registrations of this TensorFlow build stand in for a GPU: each op needs a GPU
    # kernel, and none may keep N-sized data in host memory (int32 is TensorFlow's host type).
    missing, pinned = set(), set()
    cases = [(1, tf.int32, "mean", None), (1, tf.int64, "sqrtn", None), (2, tf.int32, "mean", None)]
    cases += [(2, tf.int64, "sum", None), (1, tf.int64, "mean", 1), (1, tf.int32, "sqrtn", 1)]
    for rank, id_dtype, combiner, weights_len in cases:

        @tf.function
        def convert(index, values, weights, sample_count, combiner=combiner):
            return ops.convert_to_coo(index, values, weights, sample_count=sample_count, combiner=combiner)

        traced = convert.get_concrete_function(
            tf.TensorSpec([None] * rank, id_dtype),
            tf.TensorSpec([None], id_dtype),
            tf.TensorSpec([weights_len], tf.float32),
            tf.TensorSpec([], tf.int32),
        )
        missing |= ops_without_gpu_kernel(graph_nodes(traced))
        pinned |= host_memory_data(traced)
    assert not missing, missing
    assert not pinned, pinned


# --- agreement with the stock embedding lookup ------------------------------------------------


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("weighted", [False, True])
def test_embedding_from_coo_matches_embedding_lookup_sparse(combiner, weighted):
    rng = np.random.default_rng(7)
    lengths = [3, 0, 5, 1, 4, 2]  # the last row is not empty: the stock op drops trailing empty rows
    n = sum(lengths)
    ids = rng.integers(0, 6, n).astype(np.int64)
    ids[1] = ids[0]  # an adjacent duplicate to merge
    weights = rng.uniform(0.1, 2.0, n).astype(np.float32)
    table = rng.normal(size=(6, 3)).astype(np.float32)
    splits = np.concatenate([[0], np.cumsum(lengths)])
    ragged = tf.RaggedTensor.from_row_splits(ids, splits)

    rows, cols, gains, _ = ops.convert_to_coo(
        splits, ids, weights if weighted else 1.0, sample_count=len(lengths), combiner=combiner
    )
    bag = np.zeros((len(lengths), 6))
    np.add.at(bag, (rows.numpy(), cols.numpy()), gains.numpy())
    ours = bag @ table

    sp_weights = ragged.with_flat_values(weights).to_sparse() if weighted else None
    stock = tf.nn.embedding_lookup_sparse(table, ragged.to_sparse(), sp_weights, combiner=combiner)
    np.testing.assert_allclose(ours, stock.numpy(), rtol=1e-5, atol=1e-6)


# --- errors -------------------------------------------------------------------------------------

I64 = tf.int64


def _eager(index, values, weights, sample_count=3, combiner="sum"):
    return lambda: ops.convert_to_coo(
        tf.constant(index, I64),
        tf.constant(values, I64),
        weights,
        sample_count=sample_count,
        combiner=combiner,
    )


STATIC_ERRORS = {
    "unknown combiner": (_eager([0, 1, 2, 3], [1, 2, 3], 1.0, combiner="max"), "unknown combiner"),
    "weights length": (_eager([0, 1, 2, 3], [1, 2, 3], [1.0, 2.0]), "weights has 2 elements"),
    "row_splits length": (_eager([0, 1, 3], [1, 2, 3], 1.0), "row_splits has 3 entries"),
    "dense length": (_eager([], [1, 2], 1.0), "exactly one id per sample"),
    "indices length": (_eager([[0, 0], [1, 0]], [1, 2, 3], 1.0), "2 sparse indices but 3 values"),
    "indices width": (_eager([[0, 0, 0]], [1], 1.0), r"must be \[N, 2\]"),
    "float ids": (lambda: ops.convert_to_coo([0, 1], [1.5], 1.0, sample_count=1), "int32 or int64 ids"),
    "2-D ids": (lambda: ops.convert_to_coo([0, 1], [[1]], 1.0, sample_count=1), "must be 1-D"),
    "float64 weights": (
        lambda: ops.convert_to_coo([0, 1], [1], tf.constant([1.0], tf.float64), sample_count=1),
        "weights must be float32",
    ),
    "2-D weights": (lambda: ops.convert_to_coo([0, 1], [1], [[1.0]], sample_count=1), "scalar or 1-D"),
    "negative sample_count": (_eager([], [], 1.0, sample_count=-1), "sample_count must be >= 0"),
    "float index": (
        lambda: ops.convert_to_coo(tf.constant([0.0, 1.0]), [1], 1.0, sample_count=1),
        "indices_or_row_splits must be int32 or int64",
    ),
    "3-D index": (lambda: ops.convert_to_coo(tf.zeros([1, 1, 1], I64), [1], 1.0, sample_count=1), "1-D"),
}


@pytest.mark.parametrize("name", sorted(STATIC_ERRORS))
def test_static_problems_raise_value_error_naming_the_check(name):
    call, fragment = STATIC_ERRORS[name]
    with pytest.raises(ValueError, match=fragment):
        call()


DATA_ERRORS = {
    "row_splits start": ([1, 2, 3, 3], [1, 2, 3], "row_splits_start"),
    "row_splits sorted": ([0, 2, 1, 3], [1, 2, 3], "row_splits_sorted.*first offending row: 1"),
    "row_splits end": ([0, 1, 2, 2], [1, 2, 3], "row_splits_end"),
    "rows sorted": ([[0, 0], [2, 0], [1, 0]], [1, 2, 3], "rows_sorted.*first offending position: 2"),
    "rows in range": ([[0, 0], [1, 0], [3, 0]], [1, 2, 3], "rows_in_range.*first offending position: 2"),
    "negative row": ([[-1, 0], [1, 0]], [1, 2], "rows_in_range.*first offending position: 0"),
}


@pytest.mark.parametrize("name", sorted(DATA_ERRORS))
def test_bad_data_raises_invalid_argument_eagerly(name):
    index, values, fragment = DATA_ERRORS[name]
    with pytest.raises(tf.errors.InvalidArgumentError, match=fragment):
        _eager(index, values, 1.0, combiner="mean")()


@pytest.mark.parametrize("name", sorted(DATA_ERRORS))
def test_bad_data_raises_invalid_argument_in_a_graph(name):
    index, values, fragment = DATA_ERRORS[name]
    convert = _graph_function(np.ndim(index), "mean")
    with pytest.raises(tf.errors.InvalidArgumentError, match=fragment.replace(": ", r":\] \[")):
        convert(np.array(index, np.int64), np.array(values, np.int64), np.ones(1, np.float32), np.int32(3))


@pytest.mark.parametrize(
    ("index", "values", "weights", "sample_count", "fragment"),
    [
        ([0, 1, 2, 3], [1, 2, 3], [1.0, 2.0], 3, "weights_length"),
        ([0, 1, 3], [1, 2, 3], [1.0], 3, "row_splits_length"),
        ([], [1, 2], [1.0], 3, "dense_length"),
    ],
)
def test_mismatches_seen_only_at_run_time_raise_invalid_argument(
    index, values, weights, sample_count, fragment
):
    convert = _graph_function(1, "sum")
    with pytest.raises(tf.errors.InvalidArgumentError, match=fragment):
        convert(
            np.array(index, np.int64),
            np.array(values, np.int64),
            np.array(weights, np.float32),
            np.int32(sample_count),
        )


def test_errors_name_the_feature():
    with pytest.raises(tf.errors.InvalidArgumentError, match="feature C7"):
        ops.convert_to_coo([0, 2, 1, 3], [1, 2, 3], 1.0, sample_count=3, name="C7")


def test_errors_inside_dataset_map_surface_on_iteration():
    ds = tf.data.Dataset.from_tensors(
        (tf.constant([[0, 0], [2, 0], [1, 0]], I64), tf.constant([1, 2, 3], I64))
    )
    ds = ds.map(lambda index, values: ops.convert_to_coo(index, values, 1.0, sample_count=3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="rows_sorted"):
        list(ds)


def test_docstring_examples_run():
    results = doctest.testmod(importlib.import_module("ops.convert_to_coo"))
    assert results.attempted > 0 and results.failed == 0
