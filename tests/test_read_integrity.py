"""Every read path checks what the format can check, the manifest whatever the path looks like, and pins its files."""

import json
import os
import struct

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


@pytest.mark.parametrize("mtime_set_back", [False, True], ids=["written", "written, mtime set back"])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_shard_written_in_place_between_two_iterators_is_refused_by_the_second(tmp_path, suffix, mtime_set_back):
    """The Python reader keeps shards open and units decoded for the dataset's life: its next iterator checks them."""
    out = _output(tmp_path / "out", suffix=suffix, compression="none")
    ds = make_dataset(out, 8, shuffle=False, output="ragged")
    assert ds._sparseflow_parquet_source.reader.startswith("python")
    assert [float(v) for features, _ in ds for v in features["price"].numpy()] == PRICES
    shard = os.path.join(out, shard_name(0, 2, suffix))
    before = os.stat(shard)
    _flip_value(shard, PRICES[3])
    if mtime_set_back:  # the pin (size, mtime, inode) holds: the checksums must be checked again
        os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
        expected = r"part-00000-of-00002\.(parquet: row group 0|arrow: record batch 0).*checksum"
    else:
        expected = r"part-00000-of-00002\.(parquet|arrow): replaced or changed since it was verified"
    with pytest.raises(tf.errors.OpError, match=expected):
        for _ in ds:
            pass


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


# --- item 1: Arrow record-batch checksums cover the batch's metadata ------------------------------------------


def _replace_all(path, old: bytes, new: bytes) -> int:
    data = open(path, "rb").read()
    count = data.count(old)
    with open(path, "wb") as f:
        f.write(data.replace(old, new))
    return count


def _shorten_last_batch(path, rows: int, to: int) -> None:
    """A same-size edit of the last record batch's length (and its columns' lengths) from `rows` to `to`."""
    assert _replace_all(path, struct.pack("<q", rows), struct.pack("<q", to)) >= 2


def test_a_same_size_edit_of_the_last_arrow_batch_length_is_refused_at_sizes(tmp_path):
    out = _output(tmp_path / "out", suffix=".arrow", counts=(21, 19), unit=10)
    shard = os.path.join(out, shard_name(1, 2, ".arrow"))
    _shorten_last_batch(shard, 9, 5)  # shard 1: batches of 10 and 9 rows
    with pytest.raises(CorruptFileError, match=r"part-00001-of-00002\.arrow"):
        list(iter_shards(out))
    with pytest.raises((CorruptFileError, tf.errors.OpError), match=r"part-00001-of-00002\.arrow"):
        _labels(out)
    with pytest.raises(CorruptFileError, match="record batch 1"):
        with ArrowShard(shard) as f:
            f.read_unit(1)


def test_an_edited_null_count_of_an_arrow_batch_is_refused(tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    rows = [{"label": r, "price": None if r in (3, 4) else 1.5, "items": [r]} for r in range(10)]
    write_shard(os.path.join(out, shard_name(0, 1, ".arrow")),
                [pa.RecordBatch.from_pylist(rows, schema=SCHEMA.arrow_schema())], SCHEMA, row_group_size=10)
    shard = os.path.join(out, shard_name(0, 1, ".arrow"))
    # price's field node: 10 rows, 2 nulls; with 0 nulls the validity bitmap would be ignored.
    assert _replace_all(shard, struct.pack("<qq", 10, 2), struct.pack("<qq", 10, 0)) == 1
    with pytest.raises(CorruptFileError, match="record batch 0"):
        with ArrowShard(shard) as f:
            f.read_unit(0)


def _legacy_arrow_shard(path, batches):
    """A shard as written before batch checksums covered the metadata: the CRC-32C of the buffers alone."""
    import google_crc32c

    with ipc.new_file(path, SCHEMA.arrow_schema(), metadata={b"sparseflow.record_batch_rows": b"10"}) as writer:
        for batch in batches:
            batch = ipc.read_record_batch(batch.serialize(), batch.schema)  # its buffers as a reader gets them
            crc = 0
            for column in batch.columns:
                for buffer in column.buffers():
                    if buffer is not None and buffer.size:
                        crc = google_crc32c.extend(crc, buffer)
            writer.write_batch(batch, custom_metadata={b"sparseflow.crc32c": f"{crc:08x}".encode()})


def test_shards_written_before_metadata_checksums_still_read_and_a_length_edit_is_caught_by_the_manifest(tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    shard = os.path.join(out, shard_name(0, 1, ".arrow"))
    _legacy_arrow_shard(shard, [_batch(10, 100), _batch(9, 110)])  # no 9 among the values
    SCHEMA.save(out)
    commit_directory(out)
    assert _labels(out) == list(range(100, 119))
    assert [t.num_rows for t in iter_shards(out)] == [19]
    _shorten_last_batch(shard, 9, 5)
    with pytest.raises((ManifestError, CorruptFileError, tf.errors.OpError), match=r"part-00000-of-00001\.arrow"):
        list(iter_shards(out))
    with pytest.raises((ManifestError, CorruptFileError, tf.errors.OpError), match=r"part-00000-of-00001\.arrow"):
        _labels(out)


def test_arrow_shards_round_trip_with_metadata_checksums(tmp_path):
    out = _output(tmp_path / "out", suffix=".arrow", counts=(21, 19), unit=10)
    assert _labels(out) == list(range(ROWS))
    assert _prices(out, verify="checksums") == PRICES
    with ArrowShard(os.path.join(out, shard_name(0, 2, ".arrow"))) as f:
        assert f.unit_rows == [10, 10, 1]
        assert f.read_unit(2).column("label").to_pylist() == [20]


# --- item 2: a dataset pins what it verified ---------------------------------------------------------------


def _overwrite(out, suffix, counts=(ROWS // 2, ROWS // 2), unit=10):
    """Another output written into the same directory, as `--overwrite` does: new files renamed over the old."""
    os.remove(os.path.join(out, MANIFEST_FILE))
    _output(out, suffix=suffix, counts=counts, unit=unit, base=1000)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_dataset_made_before_an_overwrite_refuses_the_new_files_naming_one(tmp_path, suffix):
    out = _output(tmp_path / "out", suffix=suffix)
    dataset = make_dataset(out, 8, shuffle=False, output="ragged")
    _overwrite(out, suffix)
    with pytest.raises(tf.errors.OpError, match=r"part-0000[01]-of-00002\S* .*changed since it was verified"):
        [label.numpy() for _, label in dataset]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_dataset_iterated_across_an_overwrite_never_yields_rows_of_the_other_output(tmp_path, suffix):
    counts = (4,) * 10  # more shards than the reader keeps open: it opens them again
    out = _output(tmp_path / "out", suffix=suffix, counts=counts, unit=2)
    dataset = make_dataset(out, 4, shuffle=False, output="ragged", num_epochs=3)
    seen = []
    try:
        for i, (_, label) in enumerate(dataset):
            seen.extend(int(v) for v in label.numpy())
            if i == 2:
                _overwrite(out, suffix, counts, unit=2)
    except tf.errors.OpError as e:
        assert "changed since it was verified" in e.message
    assert len(seen) >= 12 and all(v < ROWS for v in seen)


def test_iter_shards_refuses_a_shard_replaced_after_the_check(tmp_path):
    out = _output(tmp_path / "out")
    tables = iter_shards(out)
    first = next(tables)
    assert first.column("label").to_pylist() == list(range(ROWS // 2))
    _overwrite(out, ".parquet")
    with pytest.raises(ManifestError, match=r"part-00001-of-00002\.parquet: replaced or changed"):
        next(tables)


def test_a_shard_holding_other_rows_than_its_manifest_lists_is_refused_at_sizes(tmp_path):
    out = _output(tmp_path / "out")
    manifest_path = os.path.join(out, MANIFEST_FILE)
    with open(manifest_path) as f:
        manifest = json.load(f)
    manifest["shards"][1]["rows"] -= 1
    manifest["totals"]["rows_out"] -= 1
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    with pytest.raises(CorruptFileError, match=r"part-00001-of-00002\.parquet: holds 20 rows, its manifest lists 19"):
        list(iter_shards(out))
    with pytest.raises(CorruptFileError, match=r"part-00001-of-00002\.parquet: holds 20 rows"):
        make_dataset(out, 8)


def test_a_column_name_in_a_parquet_footer_that_no_longer_decodes_is_a_corrupt_file(tmp_path):
    from sparse_io.shard_files import open_shard

    out = _output(tmp_path / "out")
    shard = os.path.join(out, shard_name(0, 2, ".parquet"))
    data = bytearray(open(shard, "rb").read())
    footer = len(data) - 8 - struct.unpack("<i", data[-8:-4])[0]
    at = data.index(b"items", footer)  # the column's name in the footer's schema
    data[at + 1] = 0xF4  # a UTF-8 lead byte with nothing after it
    with open(shard, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptFileError, match=r"part-00000-of-00002\.parquet: damaged Parquet file"):
        list(iter_shards(out, verify="none"))
    with pytest.raises(CorruptFileError, match=r"part-00000-of-00002\.parquet: damaged Parquet file"):
        open_shard(shard)


def test_a_damaged_shard_met_while_training_exits_2_with_one_line_naming_it(capsys):
    from pipelines.errors import cli_errors

    message = ("{{function_node __wrapped__IteratorGetNext}} Error in user-defined function passed to MapDataset:1 "
               "transformation with iterator: Iterator::Root::Map: CorruptFileError: /d/part-00000-of-00002.parquet: "
               "row group 0, column 'price': damaged Parquet page: CRC mismatch\nTraceback (most recent call last):\n")
    with pytest.raises(SystemExit) as caught:
        with cli_errors("pipelines.train"):
            raise tf.errors.InvalidArgumentError(None, None, message)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err == ("pipelines.train: error: /d/part-00000-of-00002.parquet: row group 0, column 'price': "
                   "damaged Parquet page: CRC mismatch\n")
    changed = "Iterator::Root::Map: ChangedFileError: /d/part-00001-of-00002.arrow: replaced or changed since it was"
    with pytest.raises(SystemExit) as caught:
        with cli_errors("pipelines.train"):
            raise tf.errors.UnknownError(None, None, changed + " verified\n  File x")
    assert caught.value.code == 2
    assert capsys.readouterr().err == f"pipelines.train: error: {changed.split('ChangedFileError: ')[1]} verified\n"


@pytest.mark.parametrize("view", ["os", "tensorflow", "beam"])
def test_a_pin_refuses_a_same_size_rewrite_and_a_removal_whichever_way_it_reads_the_file(tmp_path, view):
    from sparse_io.pins import ChangedFileError, ShardPin, _identity

    path = tmp_path / "part-00000-of-00001.parquet"
    path.write_bytes(b"12345678")
    pin = ShardPin(str(path), _identity(str(path), view), None, view)
    pin.check()  # the same file: nothing to say
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))  # a rewrite of the same size, later
    with pytest.raises(ChangedFileError, match="part-00000-of-00001.parquet: replaced or changed"):
        pin.check()
    path.unlink()
    with pytest.raises(ChangedFileError, match="part-00000-of-00001.parquet: removed"):
        pin.check()


def test_a_column_name_in_an_arrow_footer_that_no_longer_decodes_is_a_corrupt_file(tmp_path):
    out = _output(tmp_path / "out", suffix=".arrow")
    shard = os.path.join(out, shard_name(0, 2, ".arrow"))
    data = bytearray(open(shard, "rb").read())
    at = data.rindex(b"price")  # the name in the file footer's schema, read when the shard is opened
    data[at + 1] = 0xE8  # a UTF-8 lead byte followed by no continuation
    with open(shard, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptFileError, match=r"part-00000-of-00002\.arrow: damaged Arrow file"):
        ArrowShard(shard)
    with pytest.raises((CorruptFileError, tf.errors.OpError), match=r"part-00000-of-00002\.arrow"):
        make_dataset(out, 8, verify="none")
