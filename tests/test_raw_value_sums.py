"""sparse_io.raw_value_sums: one sum of raw-value counts, natively, against a dict-based reference; and
FingerprintCounts summing natively against its reference (the same summary, bit for bit)."""

import pickle

import numpy as np
import pyarrow as pa
import pytest

from sparse_io import raw_value_sums
from sparse_io.raw_value_sums import FingerprintCollision, sum_raw_values
from sparse_io.string_hashes import fingerprint64
from transforms.beam._fingerprint_counts import FingerprintCounts
from transforms.beam._sketches import HyperLogLog

pytestmark = pytest.mark.skipif(not raw_value_sums.native_available(),
                                reason="no C++ compiler: the native helper does not build here")


def _expected(parts, prune_above=0, rank=0):
    """The sum written out: groups in first-met order, each with its summed count and first value; then pruning."""
    order, count, first = [], {}, {}
    for fps, values, counts in parts:
        for i, (fp, value) in enumerate(zip(np.asarray(fps).view(np.int64).tolist(), values.to_pylist())):
            if fp not in count:
                order.append(fp)
                count[fp], first[fp] = 0, value
            count[fp] += 1 if counts is None else int(counts[i])
    threshold = 0
    if prune_above and len(order) > prune_above:
        threshold = sorted(count.values(), reverse=True)[rank - 1]
        order = [fp for fp in order if count[fp] > threshold]
    return order, [count[fp] - threshold for fp in order], [first[fp] for fp in order], threshold


def _words(rng, n, distinct):
    return pa.array([f"w{r}" + "x" * (r % 23) for r in rng.zipf(1.3, n) % distinct])  # lengths 2 to 30 bytes


@pytest.mark.parametrize("prune_above,rank", [(0, 0), (50, 21)])
def test_a_sum_is_the_dict_reference_with_tables_slices_and_wide_offsets(prune_above, rank):
    rng = np.random.default_rng(3)
    table = _words(rng, 400, 300)
    table_fps, table_counts = fingerprint64(table), rng.integers(1, 9, len(table))
    # A table's entries are distinct: keep each fingerprint's first.
    _, index = np.unique(table_fps, return_index=True)
    index = np.sort(index)
    table, table_fps, table_counts = table.take(pa.array(index)), table_fps[index], table_counts[index]
    batch = _words(rng, 5_000, 900)
    sliced = batch.slice(1_000, 2_500)  # an array offset into shared buffers
    wide = _words(rng, 3_000, 700).cast(pa.large_string())
    parts = [(table_fps, table, table_counts), (fingerprint64(sliced), sliced, None), (fingerprint64(wide), wide, None)]
    fps, counts, strings, threshold = sum_raw_values(parts, prune_above=prune_above, rank=rank)
    order, expected_counts, expected_strings, expected_threshold = _expected(parts, prune_above, rank)
    assert fps.tolist() == order and counts.tolist() == expected_counts
    assert strings.type == pa.large_string() and strings.to_pylist() == expected_strings
    assert threshold == expected_threshold and (threshold > 0) == bool(prune_above)


def test_fingerprints_past_2_63_with_equal_low_bits_and_empty_parts_group_as_a_dict_groups_them():
    n = 3_000
    spread = np.arange(n, dtype=np.int64) << 40  # equal low bits: the table's slots must come from the high ones
    high = np.array([2**64 - 1, 0, 2**63, 2**64 - 1], np.uint64)
    parts = []
    for fps in (spread, spread[::-1], high, np.zeros(0, np.int64)):
        values = pa.array([str(int(f)) for f in np.asarray(fps).view(np.int64)], pa.string())
        parts.append((fps, values, None))
    fps, counts, strings, _ = sum_raw_values(parts)
    order, expected_counts, expected_strings, _ = _expected(parts)
    assert fps.tolist() == order and counts.tolist() == expected_counts and strings.to_pylist() == expected_strings
    assert len(order) == n + 2 and expected_counts[0] == 3  # 0: in both spreads and among the high ones
    assert sum_raw_values([])[0].tolist() == []


def test_a_sum_beyond_the_kept_buffers_is_summed_all_the_same():
    # 1.1M values: past the buffers and the table a thread keeps from sum to sum (their own, then given back).
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 50_000, 1_100_000)
    values = pa.array(np.char.add("v", ids.astype(str)))
    fps, counts, strings, _ = sum_raw_values([(fingerprint64(values), values, None)])
    expected = {int(k): int(v) for k, v in zip(*np.unique(ids, return_counts=True))}
    assert len(fps) == len(expected) and counts.sum() == len(ids)
    assert {int(s[1:]): int(c) for s, c in zip(strings.to_pylist(), counts)} == expected
    small = pa.array(["a", "b", "a"])  # and the next, small sum still right
    assert sum_raw_values([(fingerprint64(small), small, None)])[1].tolist() == [2, 1]


def test_binary_values_come_back_binary_and_text_and_binary_do_not_mix():
    values = pa.array([b"\x00a", b"b", b"\x00a"], pa.binary())
    fps, counts, strings, _ = sum_raw_values([(fingerprint64(values), values, None)])
    assert counts.tolist() == [2, 1] and strings.type == pa.large_binary() and strings.to_pylist() == [b"\x00a", b"b"]
    text = pa.array(["a"])
    with pytest.raises(ValueError, match="strings and binary values in one sum"):
        sum_raw_values([(fingerprint64(values), values, None), (fingerprint64(text), text, None)])
    with pytest.raises(ValueError, match="must not be null"):
        sum_raw_values([(np.zeros(2, np.int64), pa.array(["a", None]), None)])
    with pytest.raises(ValueError, match="1 fingerprints for 2 values"):
        sum_raw_values([(np.zeros(1, np.int64), pa.array(["a", "b"]), None)])


def test_the_registers_get_the_new_fingerprints_or_all_when_a_sketch_starts():
    rng = np.random.default_rng(5)
    values = _words(rng, 2_000, 1_500)
    fps = fingerprint64(values)
    distinct = list(dict.fromkeys(fps.view(np.int64).tolist()))
    # Sketching already: the groups from `register_from` on, exactly as HyperLogLog.add gives them.
    registers = np.zeros(1 << 14, np.uint8)
    sum_raw_values([(fps, values, None)], registers=registers, register_from=100, sketching=True)
    expected = HyperLogLog()
    expected.add(pa.array(np.array(distinct[100:], np.int64)))
    assert np.array_equal(registers, expected.registers)
    # Not sketching, no pruning: untouched; pruning: a sketch starts with every group, before the pruning.
    untouched = np.zeros(1 << 14, np.uint8)
    sum_raw_values([(fps, values, None)], registers=untouched)
    assert not untouched.any()
    started = np.zeros(1 << 14, np.uint8)
    sum_raw_values([(fps, values, None)], prune_above=10, rank=5, registers=started)
    expected = HyperLogLog()
    expected.add(pa.array(np.array(distinct, np.int64)))
    assert np.array_equal(started, expected.registers)


def test_two_values_with_one_fingerprint_are_named():
    values = pa.array(["kept", "other", "kept", "fine"])
    fps = np.array([7, 9, 7, 7], np.int64)  # 'fine' is the last met with 7: compared with 'kept', its first
    with pytest.raises(FingerprintCollision, match="'fine' and 'kept' share a 64-bit fingerprint"):
        sum_raw_values([(fps, values, None)])
    # Pruned away, a fingerprint is not checked (as the reference gathers strings for the kept ones only).
    fps = np.array([7, 9, 9, 9, 7], np.int64)
    values = pa.array(["a", "b", "b", "b", "c"])
    _, counts, strings, threshold = sum_raw_values([(fps, values, None)], prune_above=1, rank=2)
    assert threshold == 2 and counts.tolist() == [1] and strings.to_pylist() == ["b"]
    with pytest.raises(FingerprintCollision, match="'c' and 'a'"):
        sum_raw_values([(fps, values, None)])


def _summary(native, batches, capacity):
    summary = FingerprintCounts(capacity, native=native)
    for batch in batches:
        summary.add(batch)
    return summary


def _state(summary):
    return (summary.top(10_000), summary.distinct(), summary.exact, summary.max_undercount,
            None if summary.sketch is None else summary.sketch.registers.tobytes())


@pytest.mark.parametrize("capacity", [64, 50_000])
def test_summing_natively_gives_the_reference_summary_across_merges_and_pickles(capacity, monkeypatch):
    rng = np.random.default_rng(8)
    batches = [_words(rng, 4_096, 20_000) for _ in range(40)]
    halves = batches[:25], batches[25:]
    states = []
    for native in (True, False):
        left, right = (_summary(native, half, capacity) for half in halves)
        left.merge(pickle.loads(pickle.dumps(right)))
        states.append(_state(left))
    assert states[0] == states[1]
    assert states[0][2] == (capacity == 50_000)  # past the capacity at 64, exact at 50,000
    # A summary pickled where it sums natively loads and merges where the native sum does not build, and the
    # other way round.
    for native in (True, False):
        pickled = pickle.dumps(_summary(native, halves[1], capacity))
        with monkeypatch.context() as patch:
            if native:
                patch.setattr(raw_value_sums, "_native", lambda: None)
            other = pickle.loads(pickled)
            assert other.native is not native
            mixed = _summary(not native, halves[0], capacity)
            mixed.merge(other)
            assert _state(mixed) == states[0]
