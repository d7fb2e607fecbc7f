"""pipelines.convert: an output in another shard format, same rows and files, committed; refuses what it must."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tfdata_data import SCHEMA, random_rows, write_parquet_shards, write_tfrecord_shards

from pipelines.convert import convert_output
from pipelines.errors import UsageError
from sparse_io import ManifestError, iter_shards
from sparse_io.manifest import commit_directory, read_manifest
from transforms import make_dataset

ROWS = random_rows(130, seed=12)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("convert") / "parquet")
    write_parquet_shards(directory, ROWS, 3, row_group_size=25)
    with open(os.path.join(directory, "stats.json"), "w") as f:
        json.dump({"format_version": 1, "num_rows": len(ROWS), "features": {}}, f)
    vocab = os.path.join(directory, "vocab")
    os.makedirs(vocab)
    with open(os.path.join(vocab, "user.txt"), "w") as f:
        f.write("a\nb\n")
    commit_directory(directory, config={"output": {"format": "parquet"}}, inputs=[{"path": "logs/day_0.tsv"}],
                     totals={"rows_in": 140, "rows_out": len(ROWS), "bad": 10})
    return directory


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.convert", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def _rows(directory: str) -> list[dict]:
    return [row for table in iter_shards(directory, schema=SCHEMA) for row in table.to_pylist()]


def _batches(directory: str) -> list[list[np.ndarray]]:
    ds = make_dataset(directory, 16, seed=3, output="ragged")
    return [[np.asarray(t) for t in tf.nest.flatten(e, expand_composites=True)] for e in ds]


def test_the_documented_command_makes_an_arrow_cache_that_reads_the_same_batches(parquet_dir, tmp_path):
    cache = str(tmp_path / "cache" / "train")
    done = _cli(parquet_dir, cache, "--format", "arrow")
    assert done.returncode == 0, done.stderr
    assert f"3/3 shards, {len(ROWS)} rows: {parquet_dir} -> {cache} (arrow)" in done.stdout
    assert sorted(f for f in os.listdir(cache) if f.startswith("part-")) == [
        f"part-0000{i}-of-00003.arrow" for i in range(3)
    ]
    for name in ("schema.json", "stats.json", os.path.join("vocab", "user.txt")):
        assert open(os.path.join(cache, name), "rb").read() == open(os.path.join(parquet_dir, name), "rb").read()
    source, converted = read_manifest(parquet_dir), read_manifest(cache)
    for key in ("config", "inputs", "totals"):
        assert converted[key] == source[key]
    assert [e["rows"] for e in converted["shards"]] == [e["rows"] for e in source["shards"]]
    assert _rows(cache) == _rows(parquet_dir)
    for a, b in zip(_batches(parquet_dir), _batches(cache), strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("there, back", [("arrow", "parquet"), ("tfrecord", "arrow"), ("arrow", "tfrecord")])
def test_converting_there_and_back_keeps_every_row(parquet_dir, tmp_path, there, back):
    middle, last = str(tmp_path / there), str(tmp_path / f"{there}-{back}")
    convert_output(parquet_dir, middle, there, row_group_size=40)
    convert_output(middle, last, back)
    assert _rows(last) == _rows(middle) == _rows(parquet_dir)


def test_tfrecord_shards_written_elsewhere_convert_too(tmp_path):
    source = str(tmp_path / "tfrecord")
    write_tfrecord_shards(source, ROWS, 2)
    convert_output(source, str(tmp_path / "arrow"), "arrow", compression="lz4")
    assert _rows(str(tmp_path / "arrow")) == _rows(source)


def test_a_destination_with_files_is_refused_and_left_as_it_was(parquet_dir, tmp_path):
    destination = tmp_path / "busy"
    destination.mkdir()
    (destination / "notes.txt").write_text("mine")
    done = _cli(parquet_dir, str(destination), "--format", "arrow")
    assert done.returncode == 2
    assert "exists and is not empty" in done.stderr
    assert os.listdir(destination) == ["notes.txt"]
    with pytest.raises(UsageError, match="same directory"):
        convert_output(parquet_dir, parquet_dir + "/", "arrow")


def test_an_uncommitted_or_damaged_source_is_refused_before_anything_is_written(parquet_dir, tmp_path):
    bare = tmp_path / "bare"
    write_parquet_shards(str(bare), ROWS, 2, row_group_size=25)
    os.remove(bare / "_MANIFEST.json")
    with pytest.raises(ManifestError):
        convert_output(str(bare), str(tmp_path / "out"), "arrow")
    assert not os.path.exists(tmp_path / "out")
    done = _cli(str(bare), str(tmp_path / "out2"), "--format", "arrow")
    assert done.returncode == 2 and "pipelines.convert: error:" in done.stderr


def test_bad_flags_exit_2_naming_them(parquet_dir, tmp_path):
    done = _cli(parquet_dir, str(tmp_path / "x"), "--format", "arrow", "--compression", "snappy")
    assert done.returncode == 2 and "--compression: arrow compression must be one of none, lz4, zstd" in done.stderr
    done = _cli(parquet_dir, str(tmp_path / "x"), "--format", "feather")
    assert done.returncode == 2 and "invalid choice: 'feather'" in done.stderr
    assert not os.path.exists(tmp_path / "x")
