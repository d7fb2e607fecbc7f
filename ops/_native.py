"""The native CPU kernels as TensorFlow ops: loaded (built on first use) once per process, gradients registered.

`library()` returns the loaded op library, or None when it cannot be built or
loaded here; the first failure logs one warning line and the callers then run
their stock-op compositions. Only CPU kernels exist, and XLA cannot compile
these ops: callers use them outside `jit_compile` functions only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import threading

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

__all__ = ["available", "ctypes_library", "embedding_bag", "library", "stock_ops_only", "unavailable_reason"]

_log = logging.getLogger("sparseflow.ops")
_failure: list[str] = []
_scope = threading.local()


@functools.cache
def library():
    """The loaded native op library, or None (see `unavailable_reason`)."""
    # Imported here: `python -m ops._native_build` must not find itself imported by `import ops`.
    from ops import _native_build

    try:
        path = _native_build.build()
        return tf.load_op_library(str(path))
    except (_native_build.BuildError, tf.errors.OpError, OSError) as error:
        _failure.append(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
        _log.warning("sparseflow: native kernels unavailable, using the stock-op compositions: %s", _failure[0])
        return None


@functools.cache
def ctypes_library() -> ctypes.CDLL | None:
    """The same library for its plain C functions (the columnar reader's kernels), or None where it does not load.

    Not affected by `stock_ops_only()`: those functions run in the reader, never in an exported graph.
    """
    from ops import _native_build

    return None if library() is None else ctypes.CDLL(str(_native_build.library_path()))


def available() -> bool:
    """Whether the native kernels can run in this process (builds them on first call).

    False inside `stock_ops_only()`.
    """
    if getattr(_scope, "stock_only", 0):
        return False
    return library() is not None


@contextlib.contextmanager
def stock_ops_only():
    """Within (this thread): every op traced picks its stock-op composition, never a native kernel.

    For graphs that leave this process: a SavedModel traced here loads in any
    TensorFlow (TensorFlow Serving, a process without sparseflow), which the
    native ops' library would otherwise have to be loaded into first.

    Example:
      >>> import tempfile
      >>> module = tf.Module()
      >>> module.f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([None], tf.float32)])
      >>> with stock_ops_only():
      ...     tf.saved_model.save(module, tempfile.mkdtemp())
    """
    _scope.stock_only = getattr(_scope, "stock_only", 0) + 1
    try:
        yield
    finally:
        _scope.stock_only -= 1


def unavailable_reason() -> str | None:
    """Why `library()` is None, or None when it loaded."""
    return None if library() is not None else _failure[0]


def embedding_bag(table, row_ids, col_ids, gains, sample_count, *, col_message, row_message, length_message):
    """`out[r] = sum_k gains[k] * table[col_ids[k]]` over entries of row r; row `sample_count` is padding.

    `table` [vocab, dim] float32/float64/float16/bfloat16 (16-bit rows summed in
    float32, each output element rounded once), `gains` [N] of the table dtype,
    `row_ids`/`col_ids` int32/int64 [N], `sample_count` int or int32 scalar.
    Out-of-range ids or rows raise InvalidArgumentError with `col_message` or
    `row_message` followed by `; first offending position: K` (the column check
    first); differing lengths raise with `length_message`. The table gradient
    is a `tf.IndexedSlices` over the distinct ids of the non-padding entries.
    A resource-variable table is read in place (see ops/native/embedding_bag_ops.cc).
    """
    bag = library().sparseflow_embedding_bag
    if _is_resource_variable(table):
        # As the variable's own reads do: a GradientTape then watches it when it is trainable.
        resource_variable_ops.variable_accessed(table)
        bag, table = library().sparseflow_embedding_bag_variable, table.handle
    return bag(
        table=table,
        row_ids=row_ids,
        col_ids=col_ids,
        gains=gains,
        sample_count=sample_count if isinstance(sample_count, int) else tf.cast(sample_count, tf.int32),
        col_message=col_message,
        row_message=row_message,
        length_message=length_message,
    )


def _is_resource_variable(table) -> bool:
    return isinstance(table, resource_variable_ops.BaseResourceVariable)


@tf.RegisterGradient("SparseflowEmbeddingBag")
@tf.RegisterGradient("SparseflowEmbeddingBagVariable")
def _embedding_bag_gradient(op, d_out):
    table, row_ids, col_ids, gains, _ = op.inputs
    variable = table.dtype == tf.resource
    # Eagerly the tape says which inputs need no gradient: the gains usually don't, and theirs
    # costs a second read of every looked-up table row.
    skip = getattr(op, "skip_input_indices", None) or ()
    d_table = d_gains = None
    if 0 not in skip:
        ids, values = library().sparseflow_embedding_bag_table_grad(
            d_out=d_out, row_ids=row_ids, col_ids=col_ids, gains=gains
        )
        shape = resource_variable_ops.variable_shape(table, ids.dtype) if variable else tf.shape(table, ids.dtype)
        d_table = tf.IndexedSlices(values, ids, shape)
    if 3 not in skip:
        gains_grad = library().sparseflow_embedding_bag_gains_grad
        if variable:
            gains_grad = library().sparseflow_embedding_bag_gains_grad_variable
        d_gains = gains_grad(d_out=d_out, table=table, row_ids=row_ids, col_ids=col_ids)
    return d_table, None, None, d_gains, None
