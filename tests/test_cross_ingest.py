"""Crosses at ingest: config refusals, the shards' ids against keras HashedCrossing, overflow in stats.json."""

from __future__ import annotations

import itertools
import re

import pytest

from pipelines.config import ConfigError, parse_config
from transforms.testing import ingest_in_memory

SCHEMA = [
    {"name": "clicked", "kind": "label", "dtype": "int64"},
    {"name": "user", "dtype": "string"},
    {"name": "occupation", "kind": "dense", "dtype": "int64"},
    {"name": "price", "kind": "dense", "dtype": "float32"},
    {"name": "tags", "dtype": "string"},
]


def _config(features, **more):
    return {"input": {"format": "csv", "schema": SCHEMA}, "features": {"user": {"hash_buckets": 100},
                                                                       "tags": {"hash_buckets": 100}, **features},
            "output": {"format": "parquet", "num_shards": 1, "shuffle": False}, **more}


@pytest.mark.parametrize("entry, key, message", [
    ({"cross": ["user", "price"], "hash_buckets": 10}, "features.x.cross[1]", "dense float32 column"),
    ({"cross": ["user", "nope"], "hash_buckets": 10}, "features.x.cross[1]", "not a column"),
    ({"cross": ["user"], "hash_buckets": 10}, "features.x.cross", "at least two"),
    ({"cross": ["user", "clicked"], "hash_buckets": 10}, "features.x.cross[1]", "the label"),
    ({"cross": ["user", "user"], "hash_buckets": 10}, "features.x.cross[1]", "listed twice"),
    ({"cross": ["user", "tags"]}, "features.x.hash_buckets", "is required"),
    ({"cross": ["user", "tags"], "hash_buckets": 0}, "features.x.hash_buckets", "positive"),
    ({"cross": ["user", "tags"], "hash_buckets": 9, "max_per_row": -1}, "features.x.max_per_row", "positive"),
    ({"cross": ["user", "tags"], "hash_buckets": 9, "salt": 1}, "features.x.salt", "unknown key"),
])
def test_bad_crosses_are_refused_with_one_line(entry, key, message):
    with pytest.raises(ConfigError, match=rf"'{re.escape(key)}'.*{message}") as e:
        parse_config(_config({"x": entry}))
    assert "\n" not in str(e.value)


def test_a_cross_named_like_a_column_or_given_in_the_schema_is_refused():
    with pytest.raises(ConfigError, match="'features.price'.*already a column"):
        parse_config(_config({"price": {"cross": ["user", "tags"], "hash_buckets": 9}}))
    schema = [*SCHEMA, {"name": "x", "cross": ["user", "tags"], "hash_buckets": 9}]
    with pytest.raises(ConfigError, match=r"'input.schema\[5\].cross'.*written by the ingest"):
        parse_config({"input": {"format": "csv", "schema": schema}, "features": {"user": {"hash_buckets": 1},
                                                                                "tags": {"hash_buckets": 1}}})


def _keras_cross(num_bins, *columns):
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    layer = keras.layers.HashedCrossing(num_bins=num_bins)
    return [int(v) for v in layer(tuple(tf.constant(c) for c in columns)).numpy()]


LINES = ["clicked,user,occupation,price,tags"] + [
    f"{i % 2},u{i % 7},{i % 5 if i != 3 else ''},{i / 4},{'|'.join(f't{j}' for j in range(i % 4))}"
    for i in range(24)
]


def test_ingested_crosses_are_keras_hashed_crossing_of_the_raw_values():
    config = _config({"user_x_occ": {"cross": ["user", "occupation"], "hash_buckets": 1000},
                      "user_x_tags": {"cross": ["user", "tags"], "hash_buckets": 50, "max_per_row": 2}})
    out = ingest_in_memory(LINES, config)
    rows = {(r["clicked"], r["price"]): r for r in out.rows}
    raw = [line.split(",") for line in LINES[1:]]
    with_occupation = [c for c in raw if c[2]]
    expected = _keras_cross(1000, [c[1] for c in with_occupation], [int(c[2]) for c in with_occupation])
    for cells, ids in zip(with_occupation, expected):
        assert rows[(int(cells[0]), float(cells[3]))]["user_x_occ"] == [ids]
    missing = next(c for c in raw if not c[2])
    assert rows[(int(missing[0]), float(missing[3]))]["user_x_occ"] == []  # no occupation, no cross
    dropped = rows_cut = 0
    for cells in raw:
        tags = cells[4].split("|") if cells[4] else []
        want = [_keras_cross(50, [cells[1]], [t])[0] for t in tags][:2]
        assert rows[(int(cells[0]), float(cells[3]))]["user_x_tags"] == want
        dropped += max(0, len(tags) - 2)
        rows_cut += len(tags) > 2
    spec = out.schema["user_x_occ"]
    assert (spec.kind, spec.dtype, spec.hash_buckets, spec.cross, spec.cross_max_per_row) == (
        "sparse", "int64", 1000, ("user", "occupation"), 256)
    assert spec.id_space.startswith("cross:")
    assert out.stats["features"]["user_x_tags"]["cross_overflow"] == {"rows": rows_cut, "dropped": dropped,
                                                                       "max_per_row": 2}
    assert out.stats["features"]["user_x_occ"]["cross_overflow"] == {"rows": 0, "dropped": 0, "max_per_row": 256}
    assert sum(1 for _ in itertools.chain(raw)) == len(out.rows)


def test_vocab_from_takes_the_training_crosses_and_refuses_other_sources(tmp_path):
    from pipelines.errors import UsageError

    train = _config({"user_x_occ": {"cross": ["user", "occupation"], "hash_buckets": 1000, "max_per_row": 8}})
    ingest_in_memory(LINES, train, output_dir=str(tmp_path / "train"))
    # The held-out config asks other buckets: the training data's id space wins, as for hashed features.
    held = _config({"user_x_occ": {"cross": ["user", "occupation"], "hash_buckets": 5}},
                   vocab_from=str(tmp_path / "train"))
    out = ingest_in_memory(LINES[:3], held, output_dir=str(tmp_path / "held"))
    spec = out.schema["user_x_occ"]
    assert (spec.hash_buckets, spec.cross_max_per_row) == (1000, 8)
    cells = [line.split(",") for line in LINES[1:3]]
    expected = _keras_cross(1000, [c[1] for c in cells], [int(c[2]) for c in cells])
    assert sorted(r["user_x_occ"] for r in out.rows) == sorted([e] for e in expected)
    other = _config({"user_x_occ": {"cross": ["occupation", "user"], "hash_buckets": 1000}},
                    vocab_from=str(tmp_path / "train"))
    with pytest.raises(UsageError, match=r"cross 'user_x_occ' crosses \['user', 'occupation'\] there"):
        ingest_in_memory(LINES, other)


def test_no_batch_is_pickled_on_the_way_through_crosses_and_derived_features(pickled_batches):
    config = _config({"user_x_occ": {"cross": ["user", "occupation"], "hash_buckets": 1000},
                      "price_q": {"source": "price", "bucketize": {"quantiles": 4}},
                      "price_z": {"source": "price", "scale": "z_score"}})
    out = ingest_in_memory(LINES, config)
    assert len(out.rows) == len(LINES) - 1
    assert pickled_batches == []
