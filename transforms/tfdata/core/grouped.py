"""Many sparse features of one batch converted and padded in one call, not one call per feature.

Features that share an id dtype, weighting and combiner form a `CsrGroup`:
laid end to end, F features of n rows are one CSR batch of F*n rows (feature
f's row r is row f*n + r), so a single `ops.convert_to_coo` converts them
all: adjacent duplicates only ever merge within a row, and mean/sqrtn scale
per row, so the result per feature is exactly what a call per feature gives.
The output is then cut per feature at the row boundaries f*n. Padding works
the same way: one scatter into the concatenated capacities, cut into static
pieces. A Criteo batch (26 features) thus costs a few dozen graph ops rather
than a few hundred, which shows in tracing time, iterator start-up and the
per-batch overhead alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf

import ops
from ops.coo import Coo
from transforms.tfdata.core.csr_group import CsrGroup

__all__ = ["group_ragged", "convert_group", "pad_coo_features"]


def group_ragged(
    features: Mapping[str, tf.RaggedTensor],
    weights: Mapping[str, tf.RaggedTensor | float | None],
    combiner: str | Mapping[str, str],
) -> list[tuple[CsrGroup, str]]:
    """Groups per-feature ragged ids of one batch by (id dtype, weighting, combiner), in input order.

    Returns `(group, combiner)` pairs; a feature's weights are a RaggedTensor
    shaped like its ids, a float every id weighs, or None (1.0).
    """
    keyed: dict[tuple, tuple[list[str], list, list, str]] = {}
    for name, ids in features.items():
        w = weights.get(name)
        how = combiner.get(name, "sum") if isinstance(combiner, Mapping) else combiner
        weighted = isinstance(w, tf.RaggedTensor)
        key = (ids.flat_values.dtype, weighted, how, None if weighted else 1.0 if w is None else float(w))
        names, ragged, ragged_weights, _ = keyed.setdefault(key, ([], [], [], how))
        names.append(name)
        ragged.append(ids)
        if weighted:
            ragged_weights.append(w)
    return [
        (CsrGroup.from_ragged(names, ragged, ragged_weights if key[1] else key[3]), how)
        for key, (names, ragged, ragged_weights, how) in keyed.items()
    ]


def convert_group(group: CsrGroup, combiner: str, *, validate: bool = False) -> dict[str, Coo]:
    """`{name: Coo(row_ids int32, col_ids, gains, sample_count)}` for every feature of the group, in one conversion."""
    if validate:
        group.check_rows()
    splits, values = group.row_splits, group.values
    n = tf.cast(group.num_rows, tf.int64)
    count = len(group.names)
    w = tf.constant([group.weights], tf.float32) if group.scalar_weight else group.weights
    name = group.names[0] if count == 1 else None
    lengths = splits[1:] - splits[:-1]

    def at_most_one_id_per_row():
        # Nothing can merge: convert_to_coo's dense path (one id per sample) over the
        # rows that have an id, then those samples mapped back to their rows.
        present = tf.where(lengths > 0)[:, 0]
        rows, cols, gains, _ = ops.convert_to_coo(
            tf.zeros([0], tf.int64),
            values,
            w,
            sample_count=tf.size(present),
            combiner=combiner,
            validate=False,
            name=name,
        )
        return tf.cast(tf.gather(present, rows), tf.int32), cols, gains

    def general():
        return ops.convert_to_coo(
            splits, values, w, sample_count=n * count, combiner=combiner, validate=validate, name=name
        )[:3]

    # One-hot features (Criteo's) take the cheap path; a batch with any longer row the general one.
    longest = tf.reduce_max(tf.concat([lengths, tf.zeros([1], tf.int64)], 0))
    rows, cols, gains = tf.cond(longest <= 1, at_most_one_id_per_row, general)
    samples = tf.cast(group.num_rows, tf.int32)
    if count == 1:
        return {group.names[0]: Coo(rows, cols, gains, samples)}
    bounds = tf.searchsorted(tf.cast(rows, tf.int64), tf.range(count + 1, dtype=tf.int64) * n, side="left")
    sizes = bounds[1:] - bounds[:-1]
    local = tf.math.floormod(rows, tf.cast(tf.maximum(n, 1), tf.int32))  # row f*n + r is row r of feature f
    parts = zip(tf.split(local, sizes, num=count), tf.split(cols, sizes, num=count), tf.split(gains, sizes, num=count))
    return {name: Coo(r, c, g, samples) for name, (r, c, g) in zip(group.names, parts)}


def pad_coo_features(
    coo: Mapping[str, object],
    capacities: Mapping[str, int],
    *,
    sample_count,
    overflow: str,
    dropped: tf.Variable | None,
) -> dict:
    """Every `Coo` in `coo` padded to `capacities[name]` entries, one scatter per col_ids dtype.

    Same result as `ops.pad_coo` per feature: padding entries are
    (row = sample_count, col = 0, gain = 0); with overflow="error" a feature
    needing more raises InvalidArgumentError naming it; with "drop" its first
    `capacity` entries are kept and the rest counted in `dropped`.
    """
    by_dtype: dict[tf.DType, list[str]] = {}
    for name, value in coo.items():
        if isinstance(value, Coo):
            by_dtype.setdefault(value.col_ids.dtype, []).append(name)
    out = dict(coo)
    losses = []
    for names in by_dtype.values():
        padded, lost = _pad_same_dtype(
            [coo[n] for n in names], names, [capacities[n] for n in names], sample_count, overflow
        )
        out.update(zip(names, padded))
        if lost is not None:
            losses.append(lost)
    if dropped is not None and losses:
        update = dropped.assign_add(tf.add_n(losses))
        with tf.control_dependencies([update]):
            out = {n: Coo(*(tf.identity(t) for t in v[:3]), v.sample_count) if isinstance(v, Coo) else v
                   for n, v in out.items()}
    return out


def _pad_same_dtype(items: Sequence, names: Sequence[str], caps: Sequence[int], sample_count, overflow: str):
    count = len(items)
    lengths = tf.stack([tf.size(c.row_ids, out_type=tf.int64) for c in items])
    caps_t = tf.constant(list(caps), tf.int64)
    starts = tf.cumsum(lengths, exclusive=True)
    dest_starts = tf.cumsum(caps_t, exclusive=True)
    rows = tf.concat([c.row_ids for c in items], 0)
    cols = tf.concat([c.col_ids for c in items], 0)
    gains = tf.concat([c.gains for c in items], 0)
    feature = tf.repeat(tf.range(count, dtype=tf.int64), lengths)
    position = tf.range(tf.size(rows, out_type=tf.int64)) - tf.gather(starts, feature)
    keep = position < tf.gather(caps_t, feature)
    lost = None
    checks = []
    if overflow == "error":
        over = lengths > caps_t
        first = tf.argmax(tf.cast(over, tf.int32), output_type=tf.int32)
        message = tf.strings.join(
            [
                "pad_to_capacity: check 'capacity' failed: feature '",
                tf.gather(tf.constant(list(names)), first),
                "' has ",
                tf.strings.as_string(tf.gather(lengths, first)),
                " COO entries, more than its capacity ",
                tf.strings.as_string(tf.gather(caps_t, first)),
                " (raise the capacity, or pass overflow='drop')",
            ]
        )
        checks.append(tf.debugging.Assert(tf.logical_not(tf.reduce_any(over)), [message]))
    else:
        lost = tf.reduce_sum(tf.maximum(lengths - caps_t, 0))
    total = sum(caps)
    where = tf.expand_dims(tf.boolean_mask(tf.gather(dest_starts, feature) + position, keep), 1)
    with tf.control_dependencies(checks):
        pad_row = tf.fill([total], tf.cast(sample_count, tf.int32))
        out_rows = tf.tensor_scatter_nd_update(pad_row, where, tf.boolean_mask(rows, keep))
        out_cols = tf.tensor_scatter_nd_update(tf.zeros([total], cols.dtype), where, tf.boolean_mask(cols, keep))
        out_gains = tf.tensor_scatter_nd_update(tf.zeros([total], tf.float32), where, tf.boolean_mask(gains, keep))
    samples = tf.cast(sample_count, tf.int32)
    padded = []
    for r, c, g, cap in zip(tf.split(out_rows, caps), tf.split(out_cols, caps), tf.split(out_gains, caps), caps):
        for t in (r, c, g):
            t.set_shape([cap])
        padded.append(Coo(r, c, g, samples))
    return padded, lost
