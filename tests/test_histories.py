"""GroupHistories: per-key time-ordered lists, ties broken by value, no leakage per event."""

import collections

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam import GroupHistories
from transforms.beam.histories import build_histories, partition_of
from transforms.testing import test_pipeline


def _events(rng, n, keys=6, items=5, times=8):
    return pa.table(
        {
            "user": pa.array(rng.integers(0, keys, n), pa.int64()),
            "movie": pa.array([f"m{int(v)}" for v in rng.integers(0, items, n)]),
            "ts": pa.array(rng.integers(0, times, n), pa.int64()),
            "rating": pa.array(rng.integers(1, 6, n).astype(np.float32)),
        }
    )


def _reference(table, max_length, min_length, dedupe, per_event):
    """Plain Python, straight from the contract."""
    by_key = collections.defaultdict(list)
    for u, m, t, r in zip(*(table.column(c).to_pylist() for c in ("user", "movie", "ts", "rating"))):
        by_key[u].append((t, m, r))
    rows = []
    for u in sorted(by_key):
        events = sorted(by_key[u])  # time, then item, then weight
        if dedupe:
            kept = []
            for e in events:
                if not kept or kept[-1][1] != e[1]:
                    kept.append(e)
            events = kept
        if not per_event:
            if len(events) >= min_length:
                last = events[-max_length:]
                rows.append((u, [e[1] for e in last], [e[2] for e in last], [e[0] for e in last]))
            continue
        for t, m, r in events:
            earlier = [e for e in events if e[0] < t][-max_length:]
            if len(earlier) >= min_length:
                rows.append((u, [e[1] for e in earlier], [e[2] for e in earlier], t, m, r))
    return rows


def _rows(table, per_event):
    names = ["user", "movie", "movie__weights", "ts"] + (
        ["target_movie", "target_rating"] if per_event else []
    )
    return [tuple(r) for r in zip(*(table.column(c).to_pylist() for c in names))]


@pytest.mark.parametrize("per_event", [False, True])
def test_build_histories_matches_reference_on_random_events(per_event):
    rng = np.random.default_rng(1 + per_event)
    for trial in range(30):
        table = _events(rng, int(rng.integers(0, 60)))
        max_length, min_length = int(rng.integers(1, 6)), int(rng.integers(0, 3))
        dedupe = bool(trial % 2)
        got = build_histories(
            table,
            "user",
            "movie",
            "ts",
            "rating",
            max_length=max_length,
            min_length=min_length,
            dedupe_consecutive=dedupe,
            examples_per_event=per_event,
        )
        assert _rows(got, per_event) == _reference(table, max_length, min_length, dedupe, per_event)


def test_hand_checked_history_and_per_event_examples():
    table = pa.table({"u": [7, 7, 7, 7, 9], "i": [3, 1, 2, 2, 5], "t": [5, 1, 5, 9, 4]})
    hist = build_histories(table, "u", "i", "t", max_length=3)
    # user 7 in time order: 1@t1, 2@t5, 3@t5 (tie: by item), 2@t9; the last 3 are kept.
    assert hist.to_pydict() == {"u": [7, 9], "i": [[2, 3, 2], [5]], "t": [[5, 5, 9], [4]]}
    table2 = pa.table({"u": [1, 1, 1, 1], "i": [4, 4, 6, 4], "t": [1, 2, 3, 4]})
    hist = build_histories(table2, "u", "i", "t", dedupe_consecutive=True)
    assert hist.to_pydict()["i"] == [[4, 6, 4]]  # only the consecutive repeat goes
    ex = build_histories(table, "u", "i", "t", examples_per_event=True)
    # Events at t=5 (items 2 and 3) see only the t=1 event: never each other, never themselves.
    assert ex.to_pydict() == {
        "u": [7, 7, 7],
        "i": [[1], [1], [1, 2, 3]],
        "t": [5, 5, 9],
        "target_i": [2, 3, 2],
    }
    with pytest.raises(ValueError, match="column 't' has a null"):
        build_histories(pa.table({"u": [1], "i": [1], "t": pa.array([None], pa.int64())}), "u", "i", "t")


def test_partition_of_is_stable_and_in_range():
    keys = pa.array(np.arange(1000))
    parts = partition_of(keys, 7)
    assert parts.min() >= 0 and parts.max() < 7 and len(np.unique(parts)) == 7
    np.testing.assert_array_equal(parts, partition_of(keys, 7))
    names = pa.array([f"user{i}" for i in range(100)])
    np.testing.assert_array_equal(partition_of(names, 5), partition_of(names.cast(pa.large_string()), 5))


def test_pipeline_groups_across_batches_whatever_their_order():
    rng = np.random.default_rng(9)
    table = _events(rng, 300, keys=40)
    single = pa.table({"user": [999], "movie": ["solo"], "ts": [3], "rating": pa.array([4.0], pa.float32())})
    table = pa.concat_tables([table, single])
    shuffled = table.take(rng.permutation(table.num_rows))
    batches = shuffled.to_batches(max_chunksize=37)
    batches.append(batches[0].slice(0, 0))  # an empty batch too
    expected_hist = _reference(table, 4, 1, False, False)
    expected_events = _reference(table, 3, 1, True, True)
    with test_pipeline() as p:
        source = p | beam.Create(batches)
        hist = source | "Hist" >> GroupHistories(
            "user", "movie", "ts", "rating", max_length=4, num_partitions=3
        )
        ex = source | "Events" >> GroupHistories(
            "user",
            "movie",
            "ts",
            "rating",
            max_length=3,
            dedupe_consecutive=True,
            examples_per_event=True,
            num_partitions=2,
            batch_size=50,
        )
        assert_that(
            hist | "H" >> beam.FlatMap(lambda b: _rows(b, False)), equal_to(expected_hist), label="hist"
        )
        assert_that(ex | "E" >> beam.FlatMap(lambda b: _rows(b, True)), equal_to(expected_events), label="ex")
        assert_that(
            ex | beam.Map(lambda b: b.num_rows <= 50) | beam.Distinct(), equal_to([True]), label="batch size"
        )
    assert (999, ["solo"], [4.0], [3]) in expected_hist


def test_bad_arguments():
    with pytest.raises(ValueError, match="distinct column names"):
        GroupHistories("u", "u", "t")
    with pytest.raises(ValueError, match="max_length"):
        GroupHistories("u", "i", "t", max_length=0)


def _side_reference(rows, max_length, min_length, dedupe, per_event):
    """Plain Python: events (user, ts, movie, rating, shelf, mood, context) with `shelf` an item column, `mood`
    an event column (None sorts last) and `context` marking events that are history only."""
    by_key = collections.defaultdict(list)
    for r in rows:
        by_key[r[0]].append(r)
    out = []
    for u in sorted(by_key):
        events = sorted(by_key[u], key=lambda e: (e[1], e[2], e[3], e[4], e[5] is None, e[5] or 0))
        if dedupe:
            events = [e for i, e in enumerate(events) if i == 0 or events[i - 1][2] != e[2]]
        if not per_event:
            if len(events) >= min_length:
                last = events[-max_length:]
                out.append((u, [e[2] for e in last], [e[4] for e in last], events[-1][5]))
            continue
        for e in events:
            earlier = [x for x in events if x[1] < e[1]][-max_length:]
            if len(earlier) >= min_length and not e[6]:
                out.append((u, e[1], [x[2] for x in earlier], [x[4] for x in earlier], e[2], e[4], e[5]))
    return out


@pytest.mark.parametrize("per_event", [False, True])
def test_item_and_event_columns_and_context_match_reference_on_random_events(per_event):
    rng = np.random.default_rng(5 + per_event)
    for trial in range(30):
        n = int(rng.integers(0, 50))
        rows = [(int(rng.integers(0, 5)), int(rng.integers(0, 6)), f"m{rng.integers(0, 4)}",
                 float(rng.integers(1, 3)), int(rng.integers(0, 3)),
                 None if rng.random() < 0.2 else int(rng.integers(0, 4)), bool(per_event and rng.random() < 0.4))
                for _ in range(n)]
        columns = list(zip(*rows)) if rows else [[]] * 7
        table = pa.table({
            "user": pa.array(columns[0], pa.int64()), "ts": pa.array(columns[1], pa.int64()),
            "movie": pa.array(columns[2], pa.string()), "rating": pa.array(columns[3], pa.float32()),
            "shelf": pa.array(columns[4], pa.int64()), "mood": pa.array(columns[5], pa.int64()),
            "context": pa.array(columns[6], pa.bool_()),
        })
        max_length, min_length, dedupe = int(rng.integers(1, 5)), int(rng.integers(0, 3)), bool(trial % 2)
        got = build_histories(table.drop_columns([] if per_event else ["context"]), "user", "movie", "ts",
                              "rating", item_columns=["shelf"], event_columns=["mood"],
                              context_column="context" if per_event else None, max_length=max_length,
                              min_length=min_length, dedupe_consecutive=dedupe, examples_per_event=per_event)
        names = (["user", "ts", "movie", "shelf", "target_movie", "target_shelf", "mood"] if per_event
                 else ["user", "movie", "shelf", "mood"])
        assert "context" not in got.column_names
        rows_got = [tuple(r) for r in zip(*(got.column(c).to_pylist() for c in names))]
        assert rows_got == _side_reference(rows, max_length, min_length, dedupe, per_event)
