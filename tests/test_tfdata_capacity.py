"""The capacity rule: stats.json lookups and derivations, per-feature dicts, and bad input named in one line."""

import json

import numpy as np
import pytest

from transforms.tfdata import capacity_from_stats
from transforms.tfdata.core.capacity import check_overflow, resolve_capacities


def _stats(capacity, ids_per_row_max=None):
    entry = {"capacity": capacity}
    if ids_per_row_max is not None:
        entry["ids_per_row"] = {"max": ids_per_row_max}
    return {"format_version": 1, "num_rows": 10, "features": {"f": entry}}


def _largest_sum(lengths, b):
    """The documented `max` rule, written out: the sum of the b largest row lengths."""
    return sum(sorted(lengths, reverse=True)[:b])


def test_the_exact_entry_is_the_sum_of_the_largest_row_lengths():
    lengths = [3, 0, 7, 1, 1, 4, 2]
    stats = _stats({str(b): {"max": _largest_sum(lengths, b), "p99_9": 1} for b in (2, 4)})
    assert capacity_from_stats(stats, "f", 2) == 11
    assert capacity_from_stats(stats, "f", 4) == 16
    assert capacity_from_stats(stats, "f", 2, kind="p99_9") == 1


def test_a_missing_p99_9_is_a_value_error_naming_the_feature_and_key():
    stats = _stats({"8": {"max": 30}})
    with pytest.raises(ValueError, match=r"feature 'f'.*batch size 8 has no 'p99_9'"):
        capacity_from_stats(stats, "f", 8, kind="p99_9")


def test_a_missing_max_while_deriving_is_a_value_error():
    stats = _stats({"8": {"p99_9": 30}})
    with pytest.raises(ValueError, match=r"feature 'f'.*batch size 8 has no 'max'"):
        capacity_from_stats(stats, "f", 16)


@pytest.mark.parametrize("batch_size", [0, -3, 2.0, True])
def test_a_batch_size_that_is_not_a_positive_int_is_refused(batch_size):
    stats = _stats({"8": {"max": 30, "p99_9": 20}}, ids_per_row_max=4)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        capacity_from_stats(stats, "f", batch_size)


def test_a_zero_batch_size_entry_in_stats_json_is_a_value_error():
    stats = _stats({"0": {"max": 0, "p99_9": 0}, "8": {"max": 30, "p99_9": 20}})
    with pytest.raises(ValueError, match=r"feature 'f'.*batch size 0"):
        capacity_from_stats(stats, "f", 16)


def test_a_dict_of_ints_is_taken_as_given_and_extra_entries_are_ignored():
    caps = resolve_capacities({"a": 4, "b": np.int64(0), "c": 9}, ["a", "b"], None)
    assert caps == {"a": 4, "b": 0} and all(type(v) is int for v in caps.values())


@pytest.mark.parametrize("bad", [-1, 2.5, "8", True, None])
def test_a_capacity_that_is_not_a_non_negative_int_is_named(bad):
    with pytest.raises(ValueError, match=r"feature 'a': capacity must be a non-negative int"):
        resolve_capacities({"a": bad}, ["a"], None)


def test_a_missing_feature_is_named_with_the_caller():
    with pytest.raises(ValueError, match=r"make_it: no capacity for feature\(s\) \['b'\]"):
        resolve_capacities({"a": 1}, ["a", "b"], None, where="make_it")


def test_stats_come_from_a_dict_a_file_or_the_directory_named_stats(tmp_path):
    stats = _stats({"4": {"max": 12, "p99_9": 9}})
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    want = {"f": 12}
    assert resolve_capacities(stats, ["f"], 4) == want
    assert resolve_capacities(str(tmp_path / "stats.json"), ["f"], 4) == want
    assert resolve_capacities(str(tmp_path), ["f"], 4) == want
    assert resolve_capacities("stats", ["f"], 4, directory=str(tmp_path)) == want
    assert resolve_capacities(stats, ["f"], 4, kind="p99_9") == {"f": 9}
    with pytest.raises(ValueError, match="need batch_size"):
        resolve_capacities(stats, ["f"], None)


def test_overflow_takes_the_modes_of_pad_coo():
    check_overflow("error")
    check_overflow("drop")
    with pytest.raises(ValueError, match=r"pad_to_capacity: overflow must be one of \('error', 'drop'\), got 'clip'"):
        check_overflow("clip", "pad_to_capacity")
