"""Matchers over PCollections of RecordBatches: rows, schema, dead letters; failures name the difference."""

import math
import re

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import BeamAssertException, assert_that

from sparse_io import DeadLetter, FeatureSpec, Schema
from transforms.testing import dead_letters, equal_to_rows, has_schema, test_pipeline

BATCHES = [
    pa.record_batch({"label": pa.array([1, 0], pa.int64()), "C1": pa.array([["a"], []], pa.list_(pa.string()))}),
    pa.record_batch({"label": pa.array([1], pa.int64()), "C1": pa.array([["b", "c"]], pa.list_(pa.string()))}),
]
ROWS = [{"label": 1, "C1": ["a"]}, {"label": 0, "C1": []}, {"label": 1, "C1": ["b", "c"]}]
LETTERS = [DeadLetter("<memory>", 3, "C1: 'zz' is not hex", "zz"), DeadLetter("<memory>", 7, "too few fields", "1")]


def test_rows_match_in_any_order_across_batches_or_in_order_when_asked():
    equal_to_rows(ROWS)(BATCHES)
    equal_to_rows(list(reversed(ROWS)))(list(reversed(BATCHES)))
    equal_to_rows([{"C1": r["C1"]} for r in ROWS], columns=["C1"])(BATCHES)
    equal_to_rows(ROWS, ordered=True)(BATCHES)
    with pytest.raises(BeamAssertException, match=r"row 0 differs: column 'C1': expected \['b', 'c'\], got \['a'\]"):
        equal_to_rows(ROWS[2:] + ROWS[:2], ordered=True)(BATCHES)
    nan = pa.record_batch({"x": pa.array([math.nan, 1.5])})
    equal_to_rows([{"x": 1.5}, {"x": math.nan}])([nan])
    equal_to_rows([])([])
    equal_to_rows([], columns=["C1"])([])


def test_a_wrong_row_is_named_with_its_column_and_values():
    wrong = [dict(ROWS[0]), dict(ROWS[1]), {"label": 1, "C1": ["b", "x"]}]
    with pytest.raises(BeamAssertException) as info:
        equal_to_rows(wrong)(BATCHES)
    message = str(info.value)
    assert "1 expected row(s) not in the output, 1 output row(s) not expected" in message
    assert "column 'C1': expected ['b', 'x'], got ['b', 'c']" in message
    assert "label" not in message.split("differs in")[1].split("\n")[0]  # only the differing column is named
    with pytest.raises(BeamAssertException, match="expected 3 rows, the PCollection is empty"):
        equal_to_rows(ROWS)([])
    with pytest.raises(BeamAssertException, match="expected 2 rows, got 3"):
        equal_to_rows(ROWS[:2])(BATCHES)
    with pytest.raises(BeamAssertException, match=r"expected 4 rows, got 3: 1 expected row\(s\) not in the output"):
        equal_to_rows([*ROWS, ROWS[0]])(BATCHES)  # a row expected twice, present once


def test_rows_name_columns_that_do_not_line_up():
    with pytest.raises(BeamAssertException, match=r"expected row 0 lacks column\(s\) \['C1'\].*columns=\[\.\.\.\]"):
        equal_to_rows([{"label": 1}])(BATCHES)
    with pytest.raises(BeamAssertException, match=r"expected row 0 names column\(s\) \['C9'\]"):
        equal_to_rows([{"label": 1, "C1": ["a"], "C9": 1}])(BATCHES)
    with pytest.raises(BeamAssertException, match=r"the output has no column\(s\) \['C9'\]"):
        equal_to_rows([{"C9": 1}], columns=["C9"])(BATCHES)
    with pytest.raises(BeamAssertException, match="element 0 is a dict, not a pa.RecordBatch"):
        equal_to_rows(ROWS)([ROWS[0]])


def test_schema_matches_arrow_ours_a_mapping_or_names():
    ours = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("C1", "sparse", "string")])
    has_schema(ours)(BATCHES)
    has_schema(ours.arrow_schema())(BATCHES)
    has_schema({"label": "int64", "C1": "list<string>"})(BATCHES)
    has_schema({"C1": pa.list_(pa.string())}, exact=False)(BATCHES)
    has_schema(["label", "C1"])(BATCHES)
    has_schema(["label"], allow_empty=True)([])


def test_a_wrong_schema_is_named():
    with pytest.raises(BeamAssertException, match=r"batch 0: column 'C1' is list<item: string>, expected list<int64>"):
        has_schema({"label": "int64", "C1": "list<int64>"})(BATCHES)
    with pytest.raises(BeamAssertException, match=r"batch 0 lacks column\(s\) \['I1'\]; it has \['label', 'C1'\]"):
        has_schema(["label", "C1", "I1"])(BATCHES)
    with pytest.raises(BeamAssertException, match=r"batch 0 has unexpected column\(s\) \['C1'\]"):
        has_schema({"label": "int64"})(BATCHES)
    has_schema({"label": "int64"}, exact=False)(BATCHES)
    with pytest.raises(BeamAssertException, match=r"in the order \['label', 'C1'\], expected \['C1', 'label'\]"):
        has_schema(["C1", "label"])(BATCHES)
    with pytest.raises(BeamAssertException, match="holds no batch"):
        has_schema(["label"])([])
    with pytest.raises(TypeError, match="has_schema: expected a pa.Schema"):
        has_schema(3)


def test_dead_letters_by_count_and_reasons_in_any_order():
    dead_letters(["fields", "C1"])(LETTERS)
    dead_letters([re.compile(r"'\w+' is not hex")], count=2)(LETTERS)
    dead_letters(count=0)([])
    dead_letters(["C1"], count=1)([d.to_dict() for d in LETTERS[:1]])
    # One letter cannot answer two expected reasons, even when both match it.
    with pytest.raises(BeamAssertException, match="no dead letter"):
        dead_letters(["C1", "hex"])(LETTERS)


def test_a_missing_dead_letter_is_named():
    with pytest.raises(BeamAssertException) as info:
        dead_letters(["C1", "fields"])(LETTERS[:1])
    assert "expected 2 dead letter(s), got 1: <memory>:3: C1: 'zz' is not hex" in str(info.value)
    with pytest.raises(BeamAssertException) as info:
        dead_letters(["C1", "label: missing"])(LETTERS)
    assert "no dead letter (left) whose reason has 'label: missing'" in str(info.value)
    assert "too few fields" in str(info.value)
    with pytest.raises(ValueError, match="count 1 is less than the 2 reasons"):
        dead_letters(["a", "b"], count=1)


def test_in_a_pipeline_a_wrong_row_schema_or_missing_letter_fails_the_run_naming_it():
    cases = [
        (equal_to_rows([*ROWS[:2], {"label": 0, "C1": ["b", "c"]}]), "column 'label': expected 0, got 1"),
        (has_schema({"label": "int32", "C1": "list<string>"}), "column 'label' is int64, expected int32"),
    ]
    for matcher, named in cases:
        with pytest.raises(Exception, match=re.escape(named)):
            with test_pipeline() as p:
                assert_that(p | beam.Create(BATCHES), matcher)
    with pytest.raises(Exception, match=re.escape("no dead letter (left) whose reason has 'label'")):
        with test_pipeline() as p:
            assert_that(p | beam.Create(LETTERS), dead_letters(["C1", "label"]))
