"""HashIds in a pipeline: every id bucketed exactly as keras.layers.Hashing does, rows kept."""

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from sparse_io import FeatureSpec, Schema
from transforms.beam import HashIds
from transforms.testing import has_schema, test_pipeline

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _keras_rows(rows, num_bins, salt):
    layer = keras.layers.Hashing(num_bins=num_bins, salt=salt)
    out = []
    for row in rows:
        if row is None:
            out.append(None)
        elif not row:
            out.append([])
        else:
            out.append([int(v) for v in np.asarray(layer(tf.constant(row)))])
    return out


def test_pipeline_buckets_equal_keras_for_strings_ints_and_flat_columns():
    rng = np.random.default_rng(5)
    alphabet = list("abcé日0123456789")
    batches = []
    for n in (7, 0, 12):
        c1 = [
            None
            if rng.random() < 0.2
            else ["".join(rng.choice(alphabet, rng.integers(0, 30))) for _ in range(rng.integers(0, 4))]
            for _ in range(n)
        ]
        item = [[int(v) for v in rng.integers(-(2**40), 2**40, rng.integers(0, 3))] for _ in range(n)]
        user = [f"u{int(v)}" for v in rng.integers(0, 50, n)]
        batches.append(
            pa.record_batch(
                {
                    "C1": pa.array(c1, pa.list_(pa.string())),
                    "item": pa.array(item, pa.list_(pa.int64())),
                    "user": pa.array(user, pa.string()),
                    "label": pa.array(rng.integers(0, 2, n), pa.int64()),
                }
            )
        )
    bins = {"C1": 1000, "item": 2**20, "user": 97}
    salt = (3, 14)
    expected = []
    for b in batches:
        c1 = _keras_rows(b.column("C1").to_pylist(), 1000, salt)
        item = _keras_rows(b.column("item").to_pylist(), 2**20, salt)
        user = [r[0] for r in _keras_rows([[u] for u in b.column("user").to_pylist()], 97, salt)]
        expected += list(zip(c1, item, user, b.column("label").to_pylist()))
    with test_pipeline() as p:
        hashed = p | beam.Create(batches) | HashIds(["C1", "item", "user"], bins, salt=salt)
        rows = hashed | beam.FlatMap(
            lambda b: zip(*(b.column(c).to_pylist() for c in ("C1", "item", "user", "label")))
        )
        assert_that(rows, equal_to(expected), label="rows")
        types = {"C1": "list<int64>", "item": "list<int64>", "user": "int64", "label": "int64"}
        assert_that(hashed, has_schema(types), label="types")


def test_output_schema_and_argument_errors():
    schema = Schema([FeatureSpec("C1", "sparse", "string"), FeatureSpec("label", "label", "int64")])
    out = HashIds("C1", 1 << 10).output_schema(schema)
    assert out["C1"].dtype == "int64" and out["C1"].hash_buckets == 1024
    with pytest.raises(ValueError, match="feature 'C1': num_bins"):
        HashIds("C1", 0)
    with pytest.raises(ValueError, match=r"no entry for feature\(s\) \['C2'\]"):
        HashIds(["C1", "C2"], {"C1": 5})
    with pytest.raises(ValueError, match="salt"):
        HashIds("C1", 5, salt="x")
    with pytest.raises(ValueError, match="column names"):
        HashIds([], 5)


def test_missing_column_fails_the_pipeline_naming_it():
    with pytest.raises(Exception, match="feature 'C9' is not a column"):
        with test_pipeline() as p:
            _ = p | beam.Create([pa.record_batch({"C1": pa.array([["a"]])})]) | HashIds("C9", 10)
