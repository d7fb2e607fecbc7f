"""The COO the tf.data stage yields, from every input it reads, against the oracle computed from the raw rows.

One set of rows (multi-valued features with adjacent duplicate ids, empty
rows, per-id weights that include zero, negative and zero-sum rows, an
int32 feature) is written as Parquet shards and TFRecord shards through
sparse_io's public writers and as a raw CSV log; `make_dataset` and
`make_log_dataset` read it back with each combiner, unpadded and padded to
capacities (from stats.json, derived for a batch size it has no entry for),
and `to_coo` applies a shared scalar weight. Every batch is compared with
`oracles.coo` / `oracles.pad` of the rows it must hold.
"""

import json
import os

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from oracles import assert_entries, capacity_for, capacity_max, coo, pad

import transforms
from sparse_io import FeatureSpec, Schema, commit_directory, shard_name, write_parquet_shard, write_tfrecord_shard

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "float32"),
        FeatureSpec("one", "sparse", "int64"),  # 0 or 1 id: the one-hot paths
        FeatureSpec("tags", "sparse", "int64"),  # unweighted, multi-valued
        FeatureSpec("items", "sparse", "int64", weighted=True),
        FeatureSpec("small", "sparse", "int32"),
    ]
)
SPARSE = ("one", "tags", "items", "small")
WEIGHTED = {"items"}
BATCH = 8
STATS_SIZES = (4, 16)  # BATCH itself has no entry: its capacity is derived
WEIGHTS = (0.5, 1.0, 2.0, -1.0, 0.25, 0.0)  # dyadic: sums are exact in float32


def _rows(n: int, seed: int) -> list[dict]:
    """Rows as plain Python; the label is the row number (float), which identifies the row."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n):
        k = int(rng.integers(0, 6))
        items = [int(v) for v in rng.integers(0, 6, k)]  # a small id range: duplicates are common
        if k >= 2 and rng.random() < 0.5:
            items[1] = items[0]
        weights = [float(rng.choice(WEIGHTS)) for _ in range(k)]
        if r % 9 == 4 and k >= 2:
            weights = [1.0, -1.0] + [0.0] * (k - 2)  # a row whose weights sum to zero
        tags = [int(v) for v in rng.integers(0, 4, int(rng.integers(0, 4)))]
        rows.append(
            {
                "label": float(r),
                "one": [] if rng.random() < 0.3 else [int(rng.integers(0, 1000))],
                "tags": tags,
                "items": items,
                "items__weights": weights,
                "small": [int(v) for v in rng.integers(0, 3, int(rng.integers(0, 3)))],
            }
        )
    rows[0]["items"], rows[0]["items__weights"] = [], []  # an empty first row
    rows[-1]["tags"] = [5, 5, 5]  # a run of three in the last row
    return rows


ROWS = _rows(37, seed=8)


def _table(rows: list[dict]) -> pa.Table:
    arrow = SCHEMA.arrow_schema()
    return pa.table({name: [row[name] for row in rows] for name in arrow.names}, schema=arrow)


def _stats() -> dict:
    features = {}
    for name in SPARSE:
        lengths = [len(row[name]) for row in ROWS]
        features[name] = {
            "rows": len(ROWS),
            "ids_per_row": {"max": max(lengths)},
            "capacity": {
                str(b): {"max": capacity_max(lengths, b), "p99_9": capacity_max(lengths, b)} for b in STATS_SIZES
            },
        }
    return {"format_version": 1, "num_rows": len(ROWS), "features": features}


def _csv_field(values) -> str:
    return "|".join(repr(v) for v in values)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("coo_output")
    dirs = {}
    for fmt, suffix, write in (
        ("parquet", ".parquet", lambda p, t: write_parquet_shard(p, [t], SCHEMA, row_group_size=5)),
        ("tfrecord", ".tfrecord", lambda p, t: write_tfrecord_shard(p, [t], SCHEMA)),
    ):
        directory = str(root / fmt)
        os.makedirs(directory)
        # Two shards, split inside a batch, so batches span files.
        for k, part in enumerate((ROWS[:13], ROWS[13:])):
            write(os.path.join(directory, shard_name(k, 2, suffix)), _table(part))
        SCHEMA.save(directory)
        with open(os.path.join(directory, "stats.json"), "w") as f:
            json.dump(_stats(), f)
        commit_directory(directory)
        dirs[fmt] = directory
    header = ["label", "one", "tags", "items", "items__weights", "small"]
    lines = [",".join(header)]
    for row in ROWS:
        lines.append(",".join([repr(row["label"])] + [_csv_field(row[name]) for name in header[1:]]))
    log = root / "log.csv"
    log.write_text("\n".join(lines) + "\n")
    dirs["log"] = str(log)
    return dirs


def _dataset(sources, fmt: str, batch_size: int = BATCH, **kwargs):
    if fmt == "log":
        capacities = kwargs.pop("capacities", None)
        if capacities == "stats":  # logs have no stats.json: the same capacities, given explicitly
            capacities = {name: capacity_for(_stats()["features"][name], batch_size) for name in SPARSE}
        return transforms.make_log_dataset(
            sources["log"], "csv", batch_size, schema=SCHEMA, capacities=capacities, **kwargs
        )
    return transforms.make_dataset(sources[fmt], batch_size, shuffle=False, **kwargs)


def _want(rows: list[dict], name: str, combiner: str, weights=None):
    if weights is None and name in WEIGHTED:
        weights = [row[name + "__weights"] for row in rows]
    return coo([row[name] for row in rows], weights, combiner)


def _batches(ds):
    """(features, rows of ROWS the batch holds), checking that batches come in order and cover ROWS once."""
    seen = 0
    for features, label in ds:
        labels = [int(v) for v in label.numpy().tolist()]
        assert labels == list(range(seen, seen + len(labels)))
        yield features, ROWS[seen : seen + len(labels)]
        seen += len(labels)
    assert seen == len(ROWS)


FORMATS = ["parquet", "tfrecord", "log"]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_coo_of_every_batch_follows_the_rule_for_each_combiner(sources, fmt, combiner):
    for features, rows in _batches(_dataset(sources, fmt, combiner=combiner)):
        for name in SPARSE:
            got = features[name]
            assert isinstance(got, transforms.Coo) and int(got.sample_count) == len(rows)
            assert got.col_ids.dtype == (tf.int32 if name == "small" else tf.int64)  # the schema's id dtype
            assert_entries(got, _want(rows, name, combiner))


@pytest.mark.parametrize("fmt", FORMATS)
def test_padded_coo_follows_the_padding_rule_at_the_derived_capacity(sources, fmt):
    combiners = {"one": "sqrtn", "tags": "mean", "items": "sqrtn", "small": "sum"}
    capacities = {name: capacity_for(_stats()["features"][name], BATCH) for name in SPARSE}
    # The derivation must give a bound no batch of BATCH consecutive rows exceeds.
    for name in SPARSE:
        assert capacities[name] >= capacity_max([len(row[name]) for row in ROWS], BATCH)
    ds = _dataset(sources, fmt, combiner=combiners, capacities="stats")
    for features, rows in _batches(ds):
        for name in SPARSE:
            got = features[name]
            assert got.row_ids.shape == [capacities[name]]
            want, _ = pad(_want(rows, name, combiners[name]), capacities[name], len(rows))
            assert_entries(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_capacities_below_the_need_drop_the_tail_of_each_feature_and_count_it(sources, fmt):
    # Half the sound capacity for batches of 4: most batches overflow in some feature.
    capacities = {name: capacity_max([len(row[name]) for row in ROWS], 4) // 2 for name in SPARSE}
    dropped = tf.Variable(0, dtype=tf.int64)
    ds = _dataset(sources, fmt, 4, combiner="mean", capacities=capacities, overflow="drop", dropped=dropped)
    lost = 0
    for features, rows in _batches(ds):
        for name in SPARSE:
            want, cut = pad(_want(rows, name, "mean"), capacities[name], len(rows), overflow="drop")
            assert_entries(features[name], want)
            lost += cut
    assert lost > 0 and int(dropped.numpy()) == lost


@pytest.mark.parametrize("fmt", FORMATS)
def test_to_coo_with_a_shared_scalar_weight_follows_the_rule(sources, fmt):
    for features, rows in _batches(_dataset(sources, fmt, output="ragged")):
        for combiner in ("sum", "mean", "sqrtn"):
            out = transforms.to_coo(features, combiner=combiner, weights={"tags": 2.5, "one": -0.5})
            assert_entries(out["tags"], _want(rows, "tags", combiner, 2.5))
            assert_entries(out["one"], _want(rows, "one", combiner, -0.5))
            assert_entries(out["items"], _want(rows, "items", combiner))  # per-id weights from items__weights
