"""The oracles themselves, on examples small enough to work out by hand (every expected value is written out)."""

import math
from fractions import Fraction

import pytest
from oracles import (
    Entries,
    assert_entries,
    bags,
    capacity_for,
    capacity_max,
    capacity_quantile,
    coo,
    coo_of_csr,
    coo_of_row_lengths,
    pad,
)

# Three rows: [7, 7, 2] (an adjacent duplicate), [] (empty), [5, 3, 5] (a duplicate that is not adjacent).
ROWS = [[7, 7, 2], [], [5, 3, 5]]
WEIGHTS = [[1.0, 3.0, 4.0], [], [2.0, 0.5, 1.0]]


def _approx(entries):
    return entries.row_ids, entries.col_ids, pytest.approx(entries.gains, rel=1e-12)


def test_sum_merges_only_adjacent_equal_ids_of_a_row():
    assert _approx(coo(ROWS, WEIGHTS, "sum")) == ([0, 0, 2, 2, 2], [7, 2, 5, 3, 5], [4.0, 4.0, 2.0, 0.5, 1.0])
    # Unweighted: every id weighs 1, so a merged pair has gain 2.
    assert _approx(coo(ROWS)) == ([0, 0, 2, 2, 2], [7, 2, 5, 3, 5], [2.0, 1.0, 1.0, 1.0, 1.0])


def test_mean_divides_each_row_by_the_sum_of_all_its_weights():
    # Row 0: sum(w) = 8 -> 4/8, 4/8. Row 2: sum(w) = 3.5 -> 2/3.5, 0.5/3.5, 1/3.5.
    want = [0.5, 0.5, 4 / 7, 1 / 7, 2 / 7]
    assert _approx(coo(ROWS, WEIGHTS, "mean")) == ([0, 0, 2, 2, 2], [7, 2, 5, 3, 5], want)
    # One shared weight 2.0: row 0 has 3 ids, sum 6 -> gains 4/6, 2/6; row 2 has 3 ids -> 2/6 each.
    assert coo(ROWS, 2.0, "mean").gains == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3])


def test_sqrtn_divides_by_the_root_of_the_squares_taken_before_merging():
    # Row 0: sqrt(1 + 9 + 16) = sqrt(26); the merged gain is (1 + 3) / sqrt(26), not sqrt(1^2 + 3^2)-based.
    # Row 2: sqrt(4 + 0.25 + 1) = sqrt(5.25).
    r26, r525 = math.sqrt(26), math.sqrt(5.25)
    want = [4 / r26, 4 / r26, 2 / r525, 0.5 / r525, 1 / r525]
    assert coo(ROWS, WEIGHTS, "sqrtn").gains == pytest.approx(want)
    # A shared weight of -2 on a row of 3 ids: each id -2 / sqrt(12); the merged pair twice that.
    assert coo([[1, 1, 4]], -2.0, "sqrtn").gains == pytest.approx([-4 / math.sqrt(12), -2 / math.sqrt(12)])


def test_rows_whose_weights_sum_to_zero_get_zero_gains():
    assert coo([[1, 2], [3]], [[1.0, -1.0], [0.0]], "mean").gains == [0.0, 0.0, 0.0]
    assert coo([[1], [3]], [[0.0], [2.0]], "sqrtn").gains == [0.0, 1.0]
    # "sum" scales nothing: a zero-sum row keeps its weights.
    assert coo([[1, 2]], [[1.0, -1.0]], "sum").gains == [1.0, -1.0]


def test_an_inf_weight_gives_its_row_nan_gains_under_mean_and_leaves_other_rows_alone():
    got = coo([[1, 2], [3]], [[math.inf, 1.0], [2.0]], "mean")
    assert math.isnan(got.gains[0]) and got.gains[1] == 0.0 and got.gains[2] == 1.0


def test_equal_ids_in_consecutive_rows_do_not_merge():
    assert coo([[4], [4], [4, 4]]) == Entries([0, 1, 2], [4, 4, 4], [1.0, 1.0, 2.0])


def test_empty_batches_and_empty_rows_give_no_entries():
    assert coo([]) == Entries([], [], [])
    assert coo([[], []], 3.0, "sqrtn") == Entries([], [], [])


def test_csr_and_row_length_forms_read_the_same_rows():
    splits, ids, flat_w = [0, 3, 3, 6], [7, 7, 2, 5, 3, 5], [1.0, 3.0, 4.0, 2.0, 0.5, 1.0]
    assert coo_of_csr(splits, ids, flat_w, "mean") == coo(ROWS, WEIGHTS, "mean")
    assert coo_of_row_lengths([3, 0, 3], ids, flat_w, "sqrtn") == coo(ROWS, WEIGHTS, "sqrtn")
    assert coo_of_row_lengths([3, 0, 3], ids, 2.5) == Entries([0, 0, 2, 2, 2], [7, 2, 5, 3, 5], [5.0, 2.5] + [2.5] * 3)


def test_bad_oracle_input_is_refused():
    with pytest.raises(ValueError, match="unknown combiner"):
        coo(ROWS, None, "max")
    with pytest.raises(ValueError, match="row 0: 1 weights for 3 ids"):
        coo(ROWS, [[1.0], [], [1.0, 1.0, 1.0]])


def test_padding_appends_sample_count_rows_with_col_zero_and_gain_zero():
    padded, dropped = pad(([0, 2], [5, 9], [1.0, 0.5]), 4, sample_count=3)
    assert padded == Entries([0, 2, 3, 3], [5, 9, 0, 0], [1.0, 0.5, 0.0, 0.0]) and dropped == 0
    assert pad(([], [], []), 2, sample_count=0) == (Entries([0, 0], [0, 0], [0.0, 0.0]), 0)
    assert pad(([1], [4], [2.0]), 1, sample_count=5) == (Entries([1], [4], [2.0]), 0)


def test_padding_overflow_raises_or_keeps_the_first_entries():
    with pytest.raises(OverflowError):
        pad(([0, 1, 1], [5, 6, 7], [1.0, 1.0, 1.0]), 2, sample_count=2)
    assert pad(([0, 1, 1], [5, 6, 7], [1.0, 2.0, 3.0]), 2, sample_count=2, overflow="drop") == (
        Entries([0, 1], [5, 6], [1.0, 2.0]),
        1,
    )


def test_bags_sum_gain_times_table_row_and_ignore_padding_rows():
    table = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]
    # Row 0: 0.5 * [1, 0] + 2 * [2, 2] = [4.5, 4]; row 1: nothing; the padding entry (row 2) is ignored.
    assert bags(table, ([0, 0, 2], [0, 2, 1], [0.5, 2.0, 9.0]), 2) == [[4.5, 4.0], [0.0, 0.0]]


def test_capacity_max_is_the_sum_of_the_largest_row_lengths():
    lengths = [0, 2, 5, 1, 2]
    assert [capacity_max(lengths, b) for b in (1, 2, 3, 5, 9)] == [5, 7, 9, 10, 10]
    assert capacity_max([], 4) == 0


def test_capacity_quantile_is_exact_over_every_batch():
    # Batches of 2 rows from [0, 1, 1, 3]: the 6 pairs hold 1, 1, 3, 2, 4, 4 ids.
    lengths = [0, 1, 1, 3]
    assert capacity_quantile(lengths, 2) == 4  # P(total <= 4) = 1 is the first >= 0.999
    assert capacity_quantile(lengths, 2, Fraction(1, 2)) == 2  # sorted 1 1 2 3 4 4: P(<= 2) = 1/2
    assert capacity_quantile(lengths, 2, Fraction(1, 3)) == 1
    assert capacity_quantile(lengths, 7) == 5  # more rows than there are: all of them


def test_capacity_for_takes_the_exact_entry_or_the_smallest_derived_bound():
    entry = {"ids_per_row": {"max": 6}, "capacity": {"8": {"max": 30, "p99_9": 25}, "32": {"max": 90}}}
    assert capacity_for(entry, 8) == 30 and capacity_for(entry, 8, "p99_9") == 25
    assert capacity_for(entry, 5) == 30  # min(30, 90, 5 * 6 = 30)
    assert capacity_for(entry, 4) == 24  # min(30, 90, 4 * 6)
    assert capacity_for(entry, 16) == 60  # min(2 * 30, 90, 96)
    assert capacity_for(entry, 64) == 180  # min(8 * 30 = 240, 2 * 90, 384)
    with pytest.raises(KeyError):
        capacity_for(entry, 16, "p99_9")
    with pytest.raises(KeyError):
        capacity_for({}, 16)


def test_assert_entries_fails_on_any_difference():
    want = Entries([0, 1], [5, 6], [1.0, 0.5])
    assert_entries(([0, 1], [5, 6], [1.0, 0.5000001]), want)
    for got in (([0, 0], [5, 6], [1.0, 0.5]), ([0, 1], [5, 7], [1.0, 0.5]), ([0, 1], [5, 6], [1.0, 0.6])):
        with pytest.raises(AssertionError):
            assert_entries(got, want)
