"""`CallOnce`: one call after whole PCollections are complete, without a global combine.

A step that needs all of a PCollection (every shard written, every file's
counts) is usually `beam.combiners.ToList()` followed by a `Map`. That global
combine is nine transforms (KeyWithVoid, a GroupByKey, a default for empty
input from its own Impulse, ...) and two or three fused stages; on the
in-process runner each costs ~0.14 s to build and run, a fixed cost every
small ingest pays several times. `CallOnce` gets the same data as side inputs
of one `Map` over an `Impulse`: two transforms, ~0.02 s, and empty input needs
no default (an empty `AsList` is `[]`, an empty `AsDict` is `{}`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam

__all__ = ["CallOnce"]


def _call(_impulse: bytes, fn: Callable[..., Any], *args, **kwargs) -> Any:
    return fn(*args, **kwargs)


class CallOnce(beam.PTransform):
    """Applied to a pipeline (`PBegin`): outputs `fn(*args, **kwargs)`, called once.

    Arguments that are side inputs (`beam.pvalue.AsList(pcoll)`, `AsDict`,
    `AsSingleton`, `AsIter`) are complete when `fn` sees them, as
    `beam.Map` gives them; others are passed as they are. The output is a
    PCollection of exactly one element, so `AsSingleton` can read it.

    Example:
      >>> import apache_beam as beam
      >>> from apache_beam.testing.util import assert_that, equal_to
      >>> from transforms.beam.runner import in_process_options
      >>> with beam.Pipeline(options=in_process_options()) as p:
      ...     rows = p | "Rows" >> beam.Create([3, 4])
      ...     total = p | "Total" >> CallOnce(lambda found, start: start + sum(found), beam.pvalue.AsList(rows), 10)
      ...     _ = assert_that(total, equal_to([17]))
    """

    def __init__(self, fn: Callable[..., Any], *args, **kwargs):
        super().__init__()
        self._fn = fn
        self._args = args
        self._kwargs = kwargs

    def expand(self, pbegin):
        return (
            pbegin
            | "Impulse" >> beam.Impulse()
            | "Call" >> beam.Map(_call, self._fn, *self._args, **self._kwargs)
        )
