"""Row-length histograms, HyperLogLog and bounded (Misra-Gries) counts against direct computation."""

import collections
import pickle

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import capacity_max

from transforms.beam._counts import CountTable
from transforms.beam._sketches import BoundedCounts, HyperLogLog, LengthHistogram

scipy_stats = pytest.importorskip("scipy.stats")


@given(st.lists(st.lists(st.integers(0, 40), max_size=30), min_size=1, max_size=4))
def test_histogram_quantiles_and_top_sums_equal_numpy(parts):
    h = LengthHistogram()
    for part in parts:
        other = LengthHistogram()
        other.add(np.array(part, dtype=np.int64))
        h.merge(other)
    lengths = np.array([v for p in parts for v in p], dtype=np.int64)
    assert h.rows == lengths.size and h.total == lengths.sum()
    if lengths.size:
        for q in (0.0, 0.37, 0.5, 0.99, 1.0):
            assert h.quantile(q) == pytest.approx(np.percentile(lengths, 100 * q))
    for b in (1, 2, 5, lengths.size, lengths.size + 3):
        assert h.top_sum(b) == capacity_max(lengths.tolist(), b)


def test_top_sum_bounds_every_batch_of_consecutive_rows_in_any_order():
    rng = np.random.default_rng(0)
    lengths = rng.geometric(0.3, 5000) - 1
    h = LengthHistogram()
    h.add(lengths)
    for b in (16, 128, 1000):
        bound = h.top_sum(b)
        for _ in range(20):
            shuffled = rng.permutation(lengths)
            sums = np.add.reduceat(shuffled, np.arange(0, lengths.size, b))
            assert sums.max() <= bound
        adversarial = np.sort(lengths)[::-1]  # the worst order a reader could produce
        assert np.add.reduceat(adversarial, np.arange(0, lengths.size, b)).max() == bound


def test_random_batch_quantile_is_exact_for_two_lengths_and_close_otherwise():
    h = LengthHistogram()
    h.add(np.array([0] * 700 + [1] * 300))
    for b in (10, 100, 600):
        expected = scipy_stats.hypergeom.ppf(0.999, 1000, 300, b)
        assert h.random_batch_quantile(b, 0.999, 1000, seed=0) == expected
    h2 = LengthHistogram()
    h2.add(np.array([2] * 50 + [5] * 950))
    assert h2.random_batch_quantile(40, 0.999, 1000, 0) == 2 * 40 + 3 * scipy_stats.hypergeom.ppf(
        0.999, 1000, 950, 40
    )
    rng = np.random.default_rng(4)
    lengths = rng.poisson(3, 3000)
    h3 = LengthHistogram()
    h3.add(lengths)
    simulated = [rng.choice(lengths, 256, replace=False).sum() for _ in range(4000)]
    estimate = h3.random_batch_quantile(256, 0.999, 20_000, 0)
    assert abs(estimate - np.quantile(simulated, 0.999)) <= 0.03 * estimate
    assert h3.random_batch_quantile(5000, 0.999, 100, 0) == lengths.sum()


def test_hyperloglog_error_is_within_its_stated_bound_and_merges_as_a_union():
    for n in (50, 5_000, 300_000):
        a, b = HyperLogLog(), HyperLogLog()
        a.add(pa.array(np.arange(n, dtype=np.int64)))
        b.add(pa.array(np.arange(n // 2, n + n // 2, dtype=np.int64)))
        a.merge(b)
        union = n + n // 2
        assert abs(a.estimate() - union) <= 4 * a.relative_error * union + 2
    s = HyperLogLog()
    s.add(pa.array([f"id{i}" for i in range(20_000)] * 2))
    assert abs(s.estimate() - 20_000) <= 4 * s.relative_error * 20_000


def _small_ids(rng, n):
    return rng.zipf(1.5, n) % 1000  # a small range: counted by bincount


def _wide_ids(rng, n):
    # Negative and huge ids, the int64 extremes among them: counted by sorting.
    pool = np.array([np.iinfo(np.int64).min, -5, 0, 7, 1 << 40, np.iinfo(np.int64).max], dtype=np.int64)
    return np.where(rng.random(n) < 0.3, pool[rng.integers(0, len(pool), n)], rng.zipf(1.5, n) * -(10**12))


@pytest.mark.parametrize("ids", [_small_ids, _wide_ids])
def test_count_table_merges_exactly_like_counter(ids):
    rng = np.random.default_rng(2)
    reference = collections.Counter()
    tables = [CountTable() for _ in range(3)]
    for i in range(30):
        values = ids(rng, int(rng.integers(0, 200)))
        tables[i % 3].add(pa.array(values, pa.int64()))
        reference.update(values.tolist())
    strings = CountTable()
    strings.add(pa.array(["b", "a", "b"]))
    assert strings.sorted().to_pydict() == {"value": ["b", "a"], "count": [2, 1]}
    tables[0].merge(tables[1])
    tables[0].merge(tables[2])
    got = tables[0].sorted()
    expected = sorted(reference.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(zip(got.column("value").to_pylist(), got.column("count").to_pylist())) == expected
    assert tables[0].total() == sum(reference.values())
    assert tables[0].sorted(min_count=3, limit=4).num_rows == min(4, sum(c >= 3 for c in reference.values()))


@pytest.mark.parametrize("kind", ["int64", "string", "empty"])
def test_count_table_survives_pickling_with_every_count(kind):
    rng = np.random.default_rng(5)
    table = CountTable()
    reference = collections.Counter()
    for _ in range(0 if kind == "empty" else 12):
        ids = rng.zipf(1.4, 5_000) % 70_000
        values = ids.astype(np.int64) if kind == "int64" else np.char.add("id-", ids.astype(str))
        table.add(pa.array(values))  # unflushed raw values as well as counted parts
        reference.update(values.tolist())
    copy = pickle.loads(pickle.dumps(table))
    got = copy.sorted()
    expected = sorted(reference.items(), key=lambda kv: (-kv[1], kv[0]))
    assert list(zip(got.column("value").to_pylist(), got.column("count").to_pylist())) == expected
    copy.add(pa.array(values[:10] if kind != "empty" else np.zeros(0, np.int64)))  # still usable after
    assert copy.total() == sum(reference.values()) + (10 if kind != "empty" else 0)


def test_pickled_count_table_is_compressed():
    rng = np.random.default_rng(6)
    table = CountTable()
    table.add(pa.array(rng.integers(0, 1 << 20, 400_000)))  # hashed ids: ~330k distinct, small counts
    distinct = len(table)
    # 16 bytes an entry as plain int64 columns; the shuffle holds these bytes for every accumulator.
    assert len(pickle.dumps(table)) < 6 * distinct


def test_bounded_counts_switch_to_sketches_with_the_stated_error():
    rng = np.random.default_rng(8)
    ids = (rng.zipf(1.2, 200_000) % 50_000).astype(np.int64)
    parts = [BoundedCounts(capacity=500) for _ in range(2)]
    for i, chunk in enumerate(np.array_split(ids, 40)):
        parts[i % 2].add(pa.array(chunk))
    merged = parts[0]
    merged.merge(parts[1])
    truth = collections.Counter(ids.tolist())
    assert not merged.exact
    assert merged.max_undercount <= ids.size / 501
    assert abs(merged.distinct() - len(truth)) <= 4 * 0.0081 * len(truth)
    for value, count in merged.top(10):
        assert truth[value] - merged.max_undercount <= count <= truth[value]
    small = BoundedCounts(capacity=500)
    small.add(pa.array([3, 3, 1], pa.int64()))
    assert small.exact and small.distinct() == 2 and small.top(5) == [[3, 2], [1, 1]]


@pytest.mark.parametrize("keep", [0, 1, 3, 10, 50])
def test_subtract_and_prune_is_the_misra_gries_step(keep):
    rng = np.random.default_rng(keep)
    values = (rng.zipf(1.3, 2_000) % 40).astype(np.int64)
    table = CountTable()
    table.add(pa.array(values))
    truth = collections.Counter(values.tolist())
    ranked = sorted(truth.values(), reverse=True)
    threshold = ranked[keep] if len(ranked) > keep else 0
    expected = {v: c - threshold for v, c in truth.items() if c > threshold}
    assert table.subtract_and_prune(keep) == threshold
    got = table.sorted()
    assert dict(zip(got.column("value").to_pylist(), got.column("count").to_pylist())) == expected
    assert len(expected) <= keep
