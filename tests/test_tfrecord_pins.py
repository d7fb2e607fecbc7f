"""A TFRecord dataset pins the shards it verified: a shard rewritten between epochs is an error naming it."""

import json
import os

import pyarrow as pa
import pytest
import tensorflow as tf

from sparse_io import FeatureSpec, Schema, shard_name
from sparse_io.errors import CorruptFileError
from sparse_io.manifest import MANIFEST_FILE, commit_directory
from sparse_io.shard_set import write_shard
from transforms import distribute
from transforms.tfdata.dataset import make_dataset

SCHEMA = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("items", "sparse", "int64")])
ROWS = 20  # per shard


def _write(path, base):
    """ROWS Examples labelled base, base+1, ...; any base below 108 gives the same byte count (1-byte varints)."""
    rows = [{"label": base + r, "items": [base + r, r % 5]} for r in range(ROWS)]
    write_shard(path, [pa.RecordBatch.from_pylist(rows, schema=SCHEMA.arrow_schema())], SCHEMA, row_group_size=ROWS)


def _output(directory, files=2):
    os.makedirs(directory)
    for i in range(files):
        _write(os.path.join(directory, shard_name(i, files, ".tfrecord")), i * ROWS)
    SCHEMA.save(directory)
    commit_directory(directory)
    return directory


def _rewrite_in_place(path, base):
    """Other valid records of the same size written over `path` in place (same inode), as a careless copy does."""
    other = path + ".other.tfrecord"
    _write(other, base)
    data = open(other, "rb").read()
    os.remove(other)
    assert len(data) == os.path.getsize(path) and data != open(path, "rb").read()
    with open(path, "r+b") as f:
        f.write(data)


def _replace(path, base):
    """Another output's shard renamed over `path` (a new inode), as an --overwrite ingest does."""
    _write(path + ".new.tfrecord", base)
    os.replace(path + ".new.tfrecord", path)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("change", [_rewrite_in_place, _replace])
def test_a_shard_rewritten_between_epochs_is_an_error_naming_it_and_none_of_its_rows_are_read(tmp_path, shuffle,
                                                                                                  change):
    out = _output(str(tmp_path / "out"))
    ds = make_dataset(out, 5, shuffle=shuffle, seed=1, num_epochs=2, output="ragged")
    it = iter(ds)
    first = [int(v) for _ in range(2 * ROWS // 5) for v in next(it)[1].numpy()]
    assert sorted(first) == list(range(2 * ROWS))  # the first epoch, whole
    change(os.path.join(out, shard_name(1, 2, ".tfrecord")), 60)  # labels 60..79: none of the output's
    seen = []
    with pytest.raises(tf.errors.OpError, match=r"ChangedFileError: \S*part-00001-of-00002\.tfrecord: .*changed since "
                                                r"it was verified"):
        for _, label in it:
            seen += [int(v) for v in label.numpy()]
    assert all(v < 2 * ROWS for v in seen), seen


def test_an_intact_output_reads_every_epoch_and_the_manifest_rows_are_checked_when_pinned(tmp_path):
    out = _output(str(tmp_path / "out"))
    ds = make_dataset(out, 7, shuffle=True, seed=2, num_epochs=3, output="ragged")
    assert sorted(int(v) for _, label in ds for v in label.numpy()) == sorted(list(range(2 * ROWS)) * 3)
    # A shard that holds other rows than its manifest lists: refused when the dataset is made.
    shard = os.path.join(out, shard_name(0, 2, ".tfrecord"))
    os.remove(os.path.join(out, MANIFEST_FILE))
    rows = [{"label": r, "items": [r]} for r in range(ROWS - 1)]
    write_shard(shard, [pa.RecordBatch.from_pylist(rows, schema=SCHEMA.arrow_schema())], SCHEMA, row_group_size=8)
    commit_directory(out)
    manifest = json.load(open(os.path.join(out, MANIFEST_FILE)))
    manifest["shards"][0]["rows"] = ROWS
    manifest["totals"]["rows_out"] += 1
    json.dump(manifest, open(os.path.join(out, MANIFEST_FILE), "w"))
    with pytest.raises(CorruptFileError, match=r"part-00000-of-00002\.tfrecord: holds 19 rows, its manifest lists 20"):
        make_dataset(out, 7)


def test_every_nth_record_mode_is_pinned_too(tmp_path):
    out = _output(str(tmp_path / "out"), files=1)
    ds = make_dataset(out, 4, shuffle=False, num_epochs=2, num_shards=2, index=1, output="ragged")
    it = iter(ds)
    assert [int(v) for _ in range(3) for v in next(it)[1].numpy()][:10] == list(range(1, ROWS, 2))
    _rewrite_in_place(os.path.join(out, shard_name(0, 1, ".tfrecord")), 50)
    with pytest.raises(tf.errors.OpError, match=r"part-00000-of-00001\.tfrecord: .*changed since it was verified"):
        for _, label in it:
            assert all(int(v) < ROWS for v in label.numpy())



@pytest.mark.parametrize("mode", ["parallel_epochs", "distributed_epoch"])
def test_a_pinned_dataset_runs_under_the_service_and_its_graph_holds_no_process_local_path(tmp_path, service, mode):
    out = _output(str(tmp_path / "out"), files=3)
    ds = make_dataset(out, 6, shuffle=True, seed=3, num_epochs=1, output="coo")
    graph = ds._as_serialized_graph().numpy()
    assert b"/proc/self" not in graph and b"/dev/fd" not in graph
    got = sorted(int(v) for _, label in distribute(ds, service, processing_mode=mode) for v in label.numpy())
    assert got == list(range(3 * ROWS))
    # The pins travel with the graph: a shard changed after the dataset was made is refused on the worker too.
    _rewrite_in_place(os.path.join(out, shard_name(2, 3, ".tfrecord")), 90)
    with pytest.raises(tf.errors.OpError, match=r"part-00002-of-00003\.tfrecord: .*changed since it was verified"):
        list(distribute(ds, service, processing_mode=mode))


def test_a_program_reading_a_changed_tfrecord_shard_exits_2_with_one_line_naming_it(tmp_path, capsys):
    from pipelines.errors import cli_errors

    out = _output(str(tmp_path / "out"))
    ds = make_dataset(out, 5, shuffle=False, output="ragged")
    _rewrite_in_place(os.path.join(out, shard_name(0, 2, ".tfrecord")), 70)
    with pytest.raises(SystemExit) as caught:
        with cli_errors("pipelines.train"):
            list(ds)
    assert caught.value.code == 2
    shard = os.path.join(out, shard_name(0, 2, ".tfrecord"))
    assert capsys.readouterr().err == (
        f"pipelines.train: error: {shard}: replaced or changed since it was verified (its records differ from those "
        "pinned when the dataset was made: another run wrote this output?); make the dataset again\n")
