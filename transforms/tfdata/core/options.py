"""The options `make_dataset` and `make_log_dataset` share, as values checked once at the entry point.

`BatchOptions` says how rows become batches; `OutputOptions` what a batch's
sparse features become (COO with a combiner and capacities, ragged or
sparse). Both entry points build them from their keyword arguments, so an
option means the same and fails the same way in both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from ops.convert_to_coo import COMBINERS
from transforms.tfdata.core.capacity import CAPACITY_KINDS, check_overflow, resolve_capacities
from transforms.tfdata.core.columns import Column

__all__ = ["BatchOptions", "OutputOptions", "OUTPUTS", "check_counter"]

OUTPUTS = ("coo", "ragged", "sparse")


def _positive_int(value, what: str, *, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")


def check_counter(variable, what: str) -> None:
    """Refuses a counter that is not None or an int64 scalar `tf.Variable` (the batches `assign_add` to it).

    Raises:
      ValueError: naming `what`, for any other value.
    """
    if variable is not None and (
        not isinstance(variable, tf.Variable) or variable.dtype != tf.int64 or variable.shape.rank != 0
    ):
        raise ValueError(f"{what} must be an int64 scalar tf.Variable, got {variable!r}")


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """How rows become batches.

    Attributes:
      batch_size: rows per batch.
      num_epochs: passes over the data, None for endless.
      drop_remainder: drop each epoch's last partial batch (every shape is
        then static).
      deterministic: keep batches in order (False lets tf.data reorder).
      shuffle_buffer: records (TFRecord) or lines (logs) in the shuffle buffer.

    Raises:
      ValueError: batch_size, num_epochs or shuffle_buffer not a positive int.

    Example:
      >>> BatchOptions(512, drop_remainder=True).static_rows
      512
    """

    batch_size: int
    num_epochs: int | None = 1
    drop_remainder: bool = False
    deterministic: bool = True
    shuffle_buffer: int = 16384

    def __post_init__(self) -> None:
        _positive_int(self.batch_size, "batch_size")
        _positive_int(self.num_epochs, "num_epochs", allow_none=True)
        _positive_int(self.shuffle_buffer, "shuffle_buffer")

    @property
    def static_rows(self) -> int | None:
        """The batch's row count when every batch has it (drop_remainder), else None."""
        return self.batch_size if self.drop_remainder else None


@dataclasses.dataclass(frozen=True)
class OutputOptions:
    """What a batch's sparse features become.

    Attributes:
      output: "coo" (an `ops.Coo` per sparse feature), "ragged" or "sparse".
      combiner: "sum", "mean", "sqrtn", or a dict feature -> combiner
        (features not in it: "sum").
      capacities: pad COO to static lengths (output="coo" only): "stats",
        the path of a stats.json, a stats.json dict or a dict feature -> int
        (see `capacity.resolve_capacities`); None for no padding.
      overflow: "error" or "drop", when a batch needs more than a capacity.
      capacity_kind: which stats.json capacity, "max" or "p99_9".
      dropped: an int64 scalar `tf.Variable` counting dropped entries.

    Raises:
      ValueError: an unknown output, overflow or capacity_kind, capacities
        without output="coo", or a `dropped` that is not an int64 scalar
        variable.
    """

    output: str = "coo"
    combiner: str | Mapping[str, str] = "sum"
    capacities: Any = None
    overflow: str = "error"
    capacity_kind: str = "max"
    dropped: tf.Variable | None = None

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        if self.capacities is not None and self.output != "coo":
            raise ValueError("capacities pad COO batches: they need output='coo'")
        check_overflow(self.overflow)
        if self.capacity_kind not in CAPACITY_KINDS:
            raise ValueError(f"capacity kind must be one of {CAPACITY_KINDS}, got {self.capacity_kind!r}")
        check_counter(self.dropped, "dropped")

    def combiners(self, columns: Sequence[Column]) -> dict[str, str]:
        """Feature -> combiner for every sparse column.

        Raises:
          ValueError: unknown combiners, or a dict naming features that are
            not sparse features read.
        """
        sparse = [c.name for c in columns if c.is_sparse]
        if isinstance(self.combiner, str):
            chosen = dict.fromkeys(sparse, self.combiner)
        elif isinstance(self.combiner, Mapping):
            unknown = sorted(set(self.combiner) - set(sparse))
            if unknown:
                raise ValueError(f"combiner names feature(s) that are not sparse features read: {unknown}")
            chosen = {name: self.combiner.get(name, "sum") for name in sparse}
        else:
            raise ValueError(f"combiner must be a string or a dict feature -> string, got {self.combiner!r}")
        bad = sorted({c for c in chosen.values() if c not in COMBINERS})
        if bad:
            raise ValueError(f"unknown combiner(s) {bad}; expected one of {COMBINERS}")
        return chosen

    def capacities_for(
        self, columns: Sequence[Column], batch_size: int, directory: str | None = None
    ) -> dict[str, int] | None:
        """Feature -> capacity for every sparse column, or None without padding.

        `directory` is where "stats" finds its stats.json.
        """
        if self.capacities is None or self.output != "coo":
            return None
        sparse = [c.name for c in columns if c.is_sparse]
        return resolve_capacities(self.capacities, sparse, batch_size, kind=self.capacity_kind, directory=directory)
