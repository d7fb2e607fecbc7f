"""iter_shards: every shard of a directory in name order, damaged ones skipped only when asked, and reported."""

import logging
import os

import pyarrow as pa
import pytest
from _batches import SCHEMA, to_batch

from sparse_io import (
    CorruptFileError,
    ShardReport,
    SkippedShard,
    iter_shards,
    shard_name,
    write_parquet_shard,
    write_tfrecord_shard,
)
from sparse_io.manifest import commit_directory


def _write_set(directory, suffix=".parquet", shards=4, rows_per_shard=5) -> list[list[dict]]:
    write = write_parquet_shard if suffix == ".parquet" else write_tfrecord_shard
    written = []
    for i in range(shards):
        rows = [
            {"label": i * 100 + r, "price": None, "ts": r, "items": [r], "items__weights": [1.0], "cats": []}
            for r in range(rows_per_shard)
        ]
        for row in rows:
            row["tags"] = [str(i)]
        write(os.path.join(str(directory), shard_name(i, shards, suffix)), [to_batch(rows)], SCHEMA)
        written.append(to_batch(rows).to_pylist())
    SCHEMA.save(str(directory))
    with open(os.path.join(str(directory), "stats.json"), "w") as f:
        f.write("{}")
    commit_directory(str(directory))
    return written


def _damage(path: str, keep: int = 10) -> None:
    # Same size: the manifest's size check passes, and the damage is for the reader to find.
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep] + bytes(len(data) - keep))


@pytest.mark.parametrize("suffix", [".parquet", ".tfrecord"])
def test_a_directory_reads_shard_by_shard_in_name_order_with_its_schema(tmp_path, suffix):
    written = _write_set(tmp_path, suffix)
    report = ShardReport()
    tables = list(iter_shards(str(tmp_path), report=report))  # schema.json found beside the shards
    assert [t.to_pylist() for t in tables] == written
    assert all(t.schema.equals(SCHEMA.arrow_schema()) for t in tables)
    assert report.summary() == {"shards": 4, "read": 4, "rows": 20, "skipped": []}


@pytest.mark.parametrize("suffix", [".parquet", ".tfrecord"])
def test_a_damaged_shard_stops_the_read_naming_it_unless_skipping_is_asked(tmp_path, suffix):
    written = _write_set(tmp_path, suffix)
    bad = os.path.join(str(tmp_path), shard_name(2, 4, suffix))
    _damage(bad)
    with pytest.raises(CorruptFileError) as info:
        list(iter_shards(str(tmp_path)))
    assert info.value.path == bad

    report = ShardReport()
    tables = list(iter_shards(str(tmp_path), skip_bad_shards=True, report=report))
    assert [t.to_pylist() for t in tables] == written[:2] + written[3:]
    assert (report.shards, report.read, report.rows) == (4, 3, 15)
    ((skipped_path, reason),) = [(s.path, s.reason) for s in report.skipped]
    assert skipped_path == bad and reason.startswith(
        f"damaged {'Parquet' if suffix == '.parquet' else 'TFRecord'} file"
    )


def test_skipped_shards_are_logged_and_listed_in_the_summary(tmp_path, caplog):
    _write_set(tmp_path)
    for i in (0, 3):
        _damage(os.path.join(str(tmp_path), shard_name(i, 4, ".parquet")), keep=0)
    report = ShardReport()
    with caplog.at_level(logging.WARNING, logger="sparse_io.shard_set"):
        assert sum(t.num_rows for t in iter_shards(str(tmp_path), skip_bad_shards=True, report=report)) == 10
    assert [s.path for s in report.skipped] == [
        os.path.join(str(tmp_path), shard_name(i, 4, ".parquet")) for i in (0, 3)
    ]
    assert [s["path"] for s in report.summary()["skipped"]] == [s.path for s in report.skipped]
    assert sum("skipping damaged shard" in r.getMessage() for r in caplog.records) == 2
    assert isinstance(report.skipped[0], SkippedShard)


def test_a_schema_mismatch_is_not_damage_and_is_never_skipped(tmp_path):
    _write_set(tmp_path, shards=2)
    other = SCHEMA.select(["label"]).replace("label", dtype="float32")
    with pytest.raises(ValueError, match="column 'label' has type int64, expected float") as info:
        list(iter_shards(str(tmp_path), schema=other, skip_bad_shards=True))
    assert not isinstance(info.value, CorruptFileError)


def test_files_globs_and_lists_name_shards_directly(tmp_path):
    written = _write_set(tmp_path)
    paths = [os.path.join(str(tmp_path), shard_name(i, 4, ".parquet")) for i in (3, 1)]
    assert [t.to_pylist() for t in iter_shards(paths, schema=SCHEMA)] == [written[3], written[1]]
    pattern = os.path.join(str(tmp_path), "part-0000[12]-*.parquet")
    assert [t.num_rows for t in iter_shards(pattern)] == [5, 5]


def test_without_a_schema_parquet_shards_keep_their_own_columns(tmp_path):
    _write_set(tmp_path, shards=1)
    os.remove(os.path.join(str(tmp_path), "schema.json"))
    commit_directory(str(tmp_path))
    (table,) = iter_shards(str(tmp_path))
    assert table.schema.names == SCHEMA.arrow_schema().names


def test_tfrecord_shards_without_any_schema_are_refused(tmp_path):
    _write_set(tmp_path, ".tfrecord", shards=1)
    os.remove(os.path.join(str(tmp_path), "schema.json"))
    commit_directory(str(tmp_path))
    with pytest.raises(ValueError, match="reading TFRecord shards needs a schema"):
        list(iter_shards(str(tmp_path)))


def test_no_shards_or_other_files_are_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no .parquet, .tfrecord or .arrow shard"):
        list(iter_shards(str(tmp_path)))
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(ValueError, match="not a .parquet, .tfrecord or .arrow shard"):
        list(iter_shards([str(other)]))


def test_a_report_adds_up_over_several_reads(tmp_path):
    _write_set(tmp_path, shards=2)
    report = ShardReport()
    for _ in range(2):
        assert sum(t.num_rows for t in iter_shards(str(tmp_path), report=report)) == 10
    assert (report.shards, report.read, report.rows) == (4, 4, 20)
    assert isinstance(next(iter_shards(str(tmp_path))), pa.Table)
