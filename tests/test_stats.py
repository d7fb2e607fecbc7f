"""ComputeStats: stats.json per the contract, checked against direct numpy/Counter computation."""

import collections
import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to
from oracles import capacity_max, capacity_quantile

from transforms.beam import ComputeStats
from transforms.beam.stats import FeatureStats
from transforms.testing import test_pipeline


def _reference(rows, batch_sizes, top_k):
    """Straight from the contract; capacity max as the worst order (longest rows together)."""
    lengths = np.array([len(r) if r else 0 for r in rows], dtype=np.int64)
    ids = [v for r in rows if r for v in r]
    counts = collections.Counter(ids)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
    return {
        "rows": len(rows),
        "empty_rows": int((lengths == 0).sum()),
        "ids_per_row": {
            "mean": float(lengths.mean()) if len(rows) else 0.0,
            "p50": float(np.percentile(lengths, 50)) if len(rows) else 0.0,
            "p99": float(np.percentile(lengths, 99)) if len(rows) else 0.0,
            "max": int(lengths.max()) if len(rows) else 0,
        },
        "distinct_ids": len(counts),
        "distinct_ids_exact": True,
        "top_ids": [[v, c] for v, c in top],
        "top_ids_exact": True,
        "capacity_max": {str(b): capacity_max(lengths.tolist(), b) for b in batch_sizes},
    }


def _check(got, expected):
    capacity = got.pop("capacity")
    assert {b: c["max"] for b, c in capacity.items()} == expected.pop("capacity_max")
    assert all(0 <= c["p99_9"] <= c["max"] for c in capacity.values())
    assert got["ids_per_row"] == pytest.approx(expected.pop("ids_per_row"))
    got.pop("ids_per_row")
    assert got == expected


def test_feature_stats_equal_reference_on_random_rows():
    rng = np.random.default_rng(3)
    rows = [
        None if rng.random() < 0.1 else [int(v) for v in rng.zipf(1.4, rng.integers(0, 6)) % 50]
        for _ in range(500)
    ]
    stats = FeatureStats("f")
    for lo in range(0, 500, 64):
        part = FeatureStats("f")
        part.add(pa.array(rows[lo : lo + 64], pa.list_(pa.int64())))
        stats.merge(part)
    _check(stats.result([1, 8, 64, 1000], top_k=5), _reference(rows, [1, 8, 64, 1000], 5))


def test_p99_9_tracks_random_batches():
    rng = np.random.default_rng(6)
    lengths = rng.poisson(4, 4000)
    rows = [[1] * int(n) for n in lengths]
    stats = FeatureStats("f")
    stats.add(pa.array(rows, pa.list_(pa.int64())))
    cap = stats.result([128])["capacity"]["128"]
    sampled = [rng.permutation(lengths)[:128].sum() for _ in range(3000)]
    assert cap["p99_9"] == pytest.approx(np.quantile(sampled, 0.999), rel=0.05)
    assert cap["max"] == capacity_max(lengths.tolist(), 128)


@pytest.mark.parametrize("lengths", [[0] * 8 + [1] * 4, [2] * 5 + [3] * 7, [4] * 9])
def test_capacities_of_features_with_at_most_two_row_lengths_are_exact(lengths):
    stats = FeatureStats("f")
    stats.add(pa.array([[7] * n for n in lengths], pa.list_(pa.int64())))
    capacity = stats.result([1, 3, 4, 11, 12, 40])["capacity"]
    for b, cap in capacity.items():
        assert cap == {"max": capacity_max(lengths, int(b)), "p99_9": capacity_quantile(lengths, int(b))}, b


def test_pipeline_writes_contract_stats_json(tmp_path):
    rng = np.random.default_rng(12)
    batches, all_items, all_tags = [], [], []
    for n in (40, 0, 25, 1):
        items = [[int(v) for v in rng.integers(0, 30, rng.integers(0, 5))] for _ in range(n)]
        tags = [
            None if rng.random() < 0.3 else [f"t{int(v)}" for v in rng.integers(0, 4, 1)] for _ in range(n)
        ]
        batches.append(
            pa.record_batch(
                {
                    "items": pa.array(items, pa.list_(pa.int64())),
                    "items__weights": pa.array([[1.0] * len(r) for r in items], pa.list_(pa.float32())),
                    "tags": pa.array(tags, pa.list_(pa.string())),
                    "empty": pa.array([None] * n, pa.list_(pa.int64())),
                    "label": pa.array(rng.integers(0, 2, n), pa.int64()),
                }
            )
        )
        all_items += items
        all_tags += tags
    path = str(tmp_path / "stats.json")
    sizes = [2, 16]
    with test_pipeline() as p:
        source = p | beam.Create(batches)
        stats = source | "Named" >> ComputeStats(["items", "tags", "empty"], sizes, output_path=path, top_k=3)
        auto = source | "Auto" >> ComputeStats(None, 4)
        assert_that(
            auto | beam.Map(lambda s: sorted(s["features"])), equal_to([["empty", "items", "tags"]]), "auto"
        )
        assert_that(stats | beam.Map(lambda s: s["num_rows"]), equal_to([66]), label="rows")
    with open(path) as f:
        written = json.load(f)
    assert written["format_version"] == 1 and written["num_rows"] == 66
    assert list(written["features"]) == ["items", "tags", "empty"]
    _check(written["features"]["items"], _reference(all_items, sizes, 3))
    _check(written["features"]["tags"], _reference(all_tags, sizes, 3))
    _check(written["features"]["empty"], _reference([None] * 66, sizes, 3))


def test_bad_arguments_and_columns():
    with pytest.raises(ValueError, match="batch_size"):
        ComputeStats("f", 0)
    with pytest.raises(ValueError, match="top_k"):
        ComputeStats("f", 8, top_k=0)
    with pytest.raises(ValueError, match="feature 'x' must be a list column"):
        FeatureStats("x").add(pa.array([1, 2]))
    with pytest.raises(ValueError, match="feature 'x': null id in row 1"):
        FeatureStats("x").add(pa.array([[1], [None]], pa.list_(pa.int64())))


def test_value_stats_of_dense_columns_and_the_label_equal_numpy(tmp_path):
    rng = np.random.default_rng(21)
    counts = np.floor(rng.lognormal(1.0, 1.5, 700))
    counts[rng.random(700) < 0.05] = -1
    present = rng.random(700) > 0.2
    labels = (rng.random(700) < 0.3).astype(np.int64)
    batches = [
        pa.record_batch({
            "ids": pa.array([[1]] * (hi - lo), pa.list_(pa.int64())),
            "I1": pa.array(np.where(present[lo:hi], counts[lo:hi], np.nan).astype(np.float32)),
            "label": pa.array(labels[lo:hi]),
        })
        for lo, hi in ((0, 300), (300, 301), (301, 700))
    ]
    path = str(tmp_path / "stats.json")
    with test_pipeline() as p:
        _ = p | beam.Create(batches) | ComputeStats(["ids"], 8, output_path=path, dense=["I1"], label="label")
    with open(path) as f:
        written = json.load(f)
    values = counts[present]
    dense = written["dense"]["I1"]
    assert dense["rows"] == 700 and dense["missing"] == int((~present).sum())
    assert (dense["min"], dense["max"]) == (values.min(), values.max())
    assert dense["mean"] == pytest.approx(values.mean())
    assert dense["sample_exact"] and dense["sample_size"] == values.size
    for q in (1, 25, 50, 75, 99):
        assert dense["quantiles"][f"p{q}"] == pytest.approx(np.quantile(values, q / 100))
    histogram = dense["histogram"]
    assert sum(histogram["counts"]) == values.size and len(histogram["edges"]) == len(histogram["counts"]) + 1
    # Log-normal counts reach far past their median: the bins follow a log scale.
    assert histogram["scale"] == "symlog"
    assert written["label"]["name"] == "label"
    assert written["label"]["value_counts"] == [[0, int((labels == 0).sum())], [1, int((labels == 1).sum())]]
    assert written["features"]["ids"]["empty_rows"] == 0


def test_value_stats_sample_stays_bounded_and_drops_counts_of_many_values():
    from transforms.beam._value_stats import ValueStats

    merged = ValueStats("x", sample_size=500)
    for part in range(4):
        s = ValueStats("x", sample_size=500, seed=part)
        s.add(pa.array(np.arange(part * 1000, (part + 1) * 1000, dtype=np.float64)))
        merged.merge(s)
    r = merged.result()
    assert r["sample_size"] == 500 and not r["sample_exact"] and "value_counts" not in r
    assert (r["min"], r["max"], r["mean"]) == (0.0, 3999.0, pytest.approx(1999.5))
    # A uniform sample of 0..3999: its median is near 2000 (500 draws: standard error ~52).
    assert abs(r["quantiles"]["p50"] - 2000) < 300
    with pytest.raises(ValueError, match="column 'x' must be a numeric scalar column"):
        ValueStats("x").add(pa.array(["a"]))


def test_value_stats_sample_is_the_bottom_k_of_every_values_priority():
    # The sample is the sample_size values of smallest priority, each add drawing its values' priorities
    # from default_rng((seed, rows before it)): a reference that keeps every value and priority.
    from transforms.beam._value_stats import ValueStats

    rng = np.random.default_rng(5)
    stats, all_values, all_priorities, rows = ValueStats("x", sample_size=300, seed=7), [], [], 0
    for size in (50, 400, 1000, 7, 2500, 600):
        values = rng.normal(size=size)
        values[rng.random(size) < 0.2] = np.nan
        stats.add(pa.array(values))
        present = values[~np.isnan(values)]
        all_values.append(present)
        all_priorities.append(np.random.default_rng((7, rows)).random(present.size))
        rows += size
    values, priorities = np.concatenate(all_values), np.concatenate(all_priorities)
    expected = np.sort(values[np.argsort(priorities)[:300]])
    np.testing.assert_array_equal(np.sort(stats.sample), expected)
