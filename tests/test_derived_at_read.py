"""Derived features at read (`output.derived: at_read`, the default for Parquet and Arrow): the shards hold the
sources, schema.json the parameters, and every reader gives what an ingest that stores them wrote.

The same log is ingested with `derived: stored` and with the default; the stored shards are the reference for
the values (tests/test_ingest_derived.py checks those against numpy), and numpy's own bucket counts for the
quantile feature's stats.
"""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
import yaml
from test_ingest_derived import BOUNDARIES, CONFIG, _write_log

from pipelines.config import ConfigError, parse_config
from pipelines.convert import convert_output
from pipelines.ingest import run_ingest
from sparse_io import iter_shards
from sparse_io.schema import FeatureSpec, SchemaError
from transforms.tfdata import make_dataset

AT_READ = ["price_mm", "price_q", "price_z"]  # parameters from the data
STORED = ["age_bucket", "age_log"]  # given boundaries, log1p: applied as the batches stream by


def _ingest(tmp, log, name, fmt, derived=None):
    output = {"format": fmt, "num_shards": 2, "shuffle": False, "row_group_size": 1000}
    if derived is not None:
        output["derived"] = derived
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "output": output}))
    out = tmp / name
    run_ingest(["--input", str(log), "--config", str(config), "--output", str(out), "--no_report",
                "--progress_seconds", "0"])
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("at_read")
    log = tmp / "train.csv"
    values = _write_log(log, 6000, seed=1)
    made = {(fmt, mode): _ingest(tmp, log, f"{fmt}_{mode}", fmt, None if mode == "default" else mode)
            for fmt in ("parquet", "arrow") for mode in ("default", "stored")}
    return tmp, values, made


def _schema(out) -> dict:
    return {f["name"]: f for f in json.loads((out / "schema.json").read_text())["features"]}


def _stats(out) -> dict:
    return json.loads((out / "stats.json").read_text())


def test_the_shards_hold_the_sources_and_schema_json_the_derived_features(outputs):
    _, _, made = outputs
    for fmt in ("parquet", "arrow"):
        default, stored = made[fmt, "default"], made[fmt, "stored"]
        shard = next(default.glob(f"part-*.{fmt}"))
        names = pq.read_schema(shard).names if fmt == "parquet" else pa.ipc.open_file(str(shard)).schema.names
        assert set(AT_READ).isdisjoint(names) and {"age", "price", *STORED} <= set(names)
        schema = _schema(default)
        assert [n for n, f in schema.items() if f.get("at_read")] == AT_READ
        assert schema["price_q"]["transform"] == _schema(stored)["price_q"]["transform"]
        assert not any(f.get("at_read") for f in _schema(stored).values())


def _elements(ds) -> list[list[np.ndarray]]:
    return [[np.asarray(t) for t in tf.nest.flatten(e, expand_composites=True)] for e in ds]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("output", ["coo", "ragged"])
def test_make_dataset_gives_what_the_stored_shards_hold(outputs, fmt, output):
    _, _, made = outputs
    features = ["row", "price", *AT_READ, *STORED]
    args = dict(batch_size=512, features=features, shuffle=False, output=output)
    if output == "coo":
        args["capacities"] = "stats"
    derived = make_dataset(str(made[fmt, "default"]), **args)
    stored = make_dataset(str(made[fmt, "stored"]), **args)
    if fmt == "arrow" and output == "coo":  # the op reads stored columns only: the Python reader derives
        assert derived._sparseflow_parquet_source.reader.startswith("python")
        assert stored._sparseflow_parquet_source.reader == "op"
    assert derived.element_spec == stored.element_spec
    got, want = _elements(derived), _elements(stored)
    assert len(got) == len(want) == 12
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_a_feature_read_alone_reads_its_source(outputs):
    _, values, made = outputs
    ds = make_dataset(str(made["parquet", "default"]), 6000, features=["price_q"], label=False, shuffle=False,
                      output="ragged")
    ids = next(iter(ds))["price_q"].to_list()
    boundaries = np.float32(_schema(made["parquet", "default"])["price_q"]["transform"]["bucketize"]["boundaries"])
    price = values["price"]
    assert ids == [[] if np.isnan(v) else [int(np.searchsorted(boundaries, np.float32(v), "right"))] for v in price]


def test_iter_shards_gives_the_derived_columns(outputs):
    _, _, made = outputs
    derived = pa.concat_tables(iter_shards(str(made["parquet", "default"])))
    stored = pa.concat_tables(iter_shards(str(made["parquet", "stored"])))
    for name in AT_READ:
        assert derived.column(name).to_pylist() == stored.column(name).to_pylist(), name


def test_a_schema_selecting_a_derived_feature_keeps_its_source(outputs):
    from sparse_io.schema import Schema
    from sparse_io.shard_set import read_shard

    out = outputs[2]["parquet", "default"]
    schema, shard = Schema.load(str(out)), str(next(out.glob("part-*.parquet")))
    assert read_shard(shard, schema.select(["price", "price_q"])).column_names == ["price", "price_q"]
    with pytest.raises(ValueError, match=r"derived at read from \['price'\]"):
        read_shard(shard, schema.select(["price_q"]))


def test_stats_of_a_scaled_feature_are_its_sources_mapped(outputs):
    _, values, made = outputs
    got = _stats(made["parquet", "default"])["dense"]
    want = _stats(made["parquet", "stored"])["dense"]
    price = values["price"][~np.isnan(values["price"])]
    for name in ("price_z", "price_mm"):
        assert got[name]["derived_from"] == "price"
        assert (got[name]["rows"], got[name]["missing"]) == (want[name]["rows"], want[name]["missing"])
        for key in ("min", "max"):
            assert got[name][key] == want[name][key], (name, key)  # the same float32 value
        assert got[name]["quantiles"] == pytest.approx(want[name]["quantiles"], rel=1e-6, abs=1e-7)
        assert sum(got[name]["histogram"]["counts"]) == sum(want[name]["histogram"]["counts"])
    z = (price - price.mean()) / price.std()
    assert got["price_z"]["mean"] == pytest.approx(z.mean(), abs=1e-9)
    assert got["price_mm"]["min"] == 0.0 and got["price_mm"]["max"] == 1.0


def test_stats_of_a_quantile_feature_count_its_buckets_within_the_sketchs_error(outputs):
    _, values, made = outputs
    out = made["parquet", "default"]
    got, want = _stats(out)["features"]["price_q"], _stats(made["parquet", "stored"])["features"]["price_q"]
    for key in ("rows", "empty_rows", "ids_per_row", "capacity"):
        assert got[key] == want[key], key  # from the source's exact missing count
    price = values["price"][~np.isnan(values["price"])]
    boundaries = np.float32(_schema(out)["price_q"]["transform"]["bucketize"]["boundaries"])
    exact = np.bincount(np.searchsorted(boundaries, price.astype(np.float32), "right"), minlength=len(boundaries) + 1)
    counted = dict(map(tuple, got["top_ids"]))
    assert set(counted) == set(np.flatnonzero(exact).tolist()) and sum(counted.values()) == price.size
    # 6,000 values compact the sketch once (k = 4,096): rank error (1 + 2) / 4096 per side.
    bound = 2 * 3 / 4096 * price.size
    assert max(abs(counted[i] - int(exact[i])) for i in counted) <= bound
    assert got["top_ids_exact"] is False and got["distinct_ids_exact"] is False


def test_convert_keeps_them_derived_at_read_and_refuses_tfrecord(outputs):
    tmp, _, made = outputs
    source = made["parquet", "default"]
    with pytest.raises(ValueError, match=r"derived at read .* convert to parquet or arrow"):
        convert_output(str(source), str(tmp / "as_tfrecord"), "tfrecord")
    assert not (tmp / "as_tfrecord").exists()
    converted = tmp / "as_arrow"
    convert_output(str(source), str(converted), "arrow")
    args = dict(batch_size=1000, features=AT_READ, shuffle=False, output="ragged")
    for a, b in zip(_elements(make_dataset(str(converted), **args)), _elements(make_dataset(str(source), **args))):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_tfrecord_shards_store_every_derived_feature(tmp_path):
    log = tmp_path / "log.csv"
    _write_log(log, 500, seed=3)
    out = _ingest(tmp_path, log, "tfr", "tfrecord")
    assert not any(f.get("at_read") for f in _schema(out).values())
    ds = make_dataset(str(out), 500, features=AT_READ, shuffle=False, output="ragged", label=False)
    assert next(iter(ds))["price_q"].shape[0] == 500


@pytest.mark.parametrize("output, message", [
    ({"format": "tfrecord", "derived": "at_read"}, "at_read needs Parquet or Arrow"),
    ({"derived": "later"}, "must be at_read or stored"),
])
def test_the_output_derived_key_is_checked(output, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({**CONFIG, "output": output})


def test_at_read_is_written_by_the_ingest_only():
    with pytest.raises(SchemaError, match="at_read is true only for a derived feature"):
        FeatureSpec("x", "dense", "float32", at_read=True)
    schema = [*CONFIG["input"]["schema"], {"name": "extra", "kind": "dense", "dtype": "float32", "at_read": True}]
    with pytest.raises(ConfigError, match="at_read"):
        parse_config({**CONFIG, "input": {**CONFIG["input"], "schema": schema}})


def test_boundaries_given_in_the_config_are_stored(outputs):
    _, values, made = outputs
    table = pq.read_table(next(made["parquet", "default"].glob("part-*.parquet")), columns=["age", "age_bucket"])
    for age, ids in zip(table.column("age").to_pylist(), table.column("age_bucket").to_pylist()):
        assert ids == ([] if age is None else [int(np.searchsorted(np.float32(BOUNDARIES), np.float32(age), "right"))])
