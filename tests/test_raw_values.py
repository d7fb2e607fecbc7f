"""Raw top values per sparse feature: exact against collections.Counter, bounded past the summary's capacity."""

import collections

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam.raw_values import CountRawValues, RawValueCounts
from transforms.beam.runner import in_process_options


def _rows(rng, n, vocabulary, max_len=3):
    """n list rows of strings drawn from `vocabulary` (zipf-like), with some null and empty rows."""
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    rows = []
    for _ in range(n):
        k = int(rng.integers(0, max_len + 1))
        rows.append(None if rng.random() < 0.05 else [vocabulary[i] for i in rng.choice(len(vocabulary), k, p=weights)])
    return rows


def _counter(rows):
    return collections.Counter(v for row in rows if row for v in row)


def _expected_top(counter, k):
    total = sum(counter.values())
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [[v, c, c / total] for v, c in ranked]


def test_counts_are_exact_while_the_distinct_values_fit_and_merges_change_nothing():
    rng = np.random.default_rng(3)
    vocabulary = [f"v{i}" for i in range(300)]
    parts = [_rows(rng, 400, vocabulary) for _ in range(5)]
    counter = _counter([r for p in parts for r in p])
    accumulators = []
    for part in parts:
        acc = RawValueCounts(capacity=300)
        for start in range(0, len(part), 64):  # batch by batch
            acc.add(pa.array(part[start:start + 64], pa.list_(pa.string())))
        accumulators.append(acc)
    merged = accumulators[3]
    for acc in (accumulators[1], accumulators[0], accumulators[4], accumulators[2]):
        merged.merge(acc)
    result = merged.result(top_k=25)
    assert result["exact"] and result["max_undercount"] == 0
    assert result["values"] == sum(counter.values())
    assert result["distinct"] == len(counter)
    assert result["top"] == _expected_top(counter, 25)


def test_past_its_capacity_each_count_is_a_lower_bound_within_the_stated_error():
    rng = np.random.default_rng(5)
    values = rng.zipf(1.3, 60_000) % 20_000  # many distinct values, a few heavy ones
    counter = collections.Counter(values.tolist())
    acc = RawValueCounts(capacity=64)
    for start in range(0, len(values), 5_000):
        part = RawValueCounts(capacity=64)
        part.add(pa.array(values[start:start + 5_000]))
        acc.merge(part)
    result = acc.result(top_k=10)
    assert not result["exact"]
    bound = result["max_undercount"]
    assert 0 < bound <= len(values) / (64 + 1)
    for value, count, share in result["top"]:
        assert counter[value] - bound <= count <= counter[value]
        assert share == pytest.approx(count / len(values))
    # The heaviest values are found: every value above the error bound is listed among the kept counters.
    truly_top = [v for v, _ in counter.most_common(3)]
    assert [v for v, _, _ in result["top"][:3]] == truly_top
    assert result["distinct"] == pytest.approx(len(counter), rel=0.05)  # HyperLogLog past the capacity


def test_integer_and_flat_columns_count_their_values_and_nulls_hold_none():
    acc = RawValueCounts(capacity=10)
    acc.add(pa.array([3, None, 3, 7]))
    acc.add(pa.chunked_array([pa.array([[7, 7], None, []], pa.list_(pa.int64()))]))
    assert acc.result(top_k=5)["top"] == [[7, 3, 0.6], [3, 2, 0.4]]
    with pytest.raises(ValueError, match="capacity must be a positive integer"):
        RawValueCounts(capacity=0)
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        CountRawValues(["a"], top_k=0)


def test_the_beam_transform_counts_each_feature_over_every_batch():
    batches = [
        pa.record_batch({"a": pa.array([["x", "y"], ["x"]]), "b": pa.array([["p"], None])}),
        pa.record_batch({"a": pa.array([["y"], ["x"]]), "b": pa.array([["p"], ["q"]])}),
    ]
    with beam.Pipeline(options=in_process_options([])) as p:
        out = p | beam.Create(batches) | CountRawValues(["a", "b", "absent"], top_k=1)
        assert_that(out, equal_to([
            ("a", {"raw_values": {"values": 5, "distinct": 2, "exact": True, "max_undercount": 0,
                                  "top": [["x", 3, 0.6]]}}),
            ("b", {"raw_values": {"values": 3, "distinct": 2, "exact": True, "max_undercount": 0,
                                  "top": [["p", 2, 2 / 3]]}}),
        ]))
