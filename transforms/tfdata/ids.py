"""Map functions on id batches: `hash_ids`, `lookup_ids` and `truncate`.

Pure TensorFlow graph code, vectorised over the batch: they take a dense
tensor, a `tf.RaggedTensor` or a `tf.SparseTensor` and return the same kind.

`hash_ids` gives exactly the buckets of `keras.layers.Hashing(num_bins,
salt=salt)` (and of the Beam `HashIds`), so a model can hash at serving time
with the stock Keras layer; `lookup_ids` gives the indices of
`keras.layers.StringLookup(vocabulary=..., num_oov_indices=...)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

__all__ = ["hash_ids", "lookup_ids", "truncate", "vocabulary_table"]


def _map_values(ids, fn):
    if isinstance(ids, tf.RaggedTensor):
        return ids.with_flat_values(fn(ids.flat_values))
    if isinstance(ids, tf.SparseTensor):
        return tf.SparseTensor(ids.indices, fn(ids.values), ids.dense_shape)
    return fn(tf.convert_to_tensor(ids))


def _salt(salt) -> list[int] | None:
    if salt is None:
        return None
    if isinstance(salt, bool):
        raise ValueError(f"salt must be an int or a pair of ints, got {salt!r}")
    if isinstance(salt, int):
        return [salt, salt]
    if isinstance(salt, (tuple, list)) and len(salt) == 2 and all(isinstance(s, int) for s in salt):
        return list(salt)
    raise ValueError(f"salt must be an int or a pair of ints, got {salt!r}")


def hash_ids(ids, num_bins: int, salt: int | Sequence[int] | None = None):
    """Hashes string or integer ids into `[0, num_bins)` as `keras.layers.Hashing` does.

    Without a salt this is FarmHash64 (`tf.strings.to_hash_bucket_fast`);
    with one, keyed SipHash (`tf.strings.to_hash_bucket_strong`, a single int
    salt meaning `[salt, salt]`). Integer ids are hashed as their decimal
    strings, as Keras does.

    Args:
      ids: string or integer ids: a Tensor, RaggedTensor or SparseTensor.
      num_bins: number of buckets, a positive int.
      salt: None, an int or a pair of ints.

    Returns:
      int64 bucket ids with the structure of `ids`.

    Raises:
      ValueError: num_bins not positive, a bad salt, or float ids.

    Example:
      >>> hash_ids(tf.ragged.constant([["a", "b"], []]), 10).to_list()
      [[9, 2], []]
    """
    if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    key = _salt(salt)

    def bucket(values: tf.Tensor) -> tf.Tensor:
        if values.dtype.is_integer:
            values = tf.strings.as_string(values)
        elif values.dtype != tf.string:
            raise ValueError(f"hash_ids: ids must be strings or integers, got {values.dtype.name}")
        if key is None:
            return tf.strings.to_hash_bucket_fast(values, num_bins)
        return tf.strings.to_hash_bucket_strong(values, num_bins, key)

    return _map_values(ids, bucket)


def vocabulary_table(vocabulary: str | Sequence[str]) -> tf.lookup.StaticHashTable:
    """A string -> position table from a vocabulary file (one token a line) or a list.

    Raises:
      ValueError: an empty vocabulary list.
    """
    if isinstance(vocabulary, str):
        initializer = tf.lookup.TextFileInitializer(
            vocabulary,
            tf.string,
            tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER,
        )
    else:
        tokens = [str(t) for t in vocabulary]
        if not tokens:
            raise ValueError("vocabulary is empty")
        initializer = tf.lookup.KeyValueTensorInitializer(
            tf.constant(tokens, tf.string), tf.range(len(tokens), dtype=tf.int64)
        )
    return tf.lookup.StaticHashTable(initializer, default_value=-1)


def lookup_ids(ids, table: tf.lookup.StaticHashTable, num_oov_indices: int = 1):
    """Vocabulary indices as `keras.layers.StringLookup(vocabulary, num_oov_indices=k)` gives them.

    A token at line i of the vocabulary gets `i + k`; an unknown token gets
    0 when k == 1, or a FarmHash bucket in `[0, k)` when k > 1 (Keras'
    rule). Integer ids are looked up by their decimal strings.

    Args:
      ids: string (or integer) ids: Tensor, RaggedTensor or SparseTensor.
      table: from `vocabulary_table`.
      num_oov_indices: k >= 1.

    Returns:
      int64 indices with the structure of `ids`.

    Example:
      >>> t = vocabulary_table(["x", "y"])
      >>> lookup_ids(tf.constant(["y", "q", "x"]), t).numpy().tolist()
      [2, 0, 1]
    """
    if isinstance(num_oov_indices, bool) or not isinstance(num_oov_indices, int) or num_oov_indices < 1:
        raise ValueError(f"num_oov_indices must be a positive integer, got {num_oov_indices!r}")

    def look(values: tf.Tensor) -> tf.Tensor:
        if values.dtype.is_integer:
            values = tf.strings.as_string(values)
        found = table.lookup(values)
        if num_oov_indices == 1:
            oov = tf.zeros_like(found)
        else:
            oov = tf.strings.to_hash_bucket_fast(values, num_oov_indices)
        return tf.where(found >= 0, found + num_oov_indices, oov)

    return _map_values(ids, look)


def truncate(ids, max_length: int, keep: str = "last"):
    """Keeps at most `max_length` ids per row: the last ones (most recent) or the first.

    Args:
      ids: a `[B, None]` RaggedTensor or a 2-D SparseTensor (ids, or their
        weights: truncate both with the same arguments to keep them aligned).
      max_length: a positive int.
      keep: "last" or "first".

    Returns:
      The same kind, rows cut to at most `max_length` values.

    Raises:
      ValueError: a bad max_length or keep, or an unsupported input.

    Example:
      >>> truncate(tf.ragged.constant([[1, 2, 3], [4]]), 2).to_list()
      [[2, 3], [4]]
      >>> truncate(tf.ragged.constant([[1, 2, 3], [4]]), 2, keep="first").to_list()
      [[1, 2], [4]]
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
    if keep not in ("last", "first"):
        raise ValueError(f"keep must be 'last' or 'first', got {keep!r}")
    if isinstance(ids, tf.SparseTensor):
        ragged = tf.RaggedTensor.from_sparse(ids)
        cut = truncate(ragged, max_length, keep)
        return cut.to_sparse()
    if not isinstance(ids, tf.RaggedTensor) or ids.ragged_rank != 1:
        raise ValueError("truncate: expected a [B, None] RaggedTensor (ragged_rank 1) or a 2-D SparseTensor")
    lengths = ids.row_lengths()
    kept = tf.minimum(lengths, max_length)
    starts = ids.row_starts()
    if keep == "last":
        starts = starts + lengths - kept
    positions = tf.ragged.range(starts, starts + kept, row_splits_dtype=ids.row_splits.dtype)
    values = tf.gather(ids.flat_values, positions.flat_values)
    return tf.RaggedTensor.from_row_splits(values, positions.row_splits, validate=False)
