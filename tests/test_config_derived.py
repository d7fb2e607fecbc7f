"""Derived features in `features:` (bucketize, scale): what parses, and one named line for each misuse."""

import pytest

from pipelines.config import ConfigError, parse_config
from pipelines.config_derived import reuse_derived
from pipelines.ingest import main as ingest_main
from sparse_io.numeric_maps import BucketizeSpec, DerivedFeature, ScaleSpec
from sparse_io.schema import Schema

SCHEMA = [
    {"name": "clicked", "kind": "label", "dtype": "int64"},
    {"name": "user", "dtype": "string"},
    {"name": "city", "kind": "dense", "dtype": "string"},
    {"name": "age", "kind": "dense", "dtype": "int64"},
    {"name": "price", "kind": "dense", "dtype": "float32"},
]


def _config(features: dict):
    return parse_config({"input": {"format": "csv", "schema": SCHEMA},
                         "features": {"user": {"hash_buckets": 10}, **features}})


def test_derived_entries_parse_into_plans_beside_the_id_plans():
    config = _config({
        "age_bucket": {"source": "age", "bucketize": {"boundaries": [18, 25, 35, 50]}},
        "age_q": {"source": "age", "bucketize": {"quantiles": 10}},
        "price_z": {"source": "price", "scale": "z_score"},
        "price_log": {"source": "price", "scale": "log1p"},
    })
    assert [p.name for p in config.features] == ["user"]
    by_name = {p.name: p for p in config.derived}
    assert by_name["age_bucket"].boundaries == (18.0, 25.0, 35.0, 50.0)
    assert by_name["age_bucket"].fixed() == DerivedFeature("age_bucket", "age", BucketizeSpec((18, 25, 35, 50)))
    assert by_name["age_q"].quantiles == 10 and by_name["age_q"].needs_analysis
    assert by_name["price_z"].needs_analysis and not by_name["price_log"].needs_analysis


@pytest.mark.parametrize("entry, key, fragment", [
    ({"x": {"source": "nope", "scale": "z_score"}}, "features.x.source", "not a column"),
    ({"x": {"source": "city", "bucketize": {"quantiles": 4}}}, "features.x.bucketize", "string column"),
    ({"x": {"source": "city", "scale": "log1p"}}, "features.x.scale", "string column"),
    ({"x": {"source": "user", "scale": "log1p"}}, "features.x.source", "dense"),
    ({"x": {"source": "age", "scale": "z_score", "bucketize": {"quantiles": 4}}}, "features.x", "not both"),
    ({"x": {"source": "age"}}, "features.x", "needs bucketize"),
    ({"x": {"source": "age", "bucketize": {"boundaries": [30, 20]}}}, "features.x.bucketize.boundaries", "sorted"),
    ({"x": {"source": "age", "bucketize": {"boundaries": [1, 1]}}}, "features.x.bucketize.boundaries", "sorted"),
    ({"x": {"source": "age", "bucketize": {"boundaries": []}}}, "features.x.bucketize.boundaries", "non-empty"),
    ({"x": {"source": "age", "bucketize": {"quantiles": 1}}}, "features.x.bucketize.quantiles", "from 2"),
    ({"x": {"source": "age", "bucketize": {"quantiles": 2.5}}}, "features.x.bucketize.quantiles", "from 2"),
    ({"x": {"source": "age", "bucketize": {"quantiles": 4, "boundaries": [1]}}}, "features.x.bucketize", "or"),
    ({"x": {"source": "age", "bucketize": {"quantile": 4}}}, "features.x.bucketize", "quantiles"),
    ({"x": {"source": "age", "scale": "zscore"}}, "features.x.scale", "z_score"),
    ({"x": {"source": "age", "scale": "log1p", "buckets": 3}}, "features.x.buckets", "unknown key"),
    ({"age": {"source": "price", "scale": "log1p"}}, "features.age", "a column of the schema"),
    ({"a/b": {"source": "price", "scale": "log1p"}}, "features.a/b", ""),
])
def test_each_misuse_is_one_line_naming_the_key(entry, key, fragment):
    with pytest.raises(ConfigError) as info:
        _config(entry)
    message = str(info.value)
    assert message.startswith(f"config key '{key}':") and fragment in message and "\n" not in message


def test_schema_cannot_claim_a_transform():
    with pytest.raises(ConfigError, match=r"input.schema\[0\].transform"):
        parse_config({"input": {"format": "csv", "schema": [
            {"name": "p", "kind": "dense", "dtype": "float32", "transform": {"source": "x", "scale": "log1p"}}]}})


def test_derived_features_refused_in_a_history_ingest():
    with pytest.raises(ConfigError, match="config key 'features.x': derived features"):
        parse_config({"input": {"format": "csv", "schema": [
            {"name": "u", "kind": "dense", "dtype": "int64"}, {"name": "i", "kind": "dense", "dtype": "int64"},
            {"name": "t", "kind": "dense", "dtype": "int64"}]},
            "histories": {"key": "u", "item": "i", "time": "t"},
            "features": {"i": {"hash_buckets": 10}, "x": {"source": "t", "scale": "log1p"}}})


def test_cli_exits_2_with_the_key(tmp_path, capsys):
    log = tmp_path / "log.csv"
    log.write_text("clicked,age\n1,20\n")
    config = tmp_path / "c.yaml"
    config.write_text("input: {format: csv, schema: [{name: clicked, kind: label, dtype: int64}, "
                      "{name: age, kind: dense, dtype: int64}]}\n"
                      "features: {age_q: {source: age, bucketize: {quantiles: 1}}}\n")
    with pytest.raises(SystemExit) as info:
        ingest_main(["--input", str(log), "--config", str(config), "--output", str(tmp_path / "out")])
    assert info.value.code == 2
    assert "features.age_q.bucketize.quantiles" in capsys.readouterr().err


def test_reuse_takes_the_other_ingests_parameters_and_refuses_another_mapping():
    plans = _config({"age_q": {"source": "age", "bucketize": {"quantiles": 4}},
                     "price_z": {"source": "price", "scale": "z_score"}}).derived
    made = [DerivedFeature("age_q", "age", BucketizeSpec((20.0, 30.0, 40.0)), 4),
            DerivedFeature("price_z", "price", ScaleSpec("z_score", mean=3.0, std=2.0))]
    source = Schema([f.feature_spec() for f in made])
    reused = reuse_derived(plans, source)
    assert [p.fixed() for p in reused] == made and not any(p.needs_analysis for p in reused)
    other = Schema([DerivedFeature("age_q", "age", ScaleSpec("log1p")).feature_spec(), made[1].feature_spec()])
    with pytest.raises(ValueError, match="'age_q' was made there from 'age' by log1p"):
        reuse_derived(plans, other)
    with pytest.raises(ValueError, match="'price_z' is not in"):
        reuse_derived(plans, Schema([made[0].feature_spec()]))
