"""Spilled shuffles: fragments by shard and key range come back in exact key order, and nothing is left."""

import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline

from transforms.beam import in_process_options, shard_spill
from transforms.beam.shard_spill import SpillByKeyRange, key_range_of, sorted_shard_batches

KEY = "__key"
SHARD = "__shard"


def _batches(seed, count=12, rows=150):
    rng = np.random.default_rng(seed)
    out = []
    for b in range(count):
        keys = rng.integers(0, np.iinfo(np.int64).max, size=rows, dtype=np.int64)
        out.append(pa.record_batch({"row": pa.array(np.arange(rows) + b * rows), KEY: pa.array(keys)}))
    return out


def _with_shards(batches, shards):
    """Each batch with a shard column: one shard per batch when `shards` holds ints, else per row."""
    out = []
    for batch, shard in zip(batches, shards):
        column = np.full(batch.num_rows, shard) if np.isscalar(shard) else np.asarray(shard)
        out.append(batch.append_column(SHARD, pa.array(column.astype(np.int32))))
    return out


def _spill(fn, batches):
    """Runs the DoFn over one bundle as a runner would; returns {shard: [fragment paths]}."""
    out = {}
    fn.start_bundle()
    emitted = [e for batch in batches for e in fn.process(batch)]
    emitted += [w.value for w in fn.finish_bundle()]
    for shard, path in emitted:
        out.setdefault(shard, []).append(path)
    return out


def _expected_rows(batches, shard):
    """The shard's rows sorted by key, straight from the input (batches with their shard column)."""
    table = pa.Table.from_batches(batches)
    mine = table.filter(pa.array(table.column(SHARD).to_numpy() == shard))
    return mine.column("row").to_numpy()[np.argsort(mine.column(KEY).to_numpy(), kind="stable")]


def _by_key_range(batch):
    """The batch's rows already ordered by key range: the spill's sort must keep that order exact too."""
    ranges = key_range_of(batch.column(KEY).to_numpy())
    return batch.take(pa.array(np.argsort(ranges, kind="stable")))


@pytest.mark.parametrize(
    "max_open, presorted, per_row", [(256, False, False), (1, False, False), (256, True, False), (256, False, True)]
)
def test_fragments_read_back_in_key_order_per_shard_with_small_spills(
    tmp_path, monkeypatch, max_open, presorted, per_row
):
    # max_open 1: more files than may be held open, so each is reopened per key range.
    monkeypatch.setattr(shard_spill, "MAX_OPEN_FRAGMENTS", max_open)
    batches = _batches(3)
    if presorted:
        batches = [_by_key_range(b) for b in batches]
    if per_row:  # rows of one batch spread over all shards, as a shuffle assigns them
        rng = np.random.default_rng(8)
        shards = [rng.integers(3, size=b.num_rows) for b in batches]
    else:
        shards = [i % 3 for i in range(len(batches))]
    batches = _with_shards(batches, shards)
    found = _spill(SpillByKeyRange(str(tmp_path), KEY, SHARD, spill_rows=400), batches)
    assert sorted(found) == [0, 1, 2]
    for shard, fragments in found.items():
        assert len(fragments) >= 2  # spills split a shard over several files
        got = pa.Table.from_batches(list(sorted_shard_batches(fragments, KEY, chunk_rows=64)))
        assert KEY not in got.column_names and SHARD not in got.column_names
        assert all(b.num_rows <= 64 for b in got.to_batches())
        assert not got.schema.metadata  # the spill index stays in the spill files
        np.testing.assert_array_equal(got.column("row").to_numpy(), _expected_rows(batches, shard))


def test_a_spill_writes_one_file_per_shard_not_one_per_key_range(tmp_path):
    batches = _batches(4, count=6, rows=500)  # 3,000 random keys: every one of the 64 ranges in each shard
    rng = np.random.default_rng(9)
    batches = _with_shards(batches, [rng.integers(2, size=b.num_rows) for b in batches])
    found = _spill(SpillByKeyRange(str(tmp_path), KEY, SHARD, spill_rows=1_000_000), batches)
    assert {s: len(f) for s, f in found.items()} == {0: 1, 1: 1}  # one spill (at the bundle's end), two shards
    assert len(os.listdir(tmp_path)) == 2


def test_a_file_that_is_not_a_spill_file_is_refused(tmp_path):
    path = str(tmp_path / "other.arrow")
    table = pa.table({"row": [1, 2], KEY: [5, 3]})
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(ValueError, match="not a spill file"):
        list(sorted_shard_batches([path], KEY, chunk_rows=64))


def test_the_ingest_sizes_shards_from_the_input_it_reads():
    from apache_beam.io.filesystem import FileMetadata

    from pipelines.ingest import INPUT_BYTES_PER_SHARD, shards_for_input

    mib = 1 << 20
    assert shards_for_input([FileMetadata("a.tsv", 10 * mib)]) == 1
    assert shards_for_input([FileMetadata("a.tsv", INPUT_BYTES_PER_SHARD + 1)]) == 2
    # A gzip log expands to about four times its size.
    assert shards_for_input([FileMetadata("a.tsv.gz", INPUT_BYTES_PER_SHARD // 2), FileMetadata("b.tsv", 0)]) == 2


def test_write_shards_leaves_no_fragment_behind(tmp_path):
    from transforms.beam import WriteShards

    batches = [b.rename_columns(["label", "value"]) for b in _batches(5, count=4)]
    with BeamPipeline(options=in_process_options()) as p:
        _ = p | beam.Create(batches) | WriteShards(str(tmp_path), num_shards=2, seed=1)
    from sparse_io.write_records import WRITE_RECORDS_FILE

    names = sorted(os.listdir(tmp_path))
    names.remove(WRITE_RECORDS_FILE)  # the writers' records, handed to the commit (which removes them)
    assert names == [
        "part-00000-of-00002.parquet",
        "part-00001-of-00002.parquet",
        "schema.json",
        "stats.json",
    ]
