"""`Coo`: the one COO batch type, from the tf.data stage to the embedding bags.

A feature's batch after the COO conversion is four things that belong
together: `row_ids`, `col_ids`, `gains` (the combiner folded in, as
`ops.convert_to_coo` writes them) and `sample_count`, the number of samples
(rows) of the batch. The count cannot be recovered from the entries: a
padded COO (`ops.pad_coo`, `make_dataset(capacities=...)`) points its padding
entries at row `sample_count`, so `max(row_ids) + 1` would be one too many,
and trailing samples without ids leave no entry at all. So the count travels
with the entries: `ops.convert_to_coo`, `ops.to_coo`, `ops.pad_coo` and
`make_dataset(output="coo")` return a `Coo`, and `ops.embedding_bag` and
`ops.layers.EmbeddingBag` take one whole.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Coo", "split_coo"]


class Coo(NamedTuple):
    """One feature's COO batch: `Coo(row_ids, col_ids, gains, sample_count)`.

    Fields:
      row_ids: int32 `[M]`, each in `[0, sample_count]` (`sample_count` marks
        a padding entry, whose gain is 0).
      col_ids: int32 or int64 `[M]`, table rows.
      gains: float32 `[M]`, the combiner already folded in.
      sample_count: the batch's sample count S, an int32 scalar tensor or a
        Python int; None when unknown (then `ops.embedding_bag` and
        `ops.layers.EmbeddingBag` need it from elsewhere, and refuse padded
        input without it).

    It is a NamedTuple, so it unpacks into the positional arguments of
    `ops.embedding_bag` and passes through `tf.data`, `tf.nest` and Keras.

    Example:
      >>> coo = Coo(tf.constant([0, 0, 2]), tf.constant([4, 7, 0]), tf.constant([0.5, 0.5, 0.0]), 2)
      >>> row_ids, col_ids, gains, sample_count = coo
      >>> ops.embedding_bag(table, *coo).shape  # doctest: +SKIP
      TensorShape([2, dim])
    """

    row_ids: Any
    col_ids: Any
    gains: Any
    sample_count: Any = None


def split_coo(value) -> tuple[Any, Any, Any, Any]:
    """`(row_ids, col_ids, gains, sample_count or None)` of a `Coo` or a 3- or 4-tuple.

    Raises:
      ValueError: anything else.
    """
    if isinstance(value, (list, tuple)) and len(value) in (3, 4):
        return (*value[:3], value[3] if len(value) == 4 else None)
    raise ValueError(
        f"expected an ops.Coo or a (row_ids, col_ids, gains[, sample_count]) tuple, got {type(value).__name__}"
        + (f" of length {len(value)}" if isinstance(value, (list, tuple)) else "")
    )
