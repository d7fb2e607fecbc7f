"""CallOnce: one call over complete side inputs, one output, empty inputs as empty views."""

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam.call_once import CallOnce
from transforms.beam.runner import in_process_options


def test_called_once_with_every_element_of_its_side_inputs():
    with beam.Pipeline(options=in_process_options()) as p:
        numbers = p | "Numbers" >> beam.Create(list(range(100)))
        pairs = p | "Pairs" >> beam.Create([("a", 1), ("b", 2)])
        out = p | "Call" >> CallOnce(
            lambda found, table, scale=1: (sorted(found), dict(table), scale),
            beam.pvalue.AsList(numbers), beam.pvalue.AsDict(pairs), scale=3,
        )
        assert_that(out, equal_to([(list(range(100)), {"a": 1, "b": 2}, 3)]))


def test_empty_side_inputs_arrive_as_empty_views():
    with beam.Pipeline(options=in_process_options()) as p:
        nothing = p | "Nothing" >> beam.Create([]).with_output_types(int)
        keyed = nothing | beam.Map(lambda x: (x, x))
        out = p | "Call" >> CallOnce(lambda found, table: (list(found), dict(table)),
                                     beam.pvalue.AsList(nothing), beam.pvalue.AsDict(keyed))
        assert_that(out, equal_to([([], {})]))


def test_its_output_is_one_element_that_as_singleton_reads():
    with beam.Pipeline(options=in_process_options()) as p:
        rows = p | "Rows" >> beam.Create([3, 4, 5])
        total = p | "Total" >> CallOnce(sum, beam.pvalue.AsList(rows))
        doubled = p | "Double" >> CallOnce(lambda t: 2 * t, beam.pvalue.AsSingleton(total))
        assert_that(doubled, equal_to([24]))


def test_an_error_in_the_call_fails_the_pipeline():
    def refuse(found):
        raise ValueError(f"refused {len(found)}")

    with pytest.raises(Exception, match="refused 2"):
        with beam.Pipeline(options=in_process_options()) as p:
            p | "Call" >> CallOnce(refuse, beam.pvalue.AsList(p | beam.Create([1, 2])))


def test_the_docstring_example_runs():
    import doctest

    import transforms.beam.call_once as module

    results = doctest.testmod(module)
    assert results.attempted >= 3 and results.failed == 0
