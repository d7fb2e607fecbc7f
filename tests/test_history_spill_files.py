"""GroupHistories with a spill directory: events wait on disk by partition, the same histories come out.

The reference is GroupHistories without a spill directory (the events' batches through the GroupByKey)
and `build_histories` over the whole log at once; the spill path is forced into many small files with a
tiny `spill_bytes`.
"""

import hashlib
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to
from test_history_spill import _hot_events

from transforms.beam import GroupHistories, history_spill
from transforms.beam.histories import build_histories, partition_of
from transforms.testing import test_pipeline


def _as_rows(batch):
    return [tuple(sorted((k, str(v)) for k, v in r.items())) for r in batch.to_pylist()]


def _counting_writes(monkeypatch):
    written = []
    write = history_spill.SpillByPartition._write

    def counted(self, partition, table):
        path = write(self, partition, table)
        written.append((partition, path, table))
        return path

    monkeypatch.setattr(history_spill.SpillByPartition, "_write", counted)
    return written


@pytest.mark.parametrize("num_partitions, hold", [(3, False), (None, False), (None, True)])
@pytest.mark.parametrize("per_event", [False, True])
def test_spilled_grouping_gives_the_in_memory_rows_and_leaves_no_file(tmp_path, monkeypatch, num_partitions, hold,
                                                                      per_event):
    written = _counting_writes(monkeypatch)
    events = _hot_events(6, n=4000, string_keys=per_event).select(["user", "movie", "ts", "rating", "genre"])
    options = dict(max_length=4, examples_per_event=per_event, item_columns=["genre"])
    expected = _as_rows(build_histories(events, key="user", item="movie", time="ts", weight="rating", **options))
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    with test_pipeline() as p:
        batches = p | beam.Create(events.to_batches(max_chunksize=128), reshuffle=False)
        spilled = batches | "Spilled" >> GroupHistories(
            "user", "movie", "ts", "rating", num_partitions=num_partitions, batch_size=100, **options,
            spill_dir=str(spill_dir), spill_bytes=20_000, hold_for_count=hold)
        in_memory = batches | "InMemory" >> GroupHistories(
            "user", "movie", "ts", "rating", num_partitions=num_partitions, batch_size=100, **options)
        assert_that(spilled | "SpilledRows" >> beam.FlatMap(_as_rows), equal_to(expected), label="spilled")
        assert_that(in_memory | "InMemoryRows" >> beam.FlatMap(_as_rows), equal_to(expected), label="in memory")
    partitions = num_partitions or 32
    # Several spills, each a file per partition it holds, every event in exactly one file of its own partition.
    present = set(partition_of(events.column("user").combine_chunks(), partitions).tolist())
    assert {p for p, _, _ in written} == present and len(written) > 2 * len(present)
    assert sum(t.num_rows for _, _, t in written) == events.num_rows
    for partition, path, table in written:
        assert os.path.dirname(path) == str(spill_dir)
        assert os.path.basename(path).startswith(".tmp-histories-")
        assert set(partition_of(table.column("user").combine_chunks(), partitions)) == {partition}
    assert os.listdir(spill_dir) == []  # every spill (and held) file removed once read


def test_batch_for_batch_the_same_as_the_in_memory_path(tmp_path):
    # Beyond the rows: the batches themselves (the shard writer's shuffle is seeded by their bytes).
    events = _hot_events(7, n=3000).select(["user", "movie", "ts", "rating"])

    def batches_of(name, **spill):
        out = tmp_path / name
        out.mkdir()
        with test_pipeline() as p:
            _ = (p | beam.Create(events.to_batches(max_chunksize=64), reshuffle=False)
                 | GroupHistories("user", "movie", "ts", "rating", max_length=3, examples_per_event=True,
                                  num_partitions=4, batch_size=50, **spill)
                 | beam.Map(_save, str(out)))
        return {f.name: f.read_bytes() for f in out.iterdir()}

    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    expected = batches_of("in-memory")
    assert len(expected) > 20
    assert batches_of("spilled", spill_dir=str(spill_dir), spill_bytes=5000) == expected
    assert os.listdir(spill_dir) == []


def _save(batch, directory):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    with open(os.path.join(directory, hashlib.sha256(data).hexdigest()), "wb") as f:
        f.write(data)


def test_spill_files_hold_only_the_grouped_columns_and_read_back_in_name_order(tmp_path):
    fn = history_spill.SpillByPartition(str(tmp_path), ["u", "t"], "u", num_partitions=2, spill_bytes=1)
    fn.start_bundle()
    batch = pa.record_batch({"u": pa.array([5, 6, 5, 7], pa.int64()), "t": [1, 2, 3, 4], "extra": ["a"] * 4})
    spilled = list(fn.process(batch))  # one batch past the budget: spilled at once, cut by partition
    assert list(fn.finish_bundle()) == []
    parts = partition_of(pa.array([5, 6, 5, 7], pa.int64()), 2)
    assert sorted(p for p, _ in spilled) == sorted(set(parts.tolist()))
    for partition, path in spilled:
        table = pa.Table.from_batches(list(history_spill.spilled_batches([path])))
        assert table.column_names == ["u", "t"]
        assert table.column("t").to_pylist() == [t for t, p in zip([1, 2, 3, 4], parts) if p == partition]
    history_spill.remove_spilled([path for _, path in spilled])
    assert os.listdir(tmp_path) == []


def test_a_batch_without_a_grouped_column_is_refused_naming_it(tmp_path):
    fn = history_spill.SpillByPartition(str(tmp_path), ["u", "t"], "u", num_partitions=2)
    fn.start_bundle()
    with pytest.raises(ValueError, match="'t'"):
        list(fn.process(pa.record_batch({"u": [1]})))


@pytest.mark.parametrize("bad", [dict(spill_dir=""), dict(spill_bytes=0), dict(hold_for_count=True)])
def test_bad_spill_settings_are_refused(bad):
    with pytest.raises(ValueError, match="GroupHistories: (spill_dir|spill_bytes|hold_for_count)"):
        GroupHistories("user", "movie", "ts", **bad)


def test_dictionary_keys_of_different_dictionaries_go_to_the_partition_of_their_value(tmp_path):
    fn = history_spill.SpillByPartition(str(tmp_path), ["u", "t"], "u", num_partitions=5)
    fn.start_bundle()
    for values in (["a", "b", "a"], ["b", "c"]):
        keys = pa.array(values).dictionary_encode()
        assert list(fn.process(pa.record_batch({"u": keys, "t": np.arange(len(values))}))) == []
    spilled = list(fn.finish_bundle())
    by_key = {}
    for element in spilled:
        partition, path = element.value
        for b in history_spill.spilled_batches([path]):
            for key in b.column("u").dictionary_decode().to_pylist():
                by_key.setdefault(key, set()).add(partition)
    expected = partition_of(pa.array(["a", "b", "c"]), 5)
    assert by_key == {k: {int(p)} for k, p in zip("abc", expected)}
