"""Map functions from id batches to COO: `to_coo` and `pad_to_capacity`.

Pure TensorFlow graph code (no `py_function`), vectorised over the batch, so
they run in any `tf.data` pipeline, in the tf.data service and on
accelerator hosts. They apply `ops.convert_to_coo` and the padding rule of
`ops.pad_coo` to whole feature dicts, the element structure `make_dataset`
delivers, converting features that share id dtype, weighting and combiner
in one call (see `grouped`).
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

import ops
from ops.coo import Coo  # the one COO type; `transforms.Coo` is the same class
from sparse_io.schema import WEIGHTS_SUFFIX
from transforms.tfdata.core.capacity import check_overflow, resolve_capacities
from transforms.tfdata.core.grouped import convert_group, group_ragged, pad_coo_features

__all__ = ["Coo", "to_coo", "pad_to_capacity"]
_SPARSE_TYPES = (tf.RaggedTensor, tf.SparseTensor)


def _sample_count(ids) -> tf.Tensor:
    """The row count of a `[B, None]` ragged or sparse batch, an int32 scalar."""
    if isinstance(ids, tf.RaggedTensor):
        return ids.nrows(out_type=tf.int32)
    return tf.cast(ids.dense_shape[0], tf.int32)


def _check_ids(x, name: str) -> None:
    if not x.dtype.is_integer:
        raise ValueError(
            f"feature {name!r}: ids have dtype {x.dtype.name}; hash them (hash_ids) or look them up "
            "into integers before to_coo"
        )


def to_coo(
    features,
    *,
    combiner: str | Mapping[str, str] = "sum",
    weights=None,
    validate: bool = True,
) -> dict | Coo:
    """Converts ragged or sparse id batches to COO (`ops.to_coo` per feature).

    Everything after `features` is keyword-only, as in `ops.to_coo`, so
    neither is called with the other's argument order.

    Args:
      features: a `[B, None]` `tf.RaggedTensor` or 2-D `tf.SparseTensor` of
        integer ids, or a dict of them. In a dict, an entry `<f>__weights`
        holds the per-id weights of `<f>` (the shard column convention) and
        is consumed; any other non-sparse entry (a dense feature) passes
        through unchanged.
      combiner: "sum", "mean" or "sqrtn", or a dict feature -> combiner
        (features not in it use "sum").
      weights: None, a float, or (for a dict) a dict feature -> weights
        (ragged/sparse shaped like the ids, or a float) overriding the
        `<f>__weights` entries.
      validate: run `ops.to_coo`'s data checks; pass False for batches built
        by `make_dataset`, which are valid by construction.

    Returns:
      A `Coo` (`ops.Coo`: row_ids, col_ids, gains and the batch's row count as
      sample_count) for a single input; for a dict, a dict where every sparse
      feature is a `Coo` (with the combiner folded into the gains) and every
      other entry is as given.

    Raises:
      ValueError: string ids, weights given for a missing feature, an unknown
        combiner, or a mismatch `ops.to_coo` can see statically.
      tf.errors.InvalidArgumentError: weights not lined up with the ids (at
        run time).

    Example:
      >>> ids = tf.ragged.constant([[3, 1], [], [2]], dtype=tf.int64)
      >>> coo = to_coo({"items": ids, "price": tf.constant([1.0, 2.0, 3.0])})
      >>> coo["items"].row_ids.numpy().tolist(), coo["items"].col_ids.numpy().tolist()
      ([0, 0, 2], [3, 1, 2])
    """
    if isinstance(features, _SPARSE_TYPES):
        if isinstance(combiner, Mapping):
            raise ValueError("to_coo: a single feature takes a combiner string, not a dict")
        _check_ids(features, "<input>")
        return ops.to_coo(features, weights=weights, combiner=combiner, validate=validate)._replace(
            sample_count=_sample_count(features)
        )
    if not isinstance(features, Mapping):
        raise ValueError(
            f"to_coo: expected a RaggedTensor, a SparseTensor or a dict of them, got {type(features).__name__}"
        )
    overrides = {} if weights is None else weights
    if not isinstance(overrides, Mapping):
        raise ValueError("to_coo: for a dict of features, weights must be a dict feature -> weights")
    unknown = sorted(set(overrides) - set(features))
    if unknown:
        raise ValueError(f"to_coo: weights given for feature(s) not in the batch: {unknown}")
    if isinstance(combiner, Mapping):
        unknown = sorted(set(combiner) - set(features))
        if unknown:
            raise ValueError(f"to_coo: combiner given for feature(s) not in the batch: {unknown}")
    consumed = {
        name
        for name in features
        if name.endswith(WEIGHTS_SUFFIX) and isinstance(features.get(name[: -len(WEIGHTS_SUFFIX)]), _SPARSE_TYPES)
    }
    sparse, weights_of = {}, {}
    for name, value in features.items():
        if name in consumed or not isinstance(value, _SPARSE_TYPES):
            continue
        _check_ids(value, name)
        w = overrides.get(name, features.get(name + WEIGHTS_SUFFIX))
        if isinstance(value, tf.SparseTensor) or isinstance(w, tf.SparseTensor):
            how = combiner.get(name, "sum") if isinstance(combiner, Mapping) else combiner
            coo = ops.to_coo(value, weights=w, combiner=how, validate=validate, name=name)
            sparse[name] = coo._replace(sample_count=_sample_count(value))
            continue
        if validate and isinstance(w, tf.RaggedTensor):
            # Grouping reads weights by position: they must line up with the ids.
            check = tf.debugging.assert_equal(
                value.row_splits,
                tf.cast(w.row_splits, value.row_splits.dtype),
                message=f"feature {name!r}: check 'weights row_splits' failed: weights do not line up with ids",
            )
            with tf.control_dependencies([check]):
                w = w.with_flat_values(tf.identity(w.flat_values))
        sparse[name] = value
        weights_of[name] = w
    ragged = {n: v for n, v in sparse.items() if isinstance(v, tf.RaggedTensor)}
    converted = {}
    for group, how in group_ragged(ragged, weights_of, combiner):
        converted.update(convert_group(group, how, validate=validate))
    out = {}
    for name, value in features.items():
        if name in consumed:
            continue
        if name in converted:
            out[name] = converted[name]
        elif name in sparse:
            out[name] = sparse[name]
        else:
            out[name] = value
    return out


def pad_to_capacity(
    coo_features,
    capacities,
    *,
    sample_count: int | tf.Tensor | None = None,
    batch_size: int | None = None,
    overflow: str = "error",
    kind: str = "max",
    dropped: tf.Variable | None = None,
) -> dict | Coo:
    """Pads every COO feature to a fixed length (`ops.pad_coo`), for static shapes.

    Args:
      coo_features: a `Coo` or a dict whose `Coo` entries are padded (other
        entries pass through), as `to_coo` returns it.
      capacities: a dict feature -> capacity (an int, or for a single `Coo`
        just an int), or a stats.json dict, or the path of stats.json / of a
        shard directory holding one (see `capacity.resolve_capacities`).
      sample_count: the batch's row count (padding entries point at this
        row); defaults to `batch_size`.
      batch_size: rows per batch, to look up stats.json capacities; defaults
        to `sample_count` when that is an int.
      overflow: "error" (InvalidArgumentError when a batch needs more) or
        "drop" (keep the first `capacity` entries).
      kind: which stats.json capacity, "max" (sound for consecutive rows) or
        "p99_9" (use with overflow="drop").
      dropped: an int64 scalar `tf.Variable` that counts dropped entries
        (overflow="drop").

    Returns:
      The same structure with each `Coo` of static length `[capacity]`, its
      sample_count the one padded for.

    Raises:
      ValueError: no sample count, a missing capacity, or a bad option.
      tf.errors.InvalidArgumentError: overflow="error" and a batch needs
        more entries than its capacity.

    Example:
      >>> coo = Coo(tf.constant([0, 1], tf.int32), tf.constant([7, 9], tf.int64), tf.constant([1.0, 1.0]))
      >>> padded = pad_to_capacity({"f": coo}, {"f": 4}, sample_count=2)
      >>> padded["f"].row_ids.numpy().tolist()
      [0, 1, 2, 2]
    """
    if overflow == "drop" and dropped is not None and dropped.dtype != tf.int64:
        raise ValueError("pad_to_capacity: the dropped counter must be an int64 variable")
    if sample_count is None:
        if batch_size is None:
            raise ValueError("pad_to_capacity: give sample_count (the batch's row count) or batch_size")
        sample_count = batch_size
    if batch_size is None and isinstance(sample_count, int):
        batch_size = sample_count
    check_overflow(overflow, "pad_to_capacity")
    single = isinstance(coo_features, Coo)
    if single:
        if isinstance(capacities, int):
            capacities = {"<input>": capacities}
        coo_features = {"<input>": coo_features}
    names = [n for n, v in coo_features.items() if isinstance(v, Coo)]
    caps = resolve_capacities(capacities, names, batch_size, kind=kind, where="pad_to_capacity")
    out = pad_coo_features(coo_features, caps, sample_count=sample_count, overflow=overflow, dropped=dropped)
    return out["<input>"] if single else out
