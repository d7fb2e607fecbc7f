"""Log and shard format names: one list each, and every entry point takes exactly those."""

from __future__ import annotations

import argparse

import pytest

import sparse_io
from pipelines.config import ConfigError, parse_config
from pipelines.ingest import planned_outputs
from pipelines.options import IngestOptions
from sparse_io import read_file
from sparse_io.formats import (
    LOG_FORMATS,
    SHARD_FORMATS,
    shard_format_of,
)
from sparse_io.schema import FeatureSpec, Schema, criteo_schema
from sparse_io.shard_set import shard_paths
from transforms.beam import ReadLogs, WriteShards
from transforms.testing.create_logs import encode_logs

# Written out here rather than imported: the point is that the lists do not drift.
EXPECTED_LOG_FORMATS = ("criteo", "csv", "tsv", "jsonl", "parquet")
EXPECTED_SHARD_FORMATS = ("parquet", "tfrecord", "arrow")
SCHEMA = Schema([FeatureSpec("label", kind="label", dtype="float32"), FeatureSpec("C1", kind="sparse")])
SCHEMA_SPECS = [f.to_dict() for f in SCHEMA]
CRITEO = criteo_schema()
HASHED = {"C*": {"hash_buckets": 10}}


def test_the_lists():
    assert LOG_FORMATS == EXPECTED_LOG_FORMATS
    assert SHARD_FORMATS == EXPECTED_SHARD_FORMATS
    assert sparse_io.LOG_FORMATS is LOG_FORMATS and sparse_io.FORMATS is LOG_FORMATS
    assert sparse_io.SHARD_FORMATS is SHARD_FORMATS


def _format_choices() -> tuple:
    parser = argparse.ArgumentParser()
    IngestOptions._add_argparse_args(parser)
    (action,) = [a for a in parser._actions if "--format" in a.option_strings]
    return tuple(action.choices)


def test_the_format_flag_offers_every_log_format_and_only_those():
    assert _format_choices() == EXPECTED_LOG_FORMATS


@pytest.mark.parametrize("log_format", EXPECTED_LOG_FORMATS)
def test_every_log_format_is_taken_by_read_logs_config_and_create_logs(log_format):
    schema = CRITEO if log_format == "criteo" else SCHEMA
    ReadLogs("logs/*", log_format, schema)  # constructing checks the format
    config = parse_config({"input": {"format": log_format, "schema": SCHEMA_SPECS}, "features": HASHED})
    assert config.log_format == config.format == log_format
    lines = [{"label": 1.0, "C1": "a"}] if log_format == "parquet" else ["1\ta"]
    assert encode_logs(lines, log_format, SCHEMA)


@pytest.mark.parametrize("bad", ["xml", "TSV", "tfrecord"])
def test_an_unknown_log_format_is_refused_everywhere(bad):
    with pytest.raises(ValueError, match=f"format '{bad}' is not one of"):
        ReadLogs("logs/*", bad, SCHEMA)
    with pytest.raises(ConfigError, match="input.format"):
        parse_config({"input": {"format": bad, "schema": SCHEMA_SPECS}})
    with pytest.raises(ValueError, match=f"format '{bad}' is not one of"):
        read_file("log.tsv", bad, SCHEMA)
    with pytest.raises(ValueError, match="is not one of"):
        encode_logs(["x"], bad, SCHEMA)


@pytest.mark.parametrize(
    "shard_format, suffix", [("parquet", ".parquet"), ("tfrecord", ".tfrecord"), ("arrow", ".arrow")]
)
def test_every_shard_format_is_written_with_its_suffix(shard_format, suffix):
    config = parse_config({"features": HASHED, "output": {"format": shard_format, "num_shards": 2}})
    assert config.output.shard_format == config.output.format == shard_format
    shards = [n for n in planned_outputs(config, report=False) if n.startswith("part-")]
    assert shards == [f"part-00000-of-00002{suffix}", f"part-00001-of-00002{suffix}"]
    WriteShards("out", shard_format, 2, False, 0)


@pytest.mark.parametrize("bad", ["csv", "feather", "Parquet"])
def test_an_unknown_shard_format_is_refused(bad):
    with pytest.raises(ConfigError, match="output.format"):
        parse_config({"output": {"format": bad}})
    with pytest.raises(ValueError, match="format must be one of"):
        WriteShards("out", bad, 2, False, 0)


@pytest.mark.parametrize("path, expected", [
    ("out/part-00000-of-00002.parquet", "parquet"),
    ("gs://bucket/out/part-00001-of-00002.tfrecord", "tfrecord"),
    ("part-00000-of-00001.tfrecords", "tfrecord"),
    ("out/part-00003-of-00004.arrow", "arrow"),
    ("out/schema.json", None),
    ("out/part-00000-of-00001.parquet.tmp", None),
    ("logs/day_0.tsv", None),
    ("out", None),
])
def test_shard_format_of(path, expected):
    assert shard_format_of(path) == expected


def test_a_directory_lists_both_tfrecord_spellings_as_shards(tmp_path):
    for name in ("part-00000-of-00003.tfrecord", "part-00001-of-00003.tfrecords", "part-00002-of-00003.parquet",
                 "schema.json", "_MANIFEST.json", ".part-00003.parquet"):
        (tmp_path / name).write_bytes(b"")
    names = [p.rsplit("/", 1)[1] for p in shard_paths(str(tmp_path))]
    assert names == ["part-00000-of-00003.tfrecord", "part-00001-of-00003.tfrecords", "part-00002-of-00003.parquet"]
