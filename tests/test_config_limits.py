"""Bounds and names checked when a config loads: nothing out of range reaches the run."""

import pytest

from pipelines.config import ConfigError, load_config, parse_config
from pipelines.config_limits import DEFAULT_MAX_LINE_BYTES, MAX_HASH_BUCKETS, MAX_NUM_SHARDS
from pipelines.ingest import run_ingest


def _with_name(name):
    inp = {"format": "jsonl", "schema": [{"name": "label", "kind": "label"}, {"name": name, "dtype": "string"}]}
    return {"input": inp, "features": {name: {"vocabulary": {}}}}


@pytest.mark.parametrize("name", ["../../x", "/abs/x", ".x", "a b", "sub/x", "x\ty"])
def test_a_feature_name_outside_the_documented_characters_is_refused_naming_it(name):
    with pytest.raises(ConfigError) as info:
        parse_config(_with_name(name))
    message = str(info.value)
    assert "'input.schema[1]'" in message and repr(name) in message and "A-Z, a-z, 0-9" in message
    assert "\n" not in message


def test_documented_feature_names_load():
    config = parse_config(_with_name("item.id-v2_x"))
    assert [p.name for p in config.vocabularies] == ["item.id-v2_x"]


@pytest.mark.parametrize("name", ["../../x", "/ABS"])
def test_a_vocabulary_feature_named_like_a_path_writes_nothing_outside_the_output(tmp_path, name):
    # The reproduction: the name became vocab/<name>.txt, outside --output, and the run exited 0.
    if name.startswith("/"):
        name = str(tmp_path / "escaped")
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "ev.jsonl").write_text("".join(f'{{"label": {i % 2}, "{name}": ["t{i % 3}"]}}\n' for i in range(20)))
    import yaml

    (work / "c.yaml").write_text(yaml.safe_dump(_with_name(name) | {"output": {"num_shards": 1}}))
    with pytest.raises(ConfigError, match="feature name"):
        run_ingest(["--input", str(work / "ev.jsonl"), "--config", str(work / "c.yaml"),
                    "--output", str(work / "out"), "--no_report"])
    assert sorted(p.name for p in tmp_path.rglob("*.txt")) == []


@pytest.mark.parametrize(
    "data, key, words",
    [
        ({"output": {"num_shards": MAX_NUM_SHARDS + 1}}, "output.num_shards", f"at most {MAX_NUM_SHARDS:,}"),
        ({"features": {"C*": {"hash_buckets": 10**20}}}, "features.C*.hash_buckets", "at most 2^62"),
        ({"features": {"C*": {"hash_buckets": MAX_HASH_BUCKETS + 1}}}, "features.C*.hash_buckets", "2^62"),
        (
            {"input": {"format": "jsonl", "schema": [{"name": "x", "hash_buckets": 2**63}]}},
            "input.schema[0].hash_buckets",
            "2^62",
        ),
        ({"features": {"C*": {"hash_buckets": 1e6}}}, "features.C*.hash_buckets", "must be int"),
        ({"features": {"C*": {"hash_buckets": "1e20"}}}, "features.C*.hash_buckets", "must be int"),
        ({"features": {"C*": {"hash_buckets": True}}}, "features.C*.hash_buckets", "must be int"),
        ({"output": {"num_shards": 4.0}}, "output.num_shards", "must be int"),
        ({"input": {"batch_size": "8192"}}, "input.batch_size", "must be int"),
        ({"input": {"max_line_bytes": 0}}, "input.max_line_bytes", "positive"),
        ({"input": {"max_line_bytes": 2**31}}, "input.max_line_bytes", "at most"),
        ({"input": {"max_line_bytes": 1.5e7}}, "input.max_line_bytes", "must be int"),
    ],
)
def test_out_of_range_or_non_integer_counts_are_refused_naming_the_key(data, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    message = str(info.value)
    assert f"'{key}'" in message and words in message and "\n" not in message


def test_bounds_themselves_load_and_max_line_bytes_defaults_to_16_mib():
    config = parse_config(
        {"features": {"C*": {"hash_buckets": 2**62}}, "output": {"num_shards": MAX_NUM_SHARDS},
         "input": {"max_line_bytes": 1 << 20}}
    )
    assert config.plan("C1").hash_buckets == 2**62 and config.output.num_shards == 10_000
    assert config.max_line_bytes == 1 << 20
    hashed = {"features": {"C*": {"hash_buckets": 10}}}
    assert parse_config(hashed).max_line_bytes == DEFAULT_MAX_LINE_BYTES == 16 << 20


def test_a_yaml_exponent_gets_a_hint(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("features:\n  C*: {hash_buckets: 1e6}\n")
    with pytest.raises(ConfigError, match="1000000") as info:
        load_config(str(path))
    assert "'features.C*.hash_buckets'" in str(info.value)
