"""Histories built through spilled sorted runs and a streaming window equal the in-memory ones, batch for batch.

The in-memory path (one partition's events grouped at once, today's `build_histories` on the whole table) is
the reference; the spill path is forced with a memory budget of a few hundred bytes, so every few batches
become a sorted run on disk and a hot key (30% of the events) spans many runs and many merged chunks.
"""

import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to
from test_histories import _reference, _rows

from transforms.beam import GroupHistories, history_stream
from transforms.beam.histories import build_histories
from transforms.beam.history_stream import partition_histories
from transforms.testing import test_pipeline


def _hot_events(seed, n=3000, keys=40, times=30, string_keys=False):
    """Events where key 0 holds 30%; few distinct times, so equal-time runs cross chunk boundaries."""
    rng = np.random.default_rng(seed)
    user = np.where(rng.random(n) < 0.3, 0, rng.integers(1, keys, n))
    columns = {
        "user": pa.array([f"u{u}" for u in user]) if string_keys else pa.array(user, pa.int64()),
        "movie": pa.array([f"m{v}" for v in rng.integers(0, 6, n)]),
        "ts": pa.array(rng.integers(0, times, n), pa.int64()),
        "rating": pa.array(rng.integers(1, 4, n).astype(np.float64)),
        "genre": pa.array([f"g{v}" for v in rng.integers(0, 3, n)]),
        "device": pa.array(rng.integers(0, 4, n), pa.int32()),
        "tags": pa.array([[int(t)] * int(t % 3) for t in rng.integers(0, 9, n)], pa.list_(pa.int64())),
        "context": pa.array(rng.random(n) < 0.4),
    }
    return pa.table(columns)


def _in_memory(table, options, batch_size):
    return build_histories(table, **options).to_batches(max_chunksize=batch_size)


def _options(**changes):
    options = dict(key="user", item="movie", time="ts", weight="rating", max_length=5, min_length=1)
    options.update(changes)
    return options


CASES = {
    "keys": _options(),
    "keys_dedupe": _options(dedupe_consecutive=True, min_length=3),
    "keys_min_above_max": _options(max_length=2, min_length=40),
    "keys_unbounded": _options(max_length=None, item_columns=["genre"], event_columns=["device", "tags"]),
    "examples": _options(examples_per_event=True),
    "examples_dedupe": _options(examples_per_event=True, dedupe_consecutive=True, min_length=2),
    "examples_sides_context": _options(examples_per_event=True, item_columns=["genre"],
                                       event_columns=["device", "tags"], context_column="context", max_length=3),
    "examples_unbounded": _options(examples_per_event=True, max_length=None, context_column="context"),
}


def _drop_unused(table, options):
    used = [options["key"], options["item"], options["time"], options["weight"], *options.get("item_columns", ()),
            *options.get("event_columns", ())] + ([options["context_column"]] if options.get("context_column") else [])
    return table.select(used)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed, budget", [(0, 300), (1, 300), (2, 6000)])
def test_spilled_histories_equal_the_in_memory_ones_batch_for_batch(case, seed, budget, tmp_path, monkeypatch):
    # Runs read back 16 rows at a time: the merge interleaves many batches of many runs.
    monkeypatch.setattr(history_stream, "MERGE_BATCH_BYTES", 1)
    options = CASES[case]
    events = _drop_unused(_hot_events(seed, string_keys=seed == 1), options)
    batches = events.to_batches(max_chunksize=97)
    expected = _in_memory(events, options, batch_size=16)
    got = list(partition_histories(batches, options, batch_size=16, memory_budget=budget, temp_dir=str(tmp_path)))
    assert len(got) == len(expected) and len(got) > 1
    for g, e in zip(got, expected):
        assert g.equals(e), (g.to_pydict(), e.to_pydict())
    assert os.listdir(tmp_path) == []  # the runs are removed once merged


@pytest.mark.parametrize("per_event", [False, True])
def test_spilled_histories_match_the_plain_reference(per_event, tmp_path):
    # The contract, from test_histories' reference written in plain Python, on a hot-key log.
    events = _hot_events(2).select(["user", "movie", "ts", "rating"])
    options = _options(examples_per_event=per_event, max_length=4, min_length=2)
    got = pa.Table.from_batches(list(partition_histories(events.to_batches(max_chunksize=50), options,
                                                        batch_size=128, memory_budget=500, temp_dir=str(tmp_path))))
    assert sorted(_rows(got, per_event)) == sorted(_reference(events, 4, 2, False, per_event))


def test_within_the_budget_nothing_is_spilled(tmp_path):
    events = _hot_events(3).select(["user", "movie", "ts", "rating"])
    got = list(partition_histories(events.to_batches(max_chunksize=500), _options(), batch_size=64,
                                   temp_dir=str(tmp_path)))
    assert [b.num_rows for b in got] == [b.num_rows for b in _in_memory(events, _options(), 64)]
    assert os.listdir(tmp_path) == []


def test_a_null_in_a_spilled_partition_is_refused_naming_the_column(tmp_path):
    events = _hot_events(4).select(["user", "movie", "ts", "rating"])
    ts = events.column("ts").to_pylist()
    ts[1234] = None
    events = events.set_column(2, "ts", pa.array(ts, pa.int64()))
    with pytest.raises(ValueError, match="column 'ts' has a null"):
        list(partition_histories(events.to_batches(max_chunksize=100), _options(), batch_size=64,
                                 memory_budget=300, temp_dir=str(tmp_path)))


def _as_rows(batch):
    return [tuple(sorted((k, str(v)) for k, v in r.items())) for r in batch.to_pylist()]


@pytest.mark.parametrize("memory_budget", [400, 256 << 20])
def test_group_histories_writes_the_same_rows_whatever_the_budget(memory_budget):
    events = _hot_events(5).select(["user", "movie", "ts", "rating", "genre", "context"])
    options = _options(max_length=4, examples_per_event=True, item_columns=["genre"], context_column="context")
    # Histories depend on their key's events alone: grouping the whole log at once gives every row.
    expected = _as_rows(build_histories(events, **options))
    assert len(expected) > 100
    with test_pipeline() as p:
        out = (p | beam.Create(events.to_batches(max_chunksize=128), reshuffle=False)
               | GroupHistories("user", "movie", "ts", "rating", max_length=4, examples_per_event=True,
                                item_columns=["genre"], context_column="context", num_partitions=3, batch_size=100,
                                memory_budget=memory_budget)
               | beam.FlatMap(_as_rows))
        assert_that(out, equal_to(expected))


def test_counted_partitions_spread_keys_over_all_of_them():
    from transforms.beam.histories import _SplitByPartitionFn, partitions_for

    # 32 partitions up to 32M events, then one more per 1M (worked out from the documented rule).
    assert [partitions_for(n) for n in (0, 1, 32_000_000, 32_000_001, 100_000_000)] == [32, 32, 32, 33, 100]
    batch = pa.record_batch({"user": pa.array(np.arange(5000), pa.int64()), "movie": pa.array(["m"] * 5000),
                             "ts": pa.array(np.zeros(5000, dtype=np.int64))})
    split = _SplitByPartitionFn(["user", "movie", "ts"], "user", None)
    parts = {part: piece.num_rows for part, piece in split.process(batch, counted_partitions=40)}
    assert sorted(parts) == list(range(40)) and sum(parts.values()) == 5000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_the_memory_budget_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="memory_budget must be an integer >= 1"):
        GroupHistories("user", "movie", "ts", memory_budget=bad)
