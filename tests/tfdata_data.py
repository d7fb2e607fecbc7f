"""Test data for the tf.data stage: random rows as plain Python, shards, rows read back.

Shards are written with the sparse_io writers; `example_bytes` builds a
`tf.train.Example` straight from the shard contract, to check the reader
against records no sparse_io code produced. Every row's label is its row
number, which identifies it in what comes out.
"""

from __future__ import annotations

import math
import os

import numpy as np
import oracles
import pyarrow as pa

from sparse_io import shard_name
from sparse_io.manifest import commit_directory
from sparse_io.schema import FeatureSpec, Schema
from sparse_io.shard_set import write_shard

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "int64"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("user", "sparse", "int64"),
        FeatureSpec("items", "sparse", "int64", weighted=True),
    ]
)


def random_rows(n: int, seed: int = 0) -> list[dict]:
    """Rows as plain Python: label = row number, price float or None, user 0-1 ids, items 0-6 weighted ids."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n):
        k = int(rng.integers(0, 7))
        items = rng.integers(0, 50, k).tolist()
        if k >= 2 and rng.random() < 0.3:
            items[1] = items[0]  # adjacent duplicates in a row
        rows.append(
            {
                "label": r,
                "price": None if rng.random() < 0.2 else float(np.float32(rng.random() * 10)),
                "user": [] if rng.random() < 0.25 else [int(rng.integers(0, 1000))],
                "items": items,
                "items__weights": [float(np.float32(w)) for w in rng.random(k) + 0.5],
            }
        )
    return rows


def to_table(rows: list[dict], schema: Schema = SCHEMA) -> pa.Table:
    arrow = schema.arrow_schema()
    return pa.table({name: [row[name] for row in rows] for name in arrow.names}, schema=arrow)


def _write_split(directory: str, rows: list[dict], num_files: int, suffix: str, unit: int) -> list[str]:
    """Rows split in order over `num_files` shards of `suffix`'s format (trailing ones may be empty), committed."""
    os.makedirs(directory, exist_ok=True)
    per = math.ceil(len(rows) / num_files) if rows else 0
    paths = []
    for k in range(num_files):
        path = os.path.join(directory, shard_name(k, num_files, suffix))
        write_shard(path, [to_table(rows[k * per : (k + 1) * per])], SCHEMA, row_group_size=unit)
        paths.append(path)
    SCHEMA.save(directory)
    commit_directory(directory)
    return paths


def write_parquet_shards(directory: str, rows: list[dict], num_files: int, row_group_size: int) -> list[str]:
    """Rows split in order over `num_files` shards (trailing ones may be empty), plus schema.json."""
    return _write_split(directory, rows, num_files, ".parquet", row_group_size)


def write_arrow_shards(directory: str, rows: list[dict], num_files: int, record_batch_size: int) -> list[str]:
    """As `write_parquet_shards`, as Arrow IPC shards of `record_batch_size`-row record batches."""
    return _write_split(directory, rows, num_files, ".arrow", record_batch_size)


def example_bytes(row: dict) -> bytes:
    import tensorflow as tf

    feature = {
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[row["label"]])),
        "price": tf.train.Feature(float_list=tf.train.FloatList(value=[] if row["price"] is None else [row["price"]])),
        "user": tf.train.Feature(int64_list=tf.train.Int64List(value=row["user"])),
        "items": tf.train.Feature(int64_list=tf.train.Int64List(value=row["items"])),
        "items__weights": tf.train.Feature(float_list=tf.train.FloatList(value=row["items__weights"])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_tfrecord_shards(directory: str, rows: list[dict], num_files: int) -> list[str]:
    """As `write_parquet_shards`, one tf.train.Example per row (sparse_io's writer)."""
    return _write_split(directory, rows, num_files, ".tfrecord", 1)


def _ragged_rows(value) -> list[list]:
    return [list(r) for r in value.to_list()]


def batch_rows(features: dict, label) -> list[dict]:
    """A ragged-output batch back to Python rows (price NaN -> None), for comparison with `random_rows`."""
    labels = label.numpy().tolist()
    price = features["price"].numpy()
    user = _ragged_rows(features["user"])
    items = _ragged_rows(features["items"])
    weights = _ragged_rows(features["items__weights"])
    out = []
    for i, r in enumerate(labels):
        p = float(price[i])
        out.append(
            {
                "label": r,
                "price": None if math.isnan(p) else p,
                "user": user[i],
                "items": items[i],
                "items__weights": [float(np.float32(w)) for w in weights[i]],
            }
        )
    return out


def reference_coo(rows: list[dict], feature: str, weighted: bool, combiner: str = "sum") -> oracles.Entries:
    """The oracle's COO of one feature for a batch of rows (weights from `<feature>__weights` when weighted)."""
    ids = [row[feature] for row in rows]
    return oracles.coo(ids, [row[feature + "__weights"] for row in rows] if weighted else None, combiner)
