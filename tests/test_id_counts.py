"""The native id table (`sparse_io.id_counts`) against collections.Counter, and CountTable / BoundedCounts /
HyperLogLog with it against their numpy references on the same ids."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pyarrow as pa
import pytest

from sparse_io import id_counts, native_build
from transforms.beam import _counts, _sketches
from transforms.beam._sketches import BoundedCounts, HyperLogLog

pytestmark = pytest.mark.skipif(native_build.load() is None,
                                reason=f"native helpers unavailable: {native_build.unavailable_reason()}")

EXTREMES = np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max], np.int64)


def _ids(rng, n):
    """Zipf-like ids over a wide range, the int64 extremes among them (0 and -1 too)."""
    drawn = (rng.zipf(1.3, n) * 7_919 - 50_000).astype(np.int64)
    return np.where(rng.random(n) < 0.05, EXTREMES[rng.integers(0, len(EXTREMES), n)], drawn)


def _pairs(counter: id_counts.IdCounter) -> dict:
    values, counts = counter.export()
    assert len(set(values.tolist())) == len(values)  # each id held once
    return dict(zip(values.tolist(), counts.tolist()))


def test_counts_and_weighted_counts_equal_a_counter_through_growth():
    rng = np.random.default_rng(1)
    counter, truth = id_counts.IdCounter(), collections.Counter()
    for _ in range(40):
        ids = _ids(rng, int(rng.integers(0, 30_000)))  # the table grows many times over
        counter.add(ids)
        truth.update(ids.tolist())
    weights = rng.integers(1, 1_000, 500)
    extra = _ids(rng, 500)
    counter.add(extra, weights)
    for v, w in zip(extra.tolist(), weights.tolist()):
        truth[v] += w
    assert len(counter) == len(truth)
    assert _pairs(counter) == dict(truth)
    with pytest.raises(ValueError, match="3 weights for 2 ids"):
        counter.add(np.array([1, 2]), np.array([1, 1, 1]))
    with pytest.raises(ValueError, match="weights must be >= 1, got 0"):
        counter.add(np.array([1, 2]), np.array([1, 0]))
    assert _pairs(counter) == dict(truth)  # a refused add counts nothing


@pytest.mark.parametrize("keep", [0, 1, 7, 100, 5_000])
def test_prune_is_the_misra_gries_step(keep):
    rng = np.random.default_rng(keep)
    ids = _ids(rng, 20_000)
    counter, truth = id_counts.IdCounter(), collections.Counter(ids.tolist())
    counter.add(ids)
    ranked = sorted(truth.values(), reverse=True)
    threshold = ranked[keep] if len(ranked) > keep else 0
    assert counter.prune(keep) == threshold
    expected = {v: c - threshold for v, c in truth.items() if c > threshold}
    assert _pairs(counter) == expected and len(counter) == len(expected)
    counter.add(ids[:100])  # still a working table after the rebuild
    for v in ids[:100].tolist():
        expected[v] = expected.get(v, 0) + 1
    assert _pairs(counter) == expected


def _summary(capacity, batches, merge_every=3):
    parts = [BoundedCounts(capacity) for _ in range(merge_every)]
    for i, batch in enumerate(batches):
        parts[i % merge_every].add(pa.array(batch))
    parts[1] = pickle.loads(pickle.dumps(parts[1]))
    for other in parts[1:]:
        parts[0].merge(other)
    merged = parts[0]
    return merged.exact, merged.max_undercount, merged.distinct(), merged.top(50), len(merged.table)


@pytest.mark.parametrize("capacity", [50, 2_000, 1 << 20])
def test_bounded_counts_are_the_same_with_the_native_table_and_without(capacity, monkeypatch):
    rng = np.random.default_rng(capacity)
    batches = [_ids(rng, int(rng.integers(1, 20_000))) for _ in range(30)]
    native = _summary(capacity, batches)
    monkeypatch.setattr(_counts.id_counts, "available", lambda: False)
    assert _summary(capacity, batches) == native
    exact, _, distinct, top, _ = native
    if capacity == 1 << 20:  # exact: the true counts
        truth = collections.Counter(np.concatenate(batches).tolist())
        assert exact and distinct == len(truth)
        assert top == [[v, c] for v, c in sorted(truth.items(), key=lambda kv: (-kv[1], kv[0]))[:50]]


def test_count_table_native_results_equal_the_reference(monkeypatch):
    rng = np.random.default_rng(3)
    batches = [_ids(rng, 5_000) for _ in range(8)]

    def run():
        table = _counts.CountTable()
        for b in batches:
            table.add(pa.array(b))
        assert (table._ids is not None) == _counts.id_counts.available()  # the path under test is taken
        copy = pickle.loads(pickle.dumps(table))
        copy.merge(table)
        return copy.sorted(min_count=2, limit=100).to_pydict(), copy.total(), len(copy), copy.table().to_pydict()

    native = run()
    monkeypatch.setattr(_counts.id_counts, "available", lambda: False)
    assert run() == native
    assert native[1] == 2 * sum(len(b) for b in batches)


@pytest.mark.parametrize("kind", ["int64", "int32", "string"])
def test_hyperloglog_registers_are_the_numpy_references(kind):
    rng = np.random.default_rng(9)
    ids = _ids(rng, 50_000)
    values = {"int64": pa.array(ids), "int32": pa.array(ids.astype(np.int32)),
              "string": pa.array(np.char.add("v", ids.astype(str)))}[kind]
    for precision in (4, 14, 16):
        native, numpy = HyperLogLog(precision), HyperLogLog(precision)
        native.add(values)
        numpy.add(values, native=False)
        assert np.array_equal(native.registers, numpy.registers)
        assert native.registers.any()
    assert _sketches._native_hll_add() is not None
