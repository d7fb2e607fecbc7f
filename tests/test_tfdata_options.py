"""Options checked once: BatchOptions and OutputOptions, shared by make_dataset and make_log_dataset."""

import doctest
import importlib

import pytest
import tensorflow as tf

from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.finish import RawBatch, column_batch
from transforms.tfdata.core.options import BatchOptions, OutputOptions

COLUMNS = [
    Column("a", "sparse", "int64"),
    Column("b", "sparse", "int64", weighted=True),
    Column("x", "dense", "float32"),
]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": True}, "batch_size must be a positive integer"),
        ({"batch_size": 4, "num_epochs": 0}, "num_epochs must be a positive integer or None"),
        ({"batch_size": 4, "shuffle_buffer": 0}, "shuffle_buffer must be a positive integer"),
    ],
)
def test_batch_options_refuse_bad_values_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchOptions(**kwargs)


def test_static_rows_only_with_drop_remainder():
    assert BatchOptions(8, num_epochs=None).static_rows is None
    assert BatchOptions(8, drop_remainder=True).static_rows == 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output": "dense"}, "output must be one of"),
        ({"output": "ragged", "capacities": {"a": 3}}, "need output='coo'"),
        ({"overflow": "clip"}, "overflow must be one of"),
        # Checked whether or not a stats.json is read: a typo must not wait for the day it is.
        ({"capacity_kind": "p99"}, "capacity kind must be one of"),
        ({"capacities": {"a": 3}, "capacity_kind": "bogus"}, "capacity kind must be one of"),
        ({"dropped": tf.Variable(0, dtype=tf.int32)}, "dropped must be an int64 scalar tf.Variable"),
        ({"dropped": tf.Variable([0, 0], dtype=tf.int64)}, "dropped must be an int64 scalar tf.Variable"),
        ({"dropped": 0}, "dropped must be an int64 scalar tf.Variable"),
    ],
)
def test_output_options_refuse_bad_values_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OutputOptions(**kwargs)


def test_combiners_cover_every_sparse_feature_and_refuse_unknown_ones():
    assert OutputOptions(combiner="mean").combiners(COLUMNS) == {"a": "mean", "b": "mean"}
    assert OutputOptions(combiner={"b": "sqrtn"}).combiners(COLUMNS) == {"a": "sum", "b": "sqrtn"}
    with pytest.raises(ValueError, match=r"not sparse features read: \['x'\]"):
        OutputOptions(combiner={"x": "sum"}).combiners(COLUMNS)
    with pytest.raises(ValueError, match=r"unknown combiner\(s\) \['max'\]"):
        OutputOptions(combiner="max").combiners(COLUMNS)


def test_capacities_for_every_sparse_feature_or_none():
    assert OutputOptions().capacities_for(COLUMNS, 4) is None
    assert OutputOptions(capacities={"a": 3, "b": 5}).capacities_for(COLUMNS, 4) == {"a": 3, "b": 5}
    with pytest.raises(ValueError, match=r"no capacity for feature\(s\) \['b'\]"):
        OutputOptions(capacities={"a": 3}).capacities_for(COLUMNS, 4)


def test_a_dict_of_columns_becomes_one_raw_batch():
    raw = {
        "a": tf.ragged.constant([[1], [2, 3]], dtype=tf.int64),
        "b": tf.ragged.constant([[4], []], dtype=tf.int64),
        "b__weights": tf.ragged.constant([[0.5], []]),
        "x": tf.constant([1.0, 2.0]),
        "y": tf.constant([0.0, 1.0]),
    }
    batch = column_batch(COLUMNS, Column("y", "label", "float32"), {"a": "sum", "b": "mean"})(raw)
    assert isinstance(batch, RawBatch) and int(batch.rows) == 2 and batch.position is None
    assert sorted(batch.dense) == ["x"] and batch.label is raw["y"]
    assert [(group.names, how, group.scalar_weight) for group, how in batch.groups] == [
        (["a"], "sum", True),
        (["b"], "mean", False),
    ]


def test_docstring_examples_run():
    results = doctest.testmod(importlib.import_module("transforms.tfdata.core.options"))
    assert results.attempted > 0 and results.failed == 0
