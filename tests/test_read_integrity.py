"""Every read path checks what the format can check, the manifest whatever the path looks like, and pins its files."""

import json
import os
import shutil
import struct

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import tensorflow as tf

from sparse_io import FeatureSpec, Schema, iter_shards, shard_name
from sparse_io.arrow_shards import ArrowShard
from sparse_io.errors import CorruptFileError
from sparse_io.manifest import MANIFEST_FILE, ManifestError, commit_directory
from sparse_io.shard_set import write_shard
from transforms.tfdata.dataset import make_dataset

SCHEMA = Schema([
    FeatureSpec("label", "label", "int64"),
    FeatureSpec("price", "dense", "float64"),
    FeatureSpec("items", "sparse", "int64"),
])
ROWS = 40
PRICES = [90.0 + r / 100 for r in range(ROWS)]  # 90.00, 90.01, ... 90.39, each a distinct 8-byte pattern


def _batch(rows, base=0):
    return pa.RecordBatch.from_pylist(
        [{"label": base + r, "price": PRICES[(base + r) % ROWS], "items": [base + r, r % 5]} for r in range(rows)],
        schema=SCHEMA.arrow_schema(),
    )


def _output(directory, suffix=".parquet", counts=(ROWS // 2, ROWS // 2), unit=10, compression=None, base=0):
    os.makedirs(directory, exist_ok=True)
    start = base
    for i, n in enumerate(counts):
        write_shard(os.path.join(str(directory), shard_name(i, len(counts), suffix)), [_batch(n, start)], SCHEMA,
                    row_group_size=unit, compression=compression)
        start += n
    SCHEMA.save(str(directory))
    commit_directory(str(directory))
    return str(directory)


def _labels(path, **kwargs):
    ds = make_dataset(path, 8, shuffle=False, output="ragged", **kwargs)
    return sorted(int(v) for _, label in ds for v in label.numpy())


def _prices(path, **kwargs):
    ds = make_dataset(path, 8, shuffle=False, output="ragged", **kwargs)
    return [float(v) for features, _ in ds for v in features["price"].numpy()]


# --- item 1: Parquet page checksums on the training reader's path ----------------------------------------------


def _flip_value(path, value: float) -> None:
    """Flips the lowest mantissa bit of `value`'s 8 bytes where they lie in the (uncompressed) file."""
    data = bytearray(open(path, "rb").read())
    at = data.find(struct.pack("<d", value))
    assert at >= 0
    data[at] ^= 1
    with open(path, "wb") as f:
        f.write(data)


def test_make_dataset_refuses_a_flipped_bit_in_a_parquet_page_naming_the_file(tmp_path):
    out = _output(tmp_path / "out", compression="none")
    shard = os.path.join(out, shard_name(0, 2, ".parquet"))
    _flip_value(shard, PRICES[3])  # same size: "sizes" cannot see it, the page checksum can
    with pytest.raises(tf.errors.OpError, match=r"CorruptFileError.*part-00000-of-00002\.parquet.*row group"):
        _prices(out)


def test_the_parquet_shard_reader_names_the_file_row_group_and_column(tmp_path):
    from sparse_io.shard_files import open_shard

    out = _output(tmp_path / "out", compression="none")
    shard = os.path.join(out, shard_name(1, 2, ".parquet"))
    _flip_value(shard, PRICES[25])  # row 5 of shard 1: its first row group
    with open_shard(shard) as f:
        f.read_unit(0, ["label", "items"])  # the damaged column is not read: nothing to report
        with pytest.raises(CorruptFileError, match=r"part-00001-of-00002\.parquet: row group 0.*price"):
            f.read_unit(0, ["price"])


# --- item 4: a directory is a directory, whatever its name --------------------------------------------------


@pytest.mark.parametrize("name", ["out[1]", "out*", "out?"])
def test_a_directory_named_like_a_glob_gets_the_whole_directory_check(tmp_path, name):
    out = _output(tmp_path / name)
    os.remove(os.path.join(out, shard_name(1, 2, ".parquet")))
    for level in ("sizes", "checksums"):
        with pytest.raises(ManifestError, match="part-00001-of-00002.parquet is missing"):
            list(iter_shards(out, verify=level))
        with pytest.raises(ManifestError, match="part-00001-of-00002.parquet is missing"):
            make_dataset(out, 8, verify=level)


def _same_size_edit(path, old: bytes, new: bytes) -> None:
    assert len(old) == len(new)
    data = open(path, "rb").read()
    assert old in data
    with open(path, "wb") as f:
        f.write(data.replace(old, new, 1))


@pytest.mark.parametrize("name", ["schema.json", "stats.json"])
def test_a_glob_or_list_of_shards_checks_the_files_beside_them(tmp_path, name):
    out = _output(tmp_path / "out")
    if name == "stats.json":  # add a stats.json and commit again
        with open(os.path.join(out, "stats.json"), "w") as f:
            json.dump({"capacities": {"8": {"items": {"max": 16}}}}, f)
        os.remove(os.path.join(out, MANIFEST_FILE))
        commit_directory(out)
    if name == "schema.json":
        _same_size_edit(os.path.join(out, name), b'"price"', b'"prize"')
    else:
        _same_size_edit(os.path.join(out, name), b"16", b"61")
    shards = [os.path.join(out, shard_name(i, 2, ".parquet")) for i in range(2)]
    for path in (os.path.join(out, "part-*.parquet"), shards):
        with pytest.raises(ManifestError, match=f"{name} has checksum"):
            list(iter_shards(path, verify="checksums"))
        with pytest.raises(ManifestError, match=f"{name} has checksum"):
            make_dataset(path, 8, verify="checksums")
    # A different size is seen at "sizes".
    with open(os.path.join(out, name), "a") as f:
        f.write(" ")
    for path in (os.path.join(out, "part-*.parquet"), shards):
        with pytest.raises(ManifestError, match=f"{name} has"):
            list(iter_shards(path))
        with pytest.raises(ManifestError, match=f"{name} has"):
            make_dataset(path, 8)


def test_a_glob_of_intact_shards_reads_at_every_level(tmp_path):
    out = _output(tmp_path / "out")
    for level in ("sizes", "checksums", "none"):
        assert _labels(os.path.join(out, "part-*.parquet"), verify=level) == list(range(ROWS))
        assert sum(t.num_rows for t in iter_shards(os.path.join(out, "part-*.parquet"), verify=level)) == ROWS
