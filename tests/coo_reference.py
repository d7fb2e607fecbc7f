"""A plain-Python reference of the convert_to_coo contract, hypothesis batches to feed it,
and a check that a traced graph uses only ops with GPU kernels.

The reference is `tests.oracles`, written from the contract text, one id at
a time, with float64 sums; it shares no code with `ops`.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow as tf
from hypothesis import strategies as st
from oracles import coo
from tensorflow.python.framework import kernels

# Dyadic weights (and zero) sum exactly in float32 and float64, so "the row sum is 0"
# means the same thing to the reference and to the code under test.
EXACT_WEIGHTS = (-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0)


def reference_coo(rows, ids, weights, sample_count: int, combiner: str):
    """rows: the (sorted) row of each id; weights: one float per id. Returns (rows, ids, gains) arrays.

    The COO rule itself is `oracles.coo`; this only regroups flat ids by row.
    """
    ids_of = [[] for _ in range(sample_count)]
    weights_of = [[] for _ in range(sample_count)]
    for r, i, w in zip(rows, ids, weights):
        ids_of[int(r)].append(int(i))
        weights_of[int(r)].append(float(w))
    out = coo(ids_of, weights_of, combiner)
    return (
        np.array(out.row_ids, dtype=np.int64),
        np.array(out.col_ids, dtype=np.int64),
        np.array(out.gains, dtype=np.float64),
    )


def assert_coo_equal(got, expected, id_dtype) -> None:
    """Ids exactly (and their dtypes), gains within float32 rounding."""
    rows, cols, gains = (t.numpy() if hasattr(t, "numpy") else np.asarray(t) for t in got[:3])
    want_rows, want_cols, want_gains = expected
    assert rows.dtype == np.int32
    assert cols.dtype == np.dtype(id_dtype)
    assert gains.dtype == np.float32
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(cols, want_cols)
    np.testing.assert_allclose(gains, want_gains, rtol=1e-5, atol=1e-6)


@dataclasses.dataclass
class Batch:
    """A random id batch described once, convertible to every input kind."""

    lengths: list[int]
    ids: np.ndarray
    weights: np.ndarray  # one float32 per id (a shared weight repeated, when `shared` is set)
    shared: float | None  # the single weight every id has, or None for per-id weights

    @property
    def sample_count(self) -> int:
        return len(self.lengths)

    @property
    def rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.sample_count), self.lengths)

    def row_splits(self, dtype=np.int64) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(dtype)

    def sparse_indices(self, dtype=np.int64) -> np.ndarray:
        rows = self.rows
        cols = np.arange(len(rows)) - np.repeat(self.row_splits()[:-1], self.lengths)
        return np.stack([rows, cols], axis=1).astype(dtype).reshape(-1, 2)

    def reference(self, combiner: str):
        return reference_coo(self.rows, self.ids, self.weights, self.sample_count, combiner)


@st.composite
def batches(draw, *, dense: bool = False, max_rows: int = 8, max_length: int = 6) -> Batch:
    """Small batches rich in the cases that matter: runs of equal ids, empty rows, zero-weight rows.

    `max_length` bounds the ids per row (1: one-hot rows, some of them empty).
    """
    sample_count = draw(st.integers(0, max_rows))
    if dense:
        lengths = [1] * sample_count
    else:
        lengths = draw(st.lists(st.integers(0, max_length), min_size=sample_count, max_size=sample_count))
    n = sum(lengths)
    id_dtype = draw(st.sampled_from([np.int32, np.int64]))
    # A 3-letter alphabet makes adjacent duplicates (within and across rows) common;
    # the offset puts ids near the top of the dtype's range.
    offset = (
        draw(st.sampled_from([0, 2**31 - 8])) if id_dtype == np.int32 else draw(st.sampled_from([0, 2**40]))
    )
    ids = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64) + offset
    ids = ids.astype(id_dtype)
    exact = draw(st.booleans())
    if draw(st.booleans()):
        w = draw(st.sampled_from(EXACT_WEIGHTS)) if exact else draw(st.floats(0.015625, 100.0, width=32))
        return Batch(lengths, ids, np.full(n, w, dtype=np.float32), float(w))
    if exact:
        weights = draw(st.lists(st.sampled_from(EXACT_WEIGHTS), min_size=n, max_size=n))
    else:
        weights = draw(st.lists(st.floats(0.015625, 100.0, width=32), min_size=n, max_size=n))
    weights = np.array(weights, dtype=np.float32)
    zero_rows = draw(st.sets(st.integers(0, max(sample_count - 1, 0)), max_size=2))
    splits = np.concatenate([[0], np.cumsum(lengths)])
    for r in zero_rows:
        if r < sample_count:
            weights[splits[r] : splits[r + 1]] = 0.0
    return Batch(lengths, ids, weights, None)


def graph_nodes(concrete_function) -> list:
    """Every NodeDef of a traced function, cond and loop bodies (its function library) included."""
    graph_def = concrete_function.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return nodes


@functools.cache
def _has_gpu_kernel(op: str, dtypes: tuple) -> bool:
    """Whether `op` has a GPU (or device-agnostic) kernel accepting the given (attr, dtype) pairs."""
    attrs = dict(dtypes)
    for kernel in kernels.get_registered_kernels_for_op(op).kernel:
        if kernel.device_type not in ("GPU", "DEFAULT"):
            continue
        if all(
            c.name not in attrs
            or not c.allowed_values.list.type
            or attrs[c.name] in c.allowed_values.list.type
            for c in kernel.constraint
        ):
            return True
    return False


def ops_without_gpu_kernel(nodes) -> set:
    """(op, dtype attrs) of the nodes no GPU kernel can run, per the kernels this TF build registers."""
    missing = set()
    for node in nodes:
        # Assert messages are host-side strings; the Assert op itself has a device-agnostic kernel.
        if node.op == "Const" and node.attr["dtype"].type == tf.string.as_datatype_enum:
            continue
        dtypes = tuple(sorted((k, v.type) for k, v in node.attr.items() if v.type))
        if node.op not in ("_Arg", "_Retval") and not _has_gpu_kernel(node.op, dtypes):
            missing.add((node.op, dtypes))
    return missing


def _graphs(concrete_function) -> list:
    """A traced function's graph and the graphs of its cond branches (with static shapes)."""
    graph = concrete_function.graph
    # The branch FuncGraphs are kept on the outer graph; there is no public accessor.
    return [graph] + [function.graph for function in graph._functions.values()]


def _device_kernel(op) -> object | None:
    """The GPU kernel TensorFlow would pick for `op` (a device-agnostic one if there is none)."""
    attrs = {name: value.type for name, value in op.node_def.attr.items() if value.type}
    candidates = {"GPU": None, "DEFAULT": None}
    for kernel in kernels.get_registered_kernels_for_op(op.type).kernel:
        if kernel.device_type in candidates and candidates[kernel.device_type] is None:
            if all(
                c.name not in attrs
                or not c.allowed_values.list.type
                or attrs[c.name] in c.allowed_values.list.type
                for c in kernel.constraint
            ):
                candidates[kernel.device_type] = kernel
    return candidates["GPU"] or candidates["DEFAULT"]


def _arg_tensors(op, args, tensors):
    """(arg name, tensor) pairs for an op's inputs or outputs, list-valued args expanded."""
    position = 0
    for arg in args:
        if arg.number_attr:
            count = op.get_attr(arg.number_attr)
        elif arg.type_list_attr:
            count = len(op.get_attr(arg.type_list_attr))
        else:
            count = 1
        for tensor in tensors[position : position + count]:
            yield arg.name, tensor
        position += count


def _small(shape: tf.TensorShape) -> bool:
    return shape.is_fully_defined() and shape.num_elements() <= 16


def host_memory_data(concrete_function) -> set:
    """(op, arg, shape, name) of every tensor that a GPU would keep in host memory while running
    the traced function, unless it is small (a scalar or a fixed shape of at most 16 elements):
    arguments of GPU kernels registered with host memory, and int32 arguments of cond branches.
    """
    pinned = set()
    # The Identity ops that hand the traced function's results back are not ours to judge.
    returned = {t.op.name for t in concrete_function.graph.outputs}
    for graph in _graphs(concrete_function):
        for op in graph.get_operations():
            if graph is concrete_function.graph and op.name in returned:
                continue
            if op.type in ("If", "StatelessIf"):
                # Branch arguments are function arguments: int32 ones live in host memory.
                for tensor in op.inputs[1:]:
                    if tensor.dtype == tf.int32 and not _small(tensor.shape):
                        pinned.add((op.type, "input", str(tensor.shape), op.name))
                continue
            kernel = _device_kernel(op)
            if kernel is None or not kernel.host_memory_arg:
                continue
            host = set(kernel.host_memory_arg)
            pairs = list(_arg_tensors(op, op.op_def.input_arg, op.inputs))
            pairs += list(_arg_tensors(op, op.op_def.output_arg, op.outputs))
            for arg, tensor in pairs:
                if arg in host and not _small(tensor.shape):
                    pinned.add((op.type, arg, str(tensor.shape), op.name))
    return pinned
