"""Argument and run-time checks shared by the COO ops (convert_to_coo, to_coo, pad_coo).

Static problems (a wrong dtype, a length mismatch visible from static shapes,
an unknown option) raise ValueError while the graph is being built. Problems
that only the data can show are checked with `require`, which raises
`tf.errors.InvalidArgumentError` eagerly, or builds a guarded assertion in a
graph whose offending position is only computed when the check fails.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

ID_DTYPES = (tf.int32, tf.int64)


def label(op: str, name: str | None) -> str:
    """`convert_to_coo`, or `convert_to_coo (feature C1)`: the prefix of every message."""
    # No quotes: graph-mode Assert messages escape them.
    return f"{op} (feature {name})" if name else op


def scope_name(name: str | None, default: str) -> str:
    """A name scope derived from a feature name (TF accepts only some characters)."""
    if not name:
        return default
    cleaned = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    return cleaned if cleaned[:1].isalnum() else f"{default}_{cleaned}"


def as_tensor(value, dtype_hint: tf.DType) -> tf.Tensor:
    """A tensor of `value`; numpy arrays keep their dtype (`dtype_hint` would recast them)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return tf.convert_to_tensor(value)
    return tf.convert_to_tensor(value, dtype_hint=dtype_hint)


def static_count(value, what: str, where: str) -> int | tf.Tensor:
    """A non-negative count given as a Python int or a scalar integer tensor.

    Returns a Python int whenever the value is known while tracing, else an
    int32 scalar tensor.
    """
    if isinstance(value, (tf.Tensor, tf.Variable)):
        if value.dtype not in ID_DTYPES:
            raise ValueError(f"{where}: {what} must be an integer, got a {value.dtype.name} tensor")
        if value.shape.rank not in (None, 0):
            raise ValueError(f"{where}: {what} must be a scalar, got shape {value.shape}")
        known = tf.get_static_value(value)
        if known is None:
            return tf.cast(tf.reshape(value, []), tf.int32)
        value = known
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{where}: {what} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{where}: {what} must be >= 0, got {value}")
    return int(value)


def require(
    ok: tf.Tensor,
    message: str,
    offending: Callable[[], tf.Tensor] | None = None,
    offending_what: str = "position",
) -> tf.Tensor | tf.Operation | None:
    """Checks the scalar boolean `ok` when the data is there.

    Eagerly (or when `ok` is a constant) this raises InvalidArgumentError at
    once and returns None. In a graph it returns an op or tensor that the
    caller's outputs must depend on (see `after`); a passing check then costs
    only the reduction that produced `ok`, because `offending()` is evaluated
    inside a cond's failing branch alone.
    """
    known = tf.get_static_value(ok)
    if known is not None and bool(known):
        return None
    if known is not None and tf.executing_eagerly():
        detail = ""
        if offending is not None:
            detail = f"; first offending {offending_what}: {int(offending())}"
        raise tf.errors.InvalidArgumentError(None, None, message + detail)

    if offending is None:
        # String-only data: the Assert op itself, with no cond around it.
        return tf.debugging.Assert(ok, [message])

    def fail() -> tf.Tensor:
        # int32 data keeps tf.debugging.Assert from wrapping itself in another cond.
        data = [message, f"first offending {offending_what}:", tf.cast(offending(), tf.int32)]
        with tf.control_dependencies([tf.debugging.Assert(ok, data)]):
            return tf.constant(False)

    return tf.cond(ok, lambda: tf.constant(True), fail)


class Checks:
    """Run-time checks that run one after another, so the first failing one is the one reported.

    Each predicate is built under a control dependency on the previous check,
    so later checks (and anything guarded with `guard`) never run on input an
    earlier check rejected.
    """

    def __init__(self) -> None:
        self._pending: list[tf.Tensor | tf.Operation] = []

    def add(
        self,
        ok: Callable[[], tf.Tensor],
        message: str,
        offending: Callable[[], tf.Tensor] | None = None,
        offending_what: str = "position",
    ) -> None:
        with tf.control_dependencies(self._pending[-1:]):
            check = require(ok(), message, offending, offending_what)
        if check is not None:
            self._pending.append(check)

    @property
    def pending(self) -> list[tf.Tensor | tf.Operation]:
        """The graph checks added so far (empty eagerly: those raise at once), for control dependencies."""
        return list(self._pending)

    def guard(self, *tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """`tensors`, made to depend on every check added so far."""
        return after(self._pending, *tensors)


def after(checks: list[tf.Tensor | tf.Operation | None], *tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """`tensors`, made to depend on every graph check in `checks` (no copy: Identity)."""
    pending = [c for c in checks if c is not None]
    if not pending:
        return tensors
    for t in tensors:
        # On a GPU, int32 Identity runs in host memory; and guarding a bitcast of it does not
        # work: grappler folds Bitcast(Identity(Bitcast(x))) to x and drops the dependency.
        # Callers guard an int64, uint32 or float tensor and derive their int32 from it.
        if t.dtype == tf.int32:
            raise TypeError("guard the int64 or uint32 tensor an int32 one is derived from")
    with tf.control_dependencies(pending):
        return tuple(tf.identity(t) for t in tensors)


def first_true(mask: tf.Tensor) -> tf.Tensor:
    """Index of the first True in a 1-D boolean mask (0 when there is none)."""
    # float32: ArgMax has no GPU kernel for integer input.
    return tf.argmax(tf.cast(mask, tf.float32), output_type=tf.int32)
