"""`distribute`: run a `make_dataset`/`make_log_dataset` dataset under the tf.data service, or say why not.

`tf.data.experimental.service.distribute` sends the dataset's graph to the
service workers, which run their own copy of it. Two kinds of our datasets
cannot work there, and TensorFlow does not say so in terms of the dataset:

- Parquet or Arrow shards: the reader is a `tf.py_function`, whose Python callable
  exists only in the process that made the dataset. A worker in another
  process fails at the first batch ("Could not find callback with
  key=pyfunc_0 in the registry"); a worker in this process seems to work.
- a counter variable (`bad_lines`, `padded_lines`, `dropped`): each worker
  updates its own copy of the variable, so the one the caller holds stays 0.

`make_dataset` and `make_log_dataset` record what they built (`remember`)
against the dataset object they return; `distribute` looks the record up for
the dataset it is given and for the datasets it was derived from.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator

import tensorflow as tf

from sparse_io.formats import SHARD_FORMATS

__all__ = ["distribute", "remember", "DatasetFacts"]

# What a dataset of ours reads: a shard format, or raw logs.
SOURCES = (*SHARD_FORMATS, "log")


@dataclasses.dataclass(frozen=True)
class DatasetFacts:
    """What `make_dataset`/`make_log_dataset` built: the source kind and the counter variables given.

    Attributes:
      source: "parquet", "tfrecord", "arrow" or "log".
      counters: the names of the counter arguments given a variable, e.g. ("bad_lines",).
    """

    source: str
    counters: tuple[str, ...] = ()


# Keyed weakly: the record lives exactly as long as the dataset object it describes.
_FACTS: weakref.WeakKeyDictionary[tf.data.Dataset, DatasetFacts] = weakref.WeakKeyDictionary()

# Why each counter cannot be used under the service, and what to do instead.
_COUNTER_ALTERNATIVES = {
    "bad_lines": "count bad lines locally (iterate without the service) or pass on_error='raise' without bad_lines",
    "padded_lines": "count padded lines locally (iterate without the service) or leave padded_lines out",
    "dropped": "count dropped entries locally (iterate without the service), or use overflow='error' "
    "or capacities large enough",
}

# Deeper input chains than this are not followed (a guard against a cycle or a pathological graph).
_MAX_INPUTS = 10_000


def remember(dataset: tf.data.Dataset, source: str, counters: dict[str, tf.Variable | None]) -> tf.data.Dataset:
    """Record `source` and the counters given (the non-None values of `counters`) for `dataset`; return it.

    Raises:
      ValueError: `source` is not one of `SOURCES`.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    _FACTS[dataset] = DatasetFacts(source, tuple(name for name, v in counters.items() if v is not None))
    return dataset


def _lineage(dataset: tf.data.Dataset) -> Iterator[tf.data.Dataset]:
    """`dataset`, then the datasets it was derived from, as far as TensorFlow exposes them.

    `Dataset._inputs()` is private API (present in TF 2.x for every transformation:
    `.map`, `.take`, `.batch`, `.with_options`, `zip`, ...). It is used only to find
    our own records; if it is missing or fails, the walk stops at what it has.
    Datasets built inside a function (`flat_map`, `interleave`) are not inputs
    and are not visited.
    """
    seen: set[int] = set()
    stack = [dataset]
    while stack and len(seen) < _MAX_INPUTS:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        try:
            inputs = list(current._inputs())
        except Exception:  # private API: any failure only ends the walk along this branch
            continue
        stack.extend(d for d in inputs if isinstance(d, tf.data.Dataset))


def facts(dataset: tf.data.Dataset) -> list[DatasetFacts]:
    """The records of `dataset` and of the datasets it was derived from (empty if none is ours)."""
    found = []
    for d in _lineage(dataset):
        try:
            record = _FACTS.get(d)
        except TypeError:  # an unhashable or non-weakref-able object is not one of ours
            record = None
        if record is not None:
            found.append(record)
    return found


def check_distributable(dataset: tf.data.Dataset) -> None:
    """Raise ValueError if `dataset` (or a dataset it derives from) cannot run under the tf.data service.

    Raises:
      ValueError: it reads Parquet or Arrow shards (make_dataset over them), or it
        updates a counter variable (bad_lines, padded_lines, dropped).
    """
    records = facts(dataset)
    columnar = next((record.source for record in records if record.source in ("parquet", "arrow")), None)
    if columnar is not None:
        name = {"parquet": "Parquet", "arrow": "Arrow"}[columnar]
        raise ValueError(
            f"transforms.distribute: this dataset reads {name} shards through a tf.py_function, which "
            "exists only in this Python process and cannot run in a tf.data service worker; write "
            "TFRecord shards instead (output.format: tfrecord in the ingest config, or "
            "python -m pipelines.convert SRC DST --format tfrecord) and read them with "
            "make_dataset, or read the raw logs with make_log_dataset"
        )
    for record in records:
        for name in record.counters:
            raise ValueError(
                f"transforms.distribute: the {name} counter would stay 0 under the tf.data service (each "
                f"worker updates its own copy of the variable, never yours); {_COUNTER_ALTERNATIVES[name]}"
            )


def distribute(
    dataset: tf.data.Dataset,
    service: str,
    *,
    processing_mode: str = "parallel_epochs",
    job_name: str | None = None,
    **kwargs,
) -> tf.data.Dataset:
    """`dataset` read through the tf.data service at `service`, after refusing what cannot run there.

    The check applies to the dataset as `make_dataset`/`make_log_dataset`
    returned it and to datasets derived from it by transformations
    (`.take`, `.map`, `.prefetch`, ...), as far as TensorFlow exposes a
    dataset's inputs; a dataset of ours hidden inside `flat_map` or
    `interleave` is not seen.

    Args:
      dataset: a `make_dataset` dataset over TFRecord shards, a
        `make_log_dataset` dataset without counters, or any other dataset
        the service can run.
      service: the dispatcher's address, e.g. "grpc://host:5050".
      processing_mode: passed to tf.data as is. With "parallel_epochs"
        every worker produces the whole dataset: with n workers each row
        arrives n times per epoch. Other modes (dynamic sharding) are
        passed through and not tested here.
      job_name: share one job between clients (see the tf.data service).
      **kwargs: the other arguments of `tf.data.experimental.service.distribute`.

    Returns:
      The distributed dataset, with the elements of `dataset`.

    Raises:
      ValueError (one line): `dataset` reads Parquet or Arrow shards (their reader is
        a `tf.py_function` that exists only in this process; use TFRecord
        shards or `make_log_dataset`), or it updates a `bad_lines`,
        `padded_lines` or `dropped` counter (which would stay 0).

    Example:
      >>> ds = make_dataset("out/train_tfrecord", 1024)  # doctest: +SKIP
      >>> ds = transforms.distribute(ds, "grpc://dispatcher:5050")  # doctest: +SKIP
    """
    check_distributable(dataset)
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=processing_mode, service=service, job_name=job_name, **kwargs
        )
    )
