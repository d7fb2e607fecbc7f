"""Raw values counted by fingerprints (FingerprintCounts, HashIdsCountingRawValues) against collections.Counter."""

import collections
import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from sparse_io.hashing import hash_columns
from sparse_io.string_hashes import fingerprint64
from transforms.beam._fingerprint_counts import FingerprintCounts
from transforms.beam._sketches import BoundedCounts
from transforms.beam.hash_ids import HashIds
from transforms.beam.raw_values import CountRawValues, HashIdsCountingRawValues, RawValueCounts
from transforms.beam.runner import in_process_options


@pytest.fixture(autouse=True, params=["native", "reference"])
def grouping(request, monkeypatch):
    """Every test runs with the native sums (`sparse_io.raw_value_sums`) and with their numpy and Arrow reference."""
    from sparse_io import raw_value_sums

    if request.param == "reference":
        monkeypatch.setattr(raw_value_sums, "_native", lambda: None)
    elif not raw_value_sums.native_available():
        pytest.skip("no C++ compiler: the native helper does not build here")
    return request.param


def _strings(rng, n, distinct, skew=1.2):
    """n strings over `distinct` values, a few heavy (Zipf-like)."""
    ranks = rng.zipf(skew, n) % distinct
    return [f"v{r:06d}" for r in ranks]


def _ranked(counter):
    return sorted(([v, c] for v, c in counter.items()), key=lambda vc: (-vc[1], vc[0]))


def test_within_the_capacity_counts_are_exact_across_batches_merges_and_pickling():
    rng = np.random.default_rng(11)
    parts = [_strings(rng, 3_000, 500) for _ in range(4)]
    counter = collections.Counter(v for part in parts for v in part)
    summaries = []
    for part in parts:
        summary = FingerprintCounts(capacity=600)
        for start in range(0, len(part), 700):
            summary.add(pa.array(part[start:start + 700]))
        summaries.append(pickle.loads(pickle.dumps(summary)))
    merged = summaries[2]
    for other in (summaries[0], summaries[3], summaries[1]):
        merged.merge(other)
    assert merged.exact and merged.max_undercount == 0
    assert merged.distinct() == len(counter)
    assert merged.top(len(counter)) == _ranked(counter)


def test_past_the_capacity_the_summary_is_the_one_counting_the_strings_gives():
    rng = np.random.default_rng(12)
    values = _strings(rng, 120_000, 40_000, skew=1.3)
    counter = collections.Counter(values)
    by_fingerprint, by_string = FingerprintCounts(capacity=64), BoundedCounts(64)
    for start in range(0, len(values), 4_096):
        batch = pa.array(values[start:start + 4_096])
        by_fingerprint.add(batch)
        by_string.add(batch)
    assert not by_fingerprint.exact
    bound = by_fingerprint.max_undercount
    assert 0 < bound <= len(values) / (64 + 1)
    top = by_fingerprint.top(20)
    for value, count in top:
        assert counter[value] - bound <= count <= counter[value]
    assert [v for v, _ in top[:3]] == [v for v, _ in counter.most_common(3)]
    # The same pruning, error bound and distinct estimate as the summary of the strings themselves.
    assert top == by_string.top(20)
    assert bound == by_string.max_undercount
    assert by_fingerprint.distinct() == by_string.distinct()
    assert by_fingerprint.distinct() == pytest.approx(len(counter), rel=0.05)


def test_given_fingerprints_are_counted_and_two_strings_with_one_fingerprint_are_refused():
    values = pa.array(["a", "b", "a", "c"])
    summary = FingerprintCounts(capacity=8)
    summary.add(values, fingerprint64(values))
    assert summary.top(5) == [["a", 2], ["b", 1], ["c", 1]]
    with pytest.raises(ValueError, match="2 fingerprints for 4 values"):
        summary.add(values, np.arange(2, dtype=np.uint64))
    colliding = FingerprintCounts(capacity=8)
    colliding.add(pa.array(["x", "y"]), np.array([7, 7], dtype=np.uint64))
    with pytest.raises(ValueError, match="'y' and 'x' share a 64-bit fingerprint"):
        colliding.top(1)
    table = FingerprintCounts(capacity=8)  # a new string whose fingerprint a counted one holds
    table.add(pa.array(["x"]), np.array([7], dtype=np.uint64))
    table.top(1)
    table.add(pa.array(["y"]), np.array([7], dtype=np.uint64))
    with pytest.raises(ValueError, match="share a 64-bit fingerprint"):
        table.distinct()


def test_string_widths_mix_and_other_kinds_are_refused():
    summary = RawValueCounts(capacity=8)
    summary.add(pa.array([["a", "b"], None], pa.list_(pa.string())))
    summary.add(pa.array(["a"], pa.large_string()))
    assert summary.result(top_k=2)["top"] == [["a", 2, 2 / 3], ["b", 1, 1 / 3]]
    with pytest.raises(ValueError, match="another kind"):
        summary.add(pa.array([1, 2]))


def test_hash_columns_hands_out_the_fingerprints_the_buckets_come_from():
    a = pa.array([["x", "y"], None, ["x"]], pa.list_(pa.string()))
    b = pa.array(["p", "q"])
    found: list = []
    buckets = hash_columns([a, b], [10, 1000], hashes=found)
    assert [ids.to_pylist() for ids, _ in found] == [["x", "y", "x"], ["p", "q"]]
    for (ids, hashes), column, bins in zip(found, buckets, (10, 1000)):
        assert hashes.tolist() == fingerprint64(ids).tolist()
        flat = column.values if pa.types.is_list(column.type) else column
        assert flat.to_pylist() == (hashes % np.uint64(bins)).astype(np.int64).tolist()


def _batches(rng):
    out = []
    for _ in range(6):
        rows = [None if rng.random() < 0.1 else _strings(rng, int(rng.integers(0, 4)), 300) for _ in range(200)]
        out.append(pa.record_batch({
            "s": pa.array(rows, pa.list_(pa.string())),
            "salted": pa.array(rows, pa.list_(pa.string())),
            "n": pa.array([[int(v) for v in rng.integers(0, 20, 2)] for _ in range(200)], pa.list_(pa.int64())),
        }))
    return out


def test_counting_from_the_hashing_gives_what_count_raw_values_gives():
    rng = np.random.default_rng(13)
    batches = _batches(rng)
    features = ["s", "n"]
    counter = {f: collections.Counter(v for b in batches for row in b.column(f).to_pylist() if row for v in row)
               for f in features}
    expected = []
    for f in features:
        total = sum(counter[f].values())
        top = [[v, c, c / total] for v, c in _ranked(counter[f])[:10]]
        expected.append((f, {"raw_values": {"values": total, "distinct": len(counter[f]), "exact": True,
                                            "max_undercount": 0, "top": top}}))
    hash_ids = HashIds(["s", "n"], 97)
    with beam.Pipeline(options=in_process_options([])) as p:
        source = p | beam.Create(batches)
        hashed, updates = source | HashIdsCountingRawValues(hash_ids, features, top_k=10)
        plain = source | "Plain" >> HashIds(["s", "n"], 97)
        assert_that(updates, equal_to(expected), label="CheckCounts")
        assert_that(source | CountRawValues(features, top_k=10), equal_to(expected), label="CheckReference")
        rows = hashed | "Rows" >> beam.FlatMap(lambda b: [str(r) for r in b.to_pylist()])
        plain_rows = plain | "PlainRows" >> beam.FlatMap(lambda b: [str(r) for r in b.to_pylist()])
        assert_that(rows, equal_to([str(r) for b in batches for r in _hashed_rows(b)]), label="CheckHashed")
        assert_that(plain_rows, equal_to([str(r) for b in batches for r in _hashed_rows(b)]), label="CheckPlain")
    # A salted hashing does not hand out Fingerprint64s: its features are counted from their strings.
    salted = HashIds(["salted"], 97, salt=5)
    with beam.Pipeline(options=in_process_options([])) as p:
        _, updates = p | beam.Create(batches) | HashIdsCountingRawValues(salted, ["salted"], top_k=10)
        assert_that(updates, equal_to([("salted", dict(expected[0][1]))]))
    with pytest.raises(ValueError, match=r"features \['t'\] are not hashed"):
        HashIdsCountingRawValues(hash_ids, ["t"])


def _hashed_rows(batch):
    from sparse_io.hashing import hash_ids_arrow

    return pa.record_batch({"s": hash_ids_arrow(batch.column("s"), 97), "salted": batch.column("salted"),
                            "n": hash_ids_arrow(batch.column("n"), 97)}).to_pylist()
