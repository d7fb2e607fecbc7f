"""The finish every source shares: a `RawBatch` to the delivered element.

Each source (Parquet shards, TFRecord shards, raw logs) ends in the same
`RawBatch`; `finish_batches` then converts to COO (or ragged, or sparse),
pads to the capacities, and assembles `(features, label[, position])`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.epochs import plain
from transforms.tfdata.core.grouped import convert_group, group_ragged, pad_coo_features
from transforms.tfdata.core.options import BatchOptions, OutputOptions

__all__ = ["RawBatch", "column_batch", "deliver", "finish_batches"]


class RawBatch(NamedTuple):
    """One batch as every source hands it to `finish_batches`.

    Fields:
      groups: the sparse features, as `(CsrGroup, combiner)` pairs, or (the
        Parquet reader with output="coo", which converts in numpy) dicts
        feature -> finished `ops.Coo`.
      dense: feature -> `[B]` dense tensor.
      label: `[B]`, or None.
      position: the int64 `[4]` position after the batch (Parquet), or None.
      rows: B, an int or an int scalar tensor.
    """

    groups: list
    dense: dict[str, tf.Tensor]
    label: Any
    position: Any
    rows: Any


def column_batch(columns: Sequence[Column], label: Column | None, combiners: Mapping[str, str]):
    """A function from a dict of per-feature columns to its `RawBatch` (TFRecord shards, logs).

    The dict holds ragged ids `[B, None]` for each sparse column (and
    `<f>__weights` for a weighted one), dense `[B]` tensors, and the label.
    Sparse columns are grouped for one conversion each (`group_ragged`)
    with `combiners`; the batch has no position.
    """

    def to_raw(raw) -> RawBatch:
        sparse = {c.name: raw[c.name] for c in columns if c.is_sparse}
        weights = {c.name: raw[c.weights_name] for c in columns if c.is_sparse and c.weighted}
        dense = {c.name: raw[c.name] for c in columns if not c.is_sparse}
        groups = group_ragged(sparse, weights, combiners)
        y = raw[label.name] if label else None
        first = next(iter(raw.values()))
        rows = first.nrows() if isinstance(first, tf.RaggedTensor) else tf.shape(first, out_type=tf.int64)[0]
        return RawBatch(groups, dense, y, None, rows)

    return to_raw


def _to_sparse(ragged: tf.RaggedTensor) -> tf.SparseTensor:
    sparse = ragged.to_sparse()
    sparse.set_shape(ragged.shape)  # keep the static batch size
    return sparse


def finish_batches(
    raw: tf.data.Dataset,
    to_raw_batch,
    columns: Sequence[Column],
    batching: BatchOptions,
    outputs: OutputOptions,
    *,
    capacities: Mapping[str, int] | None,
    has_label: bool,
    return_position: bool = False,
) -> tf.data.Dataset:
    """Turns a source's elements into the delivered ones, the same for every source.

    `to_raw_batch(*element)` gives the element's `RawBatch`; `capacities`
    are the resolved ones (`OutputOptions.capacities_for`). Elements are
    `(features, label)`, `features` alone when there is no label, plus the
    position when asked. The dataset's options keep `batching.deterministic`
    and let iterator checkpoints ignore the external state.
    """
    static_rows = batching.static_rows
    weights_name = {c.name: c.weights_name for c in columns if c.is_sparse}
    output = outputs.output

    def convert(*element):
        batch = to_raw_batch(*element)
        feats = {}
        if output == "coo":
            for group in batch.groups:
                feats.update(group if isinstance(group, dict) else convert_group(*group))
            feats.update(batch.dense)
            if capacities:
                feats = pad_coo_features(
                    feats, capacities, sample_count=batch.rows, overflow=outputs.overflow, dropped=outputs.dropped
                )
        else:
            for group, _ in batch.groups:
                for name, (ids, weights) in zip(group.names, group.features(static_rows)):
                    feats[name] = _to_sparse(ids) if output == "sparse" else ids
                    if weights is not None:
                        feats[weights_name[name]] = _to_sparse(weights) if output == "sparse" else weights
            feats.update(batch.dense)
        out = [feats]
        if has_label:
            out.append(batch.label)
        if return_position:
            out.append(batch.position)
        return tuple(out) if len(out) > 1 else feats

    ds = raw.map(plain(convert), num_parallel_calls=tf.data.AUTOTUNE, deterministic=batching.deterministic)
    return deliver(ds, batching)


def deliver(ds: tf.data.Dataset, batching: BatchOptions, *, external_state: bool = True) -> tf.data.Dataset:
    """`ds`, whose elements are the delivered ones, prefetched, with the options every source sets.

    Without `external_state` (no py_function, no variable in `ds`) and with
    deterministic order, tf.data's defaults are those options: none is set
    (an options dataset costs ~1.5 ms to make).
    """
    ds = ds.prefetch(tf.data.AUTOTUNE)
    if batching.deterministic and not external_state:
        return ds
    options = tf.data.Options()
    options.deterministic = batching.deterministic
    # The external state is the Parquet reader's py_function (a pure function of the batch
    # number) and the counter variables: the iterator state (counters and buffers) is the whole
    # state a checkpoint needs, so saving it must not fail on them.
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return ds.with_options(options)
