"""The ingest config: examples load, every invalid key is named, loaders are safe."""

import json
import pathlib

import pytest

from pipelines.config import ConfigError, load_config, parse_config

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "pipelines" / "configs"


def test_shipped_criteo_config_hashes_c_features_and_looks_up_c9():
    config = load_config(str(CONFIGS / "criteo.yaml"))
    hashed = {p.name for p in config.hashed}
    assert hashed == {f"C{i}" for i in range(1, 27)} - {"C9"}
    assert [p.name for p in config.vocabularies] == ["C9"]
    assert config.output.num_shards == 4 and config.batch_sizes == (1024, 4096)


def test_shipped_history_config_groups_by_user():
    config = load_config(str(CONFIGS / "user_history.yaml"))
    assert (config.histories.key, config.histories.item, config.histories.weight) == (
        "user_id", "item_id", "rating")
    assert config.plan("item_id").hash_buckets == 100000


@pytest.mark.parametrize(
    "data, key",
    [
        ({"outptu": {}}, "outptu"),
        ({"output": {"num_shards": 0}}, "output.num_shards"),
        ({"output": {"num_shards": "4"}}, "output.num_shards"),
        ({"output": {"format": "csv"}}, "output.format"),
        ({"output": {"write_threads": 0}}, "output.write_threads"),
        ({"output": {"write_threads": 1.5}}, "output.write_threads"),
        ({"output": {"compression": "gzip"}}, "output.compression"),
        ({"output": {"format": "tfrecord", "compression": "zstd"}}, "output.compression"),
        ({"input": {"format": "xml"}}, "input.format"),
        ({"input": {"format": "jsonl"}}, "input.schema"),
        ({"input": {"schema": [{"name": "x", "kind": "sparse", "dtype": "int8"}]}}, "input.schema[0]"),
        ({"features": {"Z*": {"hash_buckets": 10}}}, "features.Z*"),
        ({"features": {"C1": {"hash_bucket": 10}}}, "features.C1.hash_bucket"),
        ({"features": {"C1": {"hash_buckets": 10, "vocabulary": {}}}}, "features.C1"),
        ({"features": {"C2*": {"hash_buckets": 10}}}, "features.C1"),
        ({"features": {"C1": {"vocabulary": {"top_k": -1}}}}, "features.C1.vocabulary.top_k"),
        ({"stats": {"batch_sizes": [0]}}, "stats.batch_sizes[0]"),
        ({"error_budget": 2}, "error_budget"),
        ({"histories": {"key": "label", "item": "C1"}}, "histories.time"),
        ({"histories": {"key": "nope", "item": "C1", "time": "I1"}}, "histories.key"),
        ({"input": {"list_separator": "||"}}, "input.list_separator"),
    ],
)
def test_invalid_config_names_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert f"'{key}'" in str(err.value)


def test_exact_feature_entry_overrides_glob():
    config = parse_config({"features": {"C1": {"hash_buckets": 7}, "C*": {"hash_buckets": 99}}})
    assert config.plan("C1").hash_buckets == 7 and config.plan("C2").hash_buckets == 99


def test_json_config_and_format_override(tmp_path):
    path = tmp_path / "c.json"
    config = {"input": {"schema": "criteo"}, "features": {"C*": {"hash_buckets": 9}}, "output": {"format": "tfrecord"}}
    path.write_text(json.dumps(config))
    config = load_config(str(path), format_override="csv")
    assert config.format == "csv" and config.output.format == "tfrecord"


def test_yaml_object_tags_are_rejected(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("output: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(path))


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize("key, value", [("id_space", "hash:sha256:00"), ("oov_ids", 0), ("vocabulary_size", 10)])
def test_keys_only_the_ingest_writes_are_refused_in_a_config_naming_the_key(key, value):
    schema = [{"name": "clicked", "kind": "label"}, {"name": "user", "kind": "sparse", "dtype": "string", key: value}]
    with pytest.raises(ConfigError) as err:
        parse_config({"input": {"format": "csv", "schema": schema}, "features": {"user": {"hash_buckets": 8}}})
    assert str(err.value).startswith(f"config key 'input.schema[1].{key}': is written by the ingest")
    assert "\n" not in str(err.value)


def test_a_config_with_an_ingest_written_key_exits_2_with_one_line(tmp_path):
    import os
    import subprocess
    import sys

    config = {"input": {"format": "csv", "schema": [{"name": "clicked", "kind": "label"},
                                                    {"name": "item", "kind": "sparse", "oov_ids": 3}]}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    (tmp_path / "log.csv").write_text("clicked,item\n1,4\n")
    env = dict(os.environ, PYTHONPATH=str(CONFIGS.parents[1]), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "pipelines.ingest", "--input", str(tmp_path / "log.csv"),
                           "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        "config key 'input.schema[1].oov_ids': is written by the ingest into schema.json (how values became ids), "
        "not a config setting")
