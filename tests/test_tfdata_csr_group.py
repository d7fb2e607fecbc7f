"""CsrGroup: features end to end, a shared weight kept as one float, ragged features handed back as given."""

import doctest
import importlib

import numpy as np
import pytest
import tensorflow as tf

from transforms.tfdata.core.csr_group import CsrGroup


def test_concatenated_arrays_split_back_into_each_feature_with_its_weights():
    # Feature a: rows [7, 9], [], [1]; feature b: rows [2], [2, 3], [].
    splits = tf.constant([0, 2, 2, 3, 4, 6, 6], tf.int64)
    values = tf.constant([7, 9, 1, 2, 2, 3], tf.int64)
    weights = tf.constant([0.5, 1.0, 2.0, 3.0, 4.0, 5.0])
    group = CsrGroup(["a", "b"], splits, values, weights, num_rows=tf.constant(3, tf.int64))
    assert not group.scalar_weight
    (a, wa), (b, wb) = group.features(3)
    assert a.to_list() == [[7, 9], [], [1]] and b.to_list() == [[2], [2, 3], []]
    assert wa.to_list() == [[0.5, 1.0], [], [2.0]] and wb.to_list() == [[3.0], [4.0, 5.0], []]
    assert a.shape.as_list() == [3, None]


def test_a_shared_weight_stays_one_float_and_gives_no_weight_arrays():
    group = CsrGroup(["a"], np.array([0, 1, 3], np.int64), np.array([4, 5, 6]), 0.25)
    assert group.scalar_weight and group.weights == 0.25 and group.num_rows == 2
    ((ids, weights),) = group.features()
    assert ids.to_list() == [[4], [5, 6]] and weights is None


def test_ragged_features_are_handed_back_untouched_and_concatenated_only_on_demand():
    a = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
    b = tf.ragged.constant([[], [4, 4]], dtype=tf.int64)
    wa = tf.ragged.constant([[1.0, 2.0], [3.0]])
    wb = tf.ragged.constant([[], [4.0, 5.0]])
    group = CsrGroup.from_ragged(["a", "b"], [a, b], [wa, wb])
    (got_a, got_wa), (got_b, got_wb) = group.features()
    assert got_a is a and got_wa is wa and got_b is b and got_wb is wb
    assert group.row_splits.numpy().tolist() == [0, 2, 3, 3, 5]
    assert group.values.numpy().tolist() == [1, 2, 3, 4, 4]
    assert group.weights.numpy().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert int(group.num_rows) == 2


def test_from_ragged_with_one_weight_keeps_it_a_float():
    group = CsrGroup.from_ragged(["a"], [tf.ragged.constant([[1], [2, 3]], dtype=tf.int64)], 2.0)
    assert group.scalar_weight and group.weights == 2.0
    assert group.values.numpy().tolist() == [1, 2, 3]


def test_a_row_count_mismatch_is_named_when_checked():
    group = CsrGroup.from_ragged(
        ["a", "b"], [tf.ragged.constant([[1], [2]], dtype=tf.int64), tf.ragged.constant([[3]], dtype=tf.int64)]
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="feature 'b': check 'batch rows' failed"):
        group.check_rows()


def test_docstring_examples_run():
    results = doctest.testmod(importlib.import_module("transforms.tfdata.core.csr_group"))
    assert results.attempted > 0 and results.failed == 0
