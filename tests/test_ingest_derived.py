"""End to end: an ingest bucketizes and scales number columns; shards, schema.json, `--vocab_from` and serving agree.

References are worked out here with numpy on the generated log's values (np.searchsorted for bucket ids,
np.mean / np.std(ddof=0) / min / max / np.log1p, numpy ranks for the quantile boundaries), never taken from the
code under test.
"""

import csv
import json

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
import yaml

from pipelines.ingest import run_ingest
from sparse_io import iter_shards
from sparse_io.schema import Schema

BOUNDARIES = [18, 25, 35, 50]
CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "clicked", "kind": "label", "dtype": "int64"},
        {"name": "row", "kind": "dense", "dtype": "int64"},
        {"name": "user", "dtype": "string"},
        {"name": "age", "kind": "dense", "dtype": "int64"},
        {"name": "price", "kind": "dense", "dtype": "float32"},
    ]},
    "features": {
        "user": {"hash_buckets": 100},
        "age_bucket": {"source": "age", "bucketize": {"boundaries": BOUNDARIES}},
        "price_q": {"source": "price", "bucketize": {"quantiles": 8}},
        "price_z": {"source": "price", "scale": "z_score"},
        "price_mm": {"source": "price", "scale": "min_max"},
        "age_log": {"source": "age", "scale": "log1p"},
    },
    "output": {"format": "parquet", "num_shards": 2, "shuffle": True},
}


def _write_log(path, rows: int, seed: int, price_scale: float = 1.0) -> dict:
    """A click log with missing ages and prices; returns its columns as numpy (NaN where missing)."""
    rng = np.random.default_rng(seed)
    age = rng.integers(-3, 90, rows).astype(np.float64)  # a few ages <= -1: log1p has no value there
    age[rng.random(rows) < 0.05] = np.nan
    price = np.round(rng.lognormal(2.0, 1.2, rows) * price_scale, 2).astype(np.float32).astype(np.float64)
    price[rng.random(rows) < 0.07] = np.nan
    price[:300] = 5.0  # heavy ties at one value
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["clicked", "row", "user", "age", "price"])
        for i in range(rows):
            writer.writerow([int(rng.integers(0, 2)), i, f"u{i % 37}",
                             "" if np.isnan(age[i]) else str(int(age[i])),
                             "" if np.isnan(price[i]) else f"{price[i]:.2f}"])
    return {"age": age, "price": price}


def _ingest(tmp_path, log, name, *extra):
    config = tmp_path / "derived.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / name
    run_ingest(["--input", str(log), "--config", str(config), "--output", str(out), "--no_report",
                "--progress_seconds", "0", *extra])
    return out


def _rows(out) -> dict:
    """Every row of the shards as the library reads them (`sparse_io.iter_shards`: derived-at-read columns too)."""
    table = pa.concat_tables(iter_shards(str(out)))
    order = np.argsort(table.column("row").to_numpy())
    return {name: [table.column(name)[int(i)].as_py() for i in order] for name in table.column_names}


def _transform(out, name) -> dict:
    return next(f for f in json.loads((out / "schema.json").read_text())["features"] if f["name"] == name)["transform"]


def _buckets(values, boundaries):
    return [[] if np.isnan(v) else [int(np.searchsorted(np.float32(boundaries), np.float32(v), side="right"))]
            for v in values]


def _expect_scaled(got, expected):
    got = np.array([np.nan if v is None else v for v in got], np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    present = ~np.isnan(expected)
    np.testing.assert_allclose(got[present], expected[present], rtol=2e-6, atol=1e-7)


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("derived")
    log = tmp / "train.csv"
    values = _write_log(log, 6000, seed=1)
    return tmp, log, values, _ingest(tmp, log, "train")


def test_shards_hold_the_derived_columns_numpy_computes(train):
    _, _, values, out = train
    rows = _rows(out)
    age, price = values["age"], values["price"]
    assert len(rows["row"]) == 6000
    assert rows["age_bucket"] == _buckets(age, BOUNDARIES)  # a missing age: an empty row, no bucket
    present = price[~np.isnan(price)]
    z = _transform(out, "price_z")
    assert z["mean"] == pytest.approx(np.mean(present), rel=1e-12)
    assert z["std"] == pytest.approx(np.std(present, ddof=0), rel=1e-12)
    _expect_scaled(rows["price_z"], (price - np.mean(present)) / np.std(present))
    mm = _transform(out, "price_mm")
    assert (mm["low"], mm["high"]) == (present.min(), present.max())
    _expect_scaled(rows["price_mm"], (price - present.min()) / (present.max() - present.min()))
    with np.errstate(invalid="ignore", divide="ignore"):
        _expect_scaled(rows["age_log"], np.where(age > -1, np.log1p(age), np.nan))
    assert rows["age"] == [None if np.isnan(a) else int(a) for a in age]  # the source stays as its own column


def test_quantile_boundaries_are_within_the_sketchs_rank_error(train):
    _, _, values, out = train
    record = _transform(out, "price_q")["bucketize"]
    boundaries = np.array(record["boundaries"])
    assert record["quantiles"] == 8 and list(boundaries) == sorted(set(boundaries))
    present = np.sort(values["price"][~np.isnan(values["price"])])
    qs = np.arange(1, 8) / 8
    # Each boundary is the q-quantile for some q; ties may merge two (5.0 covers 300 rows), so match each
    # boundary to its nearest q and check its rank interval against q n.
    below = np.searchsorted(present, boundaries, side="left") / present.size
    upto = np.searchsorted(present, boundaries, side="right") / present.size
    for lo, hi in zip(below, upto):
        assert min(max(0.0, lo - q, q - hi) for q in qs) <= 0.01
    assert _rows(out)["price_q"] == _buckets(values["price"], boundaries)
    schema = Schema.load(str(out))
    assert schema["price_q"].vocabulary_size == len(boundaries) + 1 and schema["price_q"].kind == "sparse"
    assert schema["price_z"].kind == "dense" and schema["price_z"].dtype == "float32"


def test_stats_cover_the_derived_columns(train):
    _, _, values, out = train
    stats = json.loads((out / "stats.json").read_text())
    assert stats["features"]["age_bucket"]["empty_rows"] == int(np.isnan(values["age"]).sum())
    # log1p of an age <= -1 is missing too: stats.json counts it among the derived column's missing values.
    with np.errstate(invalid="ignore"):
        assert stats["dense"]["age_log"]["missing"] == int((np.isnan(values["age"]) | (values["age"] <= -1)).sum())


def test_vocab_from_reuses_boundaries_and_scale_parameters(train):
    tmp, _, _, first = train
    held_out = tmp / "held_out.csv"
    values = _write_log(held_out, 1500, seed=2, price_scale=3.0)  # another distribution: new parameters would differ
    second = _ingest(tmp, held_out, "held_out", "--vocab_from", str(first))
    for name in ("age_bucket", "price_q", "price_z", "price_mm", "age_log"):
        assert _transform(second, name) == _transform(first, name), name
    z = _transform(first, "price_z")
    rows = _rows(second)
    _expect_scaled(rows["price_z"], (values["price"] - z["mean"]) / z["std"])
    assert rows["price_q"] == _buckets(values["price"], _transform(first, "price_q")["bucketize"]["boundaries"])


@pytest.mark.slow
def test_serving_signature_gives_the_shards_derived_inputs(train, tmp_path):
    from test_serving_parity import _ctr_model

    from pipelines.serving import IngestReading, export_serving_model

    _, log, _, out = train
    schema = Schema.load(str(out))
    model = _ctr_model(schema, 4)
    export = export_serving_model(model, schema, str(tmp_path / "export"), vocab_dir=str(out / "vocab"),
                                  reading=IngestReading.load(str(out)))
    loaded = tf.saved_model.load(export)
    with open(log, newline="") as f:
        cells = list(csv.DictReader(f))[:400]
    signature = loaded.signatures["serving_text"].structured_input_signature[1]
    assert "age" in signature and "price" in signature and "price_z" not in signature  # sources, not derived
    inputs = loaded.model_inputs({name: tf.constant([r[name] for r in cells]) for name in signature})
    rows = _rows(out)
    by_row = {r: i for i, r in enumerate(rows["row"])}
    index = [by_row[int(r["row"])] for r in cells]
    for name in ("price_z", "price_mm", "age_log"):
        expected = np.array([np.nan if rows[name][i] is None else rows[name][i] for i in index], np.float32)
        np.testing.assert_array_equal(inputs[name].numpy(), expected, err_msg=name)  # bit for bit
    for name in ("age_bucket", "price_q"):
        coo = inputs[name]
        ids = [[] for _ in cells]
        for row, col in zip(coo["row_ids"].numpy(), coo["col_ids"].numpy()):
            ids[row].append(int(col))
        assert ids == [rows[name][i] for i in index], name


def test_make_log_dataset_derives_what_the_ingest_wrote(train):
    from pipelines.config import parse_config
    from sparse_io.numeric_maps import derived_features
    from transforms.tfdata.log_dataset import make_log_dataset

    _, log, _, out = train
    derived = derived_features(Schema.load(str(out)))
    assert sorted(f.name for f in derived) == ["age_bucket", "age_log", "price_mm", "price_q", "price_z"]
    dataset = make_log_dataset(str(log), "csv", 1000, schema=parse_config(CONFIG).schema,
                               derived=derived, output="ragged", label=False,
                               features=["row", "price_z", "price_mm", "age_log", "age_bucket", "price_q"])
    got = {name: [] for name in ("row", "price_z", "price_mm", "age_log", "age_bucket", "price_q")}
    for batch in dataset:
        assert "price" not in batch and "age" not in batch  # read for the derived features, not asked for
        for name in got:
            value = batch[name]
            got[name] += value.to_list() if isinstance(value, tf.RaggedTensor) else value.numpy().tolist()
    rows = _rows(out)
    by_row = {r: i for i, r in enumerate(rows["row"])}
    index = [by_row[r] for r in got["row"]]
    for name in ("price_z", "price_mm", "age_log"):
        expected = np.array([np.nan if rows[name][i] is None else rows[name][i] for i in index], np.float32)
        np.testing.assert_array_equal(np.array(got[name], np.float32), expected, err_msg=name)
    for name in ("age_bucket", "price_q"):
        assert got[name] == [rows[name][i] for i in index], name
