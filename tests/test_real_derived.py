"""Derived features on a real log: MovieLens-1M ratings, the timestamp bucketized by quantiles, age by its codes.

The sample is read here with Python's csv module; boundaries, ids and scaled values are checked against numpy.
Skipped when ../shared/data does not hold the sample.
"""

import csv

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import SHARED_DATA

from pipelines.ingest import run_ingest
from sparse_io import iter_shards
from sparse_io.schema import Schema

MOVIELENS = SHARED_DATA / "movielens1m_deepctr_sample.csv"
AGE_CODES = [18, 25, 35, 45, 50, 56]  # MovieLens-1M's age groups: 1, 18, 25, 35, 45, 50, 56
CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "user_id", "kind": "dense", "dtype": "int64"},
        {"name": "movie_id", "kind": "sparse", "dtype": "int64"},
        {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
        {"name": "timestamp", "kind": "dense", "dtype": "int64"},
        {"name": "genres", "kind": "sparse", "dtype": "string"},
        {"name": "age", "kind": "dense", "dtype": "int64"},
    ]},
    "features": {
        "genres": {"vocabulary": {}},
        "ts_q5": {"source": "timestamp", "bucketize": {"quantiles": 5}},
        "ts_z": {"source": "timestamp", "scale": "z_score"},
        "age_group": {"source": "age", "bucketize": {"boundaries": AGE_CODES}},
    },
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
}


def test_movielens_timestamp_quantiles_and_age_groups(tmp_path):
    if not MOVIELENS.exists():
        pytest.skip(f"real sample {MOVIELENS.name} not present at {SHARED_DATA}")
    with open(MOVIELENS, newline="", encoding="utf-8") as f:
        raw = list(csv.DictReader(f))
    config = tmp_path / "ml.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "out"
    run_ingest(["--input", str(MOVIELENS), "--config", str(config), "--output", str(out), "--no_report"])
    # As the library reads the shards: the quantile buckets and z-scores are derived at read (schema.json's
    # at_read), the shards holding their sources.
    table = pa.concat_tables(iter_shards(str(out))).to_pylist()
    assert {"ts_q5", "ts_z"}.isdisjoint(pq.read_schema(next(out.glob("part-*.parquet"))).names)
    assert len(table) == len(raw) == 200
    # Rows are keyed by (user, movie, timestamp): the ingest promises no row order.
    by_key = {(r["user_id"], r["movie_id"][0], r["timestamp"]): r for r in table}
    timestamps = np.array([int(r["timestamp"]) for r in raw], np.int64)

    derived = {f.name: f.transform for f in Schema.load(str(out)) if f.transform}
    boundaries = np.array(derived["ts_q5"]["bucketize"]["boundaries"])
    assert len(boundaries) == 4 and derived["ts_q5"]["bucketize"]["quantiles"] == 5
    # An int64 source is compared in float32, as keras Discretization compares it: ranks are taken there too.
    ordered = np.sort(timestamps.astype(np.float32))
    for q, b in zip((0.2, 0.4, 0.6, 0.8), boundaries.astype(np.float32)):
        below, upto = np.searchsorted(ordered, b, "left") / 200, np.searchsorted(ordered, b, "right") / 200
        assert max(0.0, below - q, q - upto) <= 0.01
    mean, std = timestamps.mean(), timestamps.std(ddof=0)
    assert derived["ts_z"]["mean"] == pytest.approx(mean, rel=1e-12)
    assert derived["ts_z"]["std"] == pytest.approx(std, rel=1e-9)
    for r in raw:
        row = by_key[(int(r["user_id"]), int(r["movie_id"]), int(r["timestamp"]))]
        ts, age = np.float32(int(r["timestamp"])), np.float32(int(r["age"]))
        assert row["ts_q5"] == [int(np.searchsorted(boundaries.astype(np.float32), ts, side="right"))]
        assert row["age_group"] == [int(np.searchsorted(np.float32(AGE_CODES), age, side="right"))]
        assert row["ts_z"] == pytest.approx((int(r["timestamp"]) - mean) / std, rel=1e-6, abs=1e-6)
    groups = {row["age_group"][0] for row in table}
    assert groups <= set(range(len(AGE_CODES) + 1)) and len(groups) > 3
