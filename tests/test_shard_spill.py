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


def _batches(seed, count=12, rows=150):
    rng = np.random.default_rng(seed)
    out = []
    for b in range(count):
        keys = rng.integers(0, np.iinfo(np.int64).max, size=rows, dtype=np.int64)
        out.append(pa.record_batch({"row": pa.array(np.arange(rows) + b * rows), KEY: pa.array(keys)}))
    return out


def _spill(fn, elements):
    """Runs the DoFn over one bundle as a runner would; returns {shard: [fragment paths]}."""
    out = {}
    fn.start_bundle()
    emitted = [e for element in elements for e in fn.process(element)]
    emitted += [w.value for w in fn.finish_bundle()]
    for shard, path in emitted:
        out.setdefault(shard, []).append(path)
    return out


def _expected_rows(batches, shards, shard):
    """The shard's rows sorted by key, straight from the input."""
    mine = pa.Table.from_batches([b for s, b in zip(shards, batches) if s == shard])
    return mine.column("row").to_numpy()[np.argsort(mine.column(KEY).to_numpy(), kind="stable")]


def _by_key_range(batch):
    """The batch's rows ordered by key range: a spill finding its rows in that order skips its own sort."""
    ranges = key_range_of(batch.column(KEY).to_numpy())
    return batch.take(pa.array(np.argsort(ranges, kind="stable")))


@pytest.mark.parametrize("max_open, presorted", [(256, False), (1, False), (256, True)])
def test_fragments_read_back_in_key_order_per_shard_with_small_spills(tmp_path, monkeypatch, max_open, presorted):
    # max_open 1: more files than may be held open, so each is reopened per key range.
    monkeypatch.setattr(shard_spill, "MAX_OPEN_FRAGMENTS", max_open)
    batches = _batches(3)
    if presorted:
        batches = [_by_key_range(b) for b in batches]
    shards = [i % 3 for i in range(len(batches))]
    found = _spill(SpillByKeyRange(str(tmp_path), KEY, spill_rows=400), list(zip(shards, batches)))
    assert sorted(found) == [0, 1, 2]
    for shard, fragments in found.items():
        assert len(fragments) >= 2  # spills split a shard over several files
        got = pa.Table.from_batches(list(sorted_shard_batches(fragments, KEY, chunk_rows=64)))
        assert KEY not in got.column_names and all(b.num_rows <= 64 for b in got.to_batches())
        assert not got.schema.metadata  # the spill index stays in the spill files
        np.testing.assert_array_equal(got.column("row").to_numpy(), _expected_rows(batches, shards, shard))


def test_a_spill_writes_one_file_per_shard_not_one_per_key_range(tmp_path):
    batches = _batches(4, count=6, rows=500)  # 3,000 random keys: every one of the 64 ranges in each shard
    shards = [i % 2 for i in range(len(batches))]
    found = _spill(SpillByKeyRange(str(tmp_path), KEY, spill_rows=1_000_000), list(zip(shards, batches)))
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
    assert sorted(os.listdir(tmp_path)) == [
        "part-00000-of-00002.parquet", "part-00001-of-00002.parquet", "schema.json", "stats.json"
    ]
