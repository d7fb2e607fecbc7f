"""The shard-format registry: one object per format knows its suffix, writer, reader, row count and check."""

import json
import os

import pyarrow as pa
import pytest
from tfdata_data import SCHEMA, random_rows

from sparse_io import formats, shard_formats
from sparse_io.errors import CorruptFileError
from sparse_io.manifest import commit_directory, verify_directory
from sparse_io.shard_files import open_shard
from sparse_io.shard_formats import ShardFormat, shard_format, shard_format_for
from sparse_io.shard_set import read_shard, write_shard

ROWS = random_rows(40, seed=5)


def _table(rows=ROWS) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA.arrow_schema())


@pytest.mark.parametrize("name", ["parquet", "tfrecord", "arrow"])
def test_each_format_writes_reads_counts_and_checks_its_shards(tmp_path, name):
    fmt = shard_format(name)
    path = str(tmp_path / f"part-00000-of-00001{fmt.suffix}")
    assert fmt.write(path, [_table()], SCHEMA, row_group_size=16) == len(ROWS)
    assert fmt.read(path, SCHEMA).to_pylist() == _table().to_pylist()
    assert fmt.count_rows(path) == fmt.check(path) == len(ROWS)
    assert fmt.columnar == (name != "tfrecord")
    if fmt.columnar:
        with open_shard(path) as shard:
            assert sum(shard.unit_rows) == len(ROWS) and shard.unit_rows[0] == 16
    with open(path, "r+b") as f:  # cut inside the data
        f.truncate(os.path.getsize(path) - 7)
    with pytest.raises(CorruptFileError, match=os.path.basename(path)):
        fmt.check(path)


def test_a_flipped_bit_in_a_tfrecord_frame_fails_its_check(tmp_path):
    fmt = shard_format("tfrecord")
    path = str(tmp_path / "part-00000-of-00001.tfrecord")
    fmt.write(path, [_table()], SCHEMA, row_group_size=16)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        fmt.check(path)


def test_the_names_suffixes_and_codecs_are_the_objects():
    objects = shard_formats.SHARD_FORMAT_OBJECTS
    assert formats.SHARD_FORMATS == ("parquet", "tfrecord", "arrow") == tuple(f.name for f in objects)
    assert formats.SHARD_SUFFIXES == {".parquet": "parquet", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord",
                                      ".arrow": "arrow"}
    assert formats.SHARD_CODECS == {"parquet": ("zstd", "lz4", "snappy", "none"), "tfrecord": (),
                                    "arrow": ("none", "lz4", "zstd")}
    assert formats.DEFAULT_SHARD_CODEC == {"parquet": "zstd", "tfrecord": None, "arrow": "none"}
    assert shard_format_for("x/part-00000-of-00001.tfrecords") is shard_format("tfrecord")
    assert shard_format_for("x/schema.json") is None


def test_an_unknown_format_is_an_error_never_parquet():
    with pytest.raises(ValueError, match="shard format must be one of parquet, tfrecord, arrow, got 'feather'"):
        shard_format("feather")
    with pytest.raises(ValueError, match="not a .parquet, .tfrecord or .arrow shard"):
        read_shard("out/part-00000-of-00001.feather")
    with pytest.raises(ValueError, match="shard_format must be one of"):
        open_shard("out/part-00000-of-00001.tfrecord")


class _JsonRows(ShardFormat):
    """A toy format: one JSON object a line. Written here only to show that a format is one object."""

    name, title, suffix, read_suffixes = "jsonrows", "JSON rows", ".jsonrows", (".jsonrows",)
    unit = None

    def write(self, path, batches, schema, *, row_group_size, compression=None, output_root=None):
        rows = [row for batch in batches for row in batch.to_pylist()]
        with open(path, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        return len(rows)

    def read(self, path, schema=None):
        with open(path) as f:
            return pa.Table.from_pylist([json.loads(line) for line in f], schema=schema.arrow_schema())

    def count_rows(self, path):
        with open(path) as f:
            return sum(1 for _ in f)

    def check(self, path):
        return self.read(path, SCHEMA).num_rows


def test_a_new_format_is_one_new_object(tmp_path, monkeypatch):
    toy = _JsonRows()
    monkeypatch.setattr(shard_formats, "SHARD_FORMAT_OBJECTS", (*shard_formats.SHARD_FORMAT_OBJECTS, toy))
    out = tmp_path / "out"
    out.mkdir()
    path = str(out / "part-00000-of-00001.jsonrows")
    assert write_shard(path, [_table()], SCHEMA, row_group_size=10) == len(ROWS)
    assert read_shard(path, SCHEMA).to_pylist() == _table().to_pylist()
    SCHEMA.save(str(out))
    # The manifest counts its rows with the object's own count (not as a Parquet footer).
    manifest = commit_directory(str(out))
    assert [(e["path"], e["rows"]) for e in manifest["shards"]] == [("part-00000-of-00001.jsonrows", len(ROWS))]
    verify_directory(str(out), "checksums")
