"""Map functions on id batches: `hash_ids`, `lookup_ids`, `truncate`, and `GraphIdMap` of an id spec.

Pure TensorFlow graph code, vectorised over the batch: they take a dense
tensor, a `tf.RaggedTensor` or a `tf.SparseTensor` and return the same kind.

`hash_ids` gives exactly the buckets of `keras.layers.Hashing(num_bins,
salt=salt)` (and of the Beam `HashIds`), so a model can hash at serving time
with the stock Keras layer; `lookup_ids` gives the indices of
`keras.layers.StringLookup(vocabulary=..., num_oov_indices=...)`.

`GraphIdMap(spec)` is the graph implementation of a `sparse_io.id_maps`
spec (`HashSpec`, `VocabularySpec`), whose Arrow implementation the Beam
ingest runs: `make_log_dataset` and the exported serving signature map raw
ids through it, so the three give a value the same id.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from sparse_io.id_maps import HashSpec, IdSpec, VocabularySpec

__all__ = ["hash_ids", "lookup_ids", "truncate", "vocabulary_table", "GraphIdMap"]


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


def lookup_ids(ids, table: tf.lookup.StaticHashTable, num_oov_indices: int = 1, *, oov_method: str = "farmhash",
               salt: int | Sequence[int] | None = None):
    """Vocabulary indices as `keras.layers.StringLookup(vocabulary, num_oov_indices=k)` gives them.

    A token at line i of the vocabulary gets `i + k`; an unknown token gets
    0 when k == 1, or a bucket in `[0, k)` when k > 1 (Keras' rule): the
    FarmHash bucket of its text (SipHash with a `salt`), or for integer ids
    with `oov_method="floormod"` the id mod k (`IntegerLookup`'s rule, and
    the ingest's). Integer ids are looked up by their decimal strings.

    Args:
      ids: string (or integer) ids: Tensor, RaggedTensor or SparseTensor.
      table: from `vocabulary_table`.
      num_oov_indices: k >= 1.
      oov_method: "farmhash" or "floormod" (integer ids only).
      salt: the salt of the "farmhash" buckets.

    Returns:
      int64 indices with the structure of `ids`.

    Example:
      >>> t = vocabulary_table(["x", "y"])
      >>> lookup_ids(tf.constant(["y", "q", "x"]), t).numpy().tolist()
      [2, 0, 1]
    """
    if isinstance(num_oov_indices, bool) or not isinstance(num_oov_indices, int) or num_oov_indices < 1:
        raise ValueError(f"num_oov_indices must be a positive integer, got {num_oov_indices!r}")
    if oov_method not in ("farmhash", "floormod"):
        raise ValueError(f"oov_method must be 'farmhash' or 'floormod', got {oov_method!r}")
    key = _salt(salt)

    def look(values: tf.Tensor) -> tf.Tensor:
        text = tf.strings.as_string(values) if values.dtype.is_integer else values
        found = table.lookup(text)
        return tf.where(found >= 0, found + num_oov_indices, _oov_buckets(values, num_oov_indices, oov_method, key))

    return _map_values(ids, look)


def _oov_buckets(values: tf.Tensor, k: int, oov_method: str, key: list[int] | None) -> tf.Tensor:
    """The OOV id in `[0, k)` of each value, by Keras's rules (see `lookup_ids`)."""
    if k == 1:
        return tf.zeros(tf.shape(values), tf.int64)
    if values.dtype.is_integer and oov_method == "floormod":
        return tf.math.floormod(tf.cast(values, tf.int64), k)
    text = tf.strings.as_string(values) if values.dtype.is_integer else values
    if key is None:
        return tf.strings.to_hash_bucket_fast(text, k)
    return tf.strings.to_hash_bucket_strong(text, k, key)


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


class GraphIdMap(tf.Module):
    """The TensorFlow graph implementation of an id spec (`sparse_io.id_maps`); its Arrow twin is `spec.apply_arrow`.

    Calling it maps string or integer ids (Tensor, RaggedTensor or
    SparseTensor) to int64 ids of the same structure, equal to what
    `spec.apply_arrow` gives for the same values. A vocabulary's table lives
    in this module, so a SavedModel tracking the module carries it.

    Raises:
      ValueError: (at call) float ids; a vocabulary spec without OOV buckets
        (an unknown value at serving would have no id; the ingest refuses it).

    Example:
      >>> GraphIdMap(HashSpec(10))(tf.ragged.constant([["a", "b"], []])).to_list()
      [[9, 2], []]
    """

    def __init__(self, spec: IdSpec, name: str | None = None):
        super().__init__(name=name)
        self.spec = spec
        if isinstance(spec, VocabularySpec):
            if spec.num_oov_buckets < 1:
                raise ValueError("a vocabulary without OOV buckets has no id for an unknown value in the graph")
            self.table = vocabulary_table(list(spec.tokens)) if spec.tokens else None
        elif not isinstance(spec, HashSpec):
            raise ValueError(f"GraphIdMap: not a one-column id spec: {spec!r} (a cross maps several columns: "
                             "transforms.tfdata.crosses.GraphCross)")

    def __call__(self, ids):
        """int64 ids of `ids` (string or integer values), with their structure."""
        spec = self.spec
        if isinstance(spec, HashSpec):
            if spec.mask_value is None:
                return hash_ids(ids, spec.num_bins, spec.salt)
            return _map_values(ids, lambda v: _masked_buckets(v, spec))
        if self.table is None:  # no token at all: every id is unknown
            key = _salt(spec.salt)
            return _map_values(ids, lambda v: _oov_buckets(v, spec.num_oov_buckets, spec.oov_method, key))
        return lookup_ids(ids, self.table, spec.num_oov_buckets, oov_method=spec.oov_method, salt=spec.salt)


def _masked_buckets(values: tf.Tensor, spec: HashSpec) -> tf.Tensor:
    """Keras's `mask_value` rule: the mask value -> 0, the others -> 1 + hash % (num_bins - 1)."""
    if spec.num_bins <= 1:
        return hash_ids(values, spec.num_bins, spec.salt)
    mask = tf.constant(spec.mask_value, values.dtype) if values.dtype != tf.string else tf.constant(
        str(spec.mask_value))
    buckets = hash_ids(values, spec.num_bins - 1, spec.salt) + 1
    return tf.where(tf.equal(values, mask), tf.zeros_like(buckets), buckets)

