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

Two more cannot be split by files (`distributed_epoch`, static FILE
sharding), which tf.data does at the first source dataset of the pipeline:

- more than one epoch (`num_epochs` other than 1): the range of epochs leads
  the pipeline, so the service would hand out whole epochs;
- a TFRecord input shard of every n-th record (fewer non-empty files than
  input workers): a split of the files would break it.

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
from sparse_io.shard_files import COLUMNAR_FORMATS
from sparse_io.shard_formats import shard_format

__all__ = ["distribute", "remember", "DatasetFacts", "load_reader_ops"]

# What a dataset of ours reads: a shard format, or raw logs.
SOURCES = (*SHARD_FORMATS, "log")


@dataclasses.dataclass(frozen=True)
class DatasetFacts:
    """What `make_dataset`/`make_log_dataset` built: the source kind and the counter variables given.

    Attributes:
      source: "parquet", "tfrecord", "arrow" or "log".
      counters: the names of the counter arguments given a variable, e.g. ("bad_lines",).
      num_epochs: the dataset's `num_epochs` (None: endless).
      whole_files: each input worker reads whole files (False: every n-th record of all of them, or a
        record range with balance="rows").
      reader: for Parquet and Arrow shards, which reader reads them: "op" (the native Arrow dataset
        op, serialisable), or "python (why)" (a `tf.py_function` of this process).
    """

    source: str
    counters: tuple[str, ...] = ()
    num_epochs: int | None = 1
    whole_files: bool = True
    reader: str = ""


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


def remember(
    dataset: tf.data.Dataset,
    source: str,
    counters: dict[str, tf.Variable | None],
    *,
    num_epochs: int | None = 1,
    whole_files: bool = True,
    reader: str = "",
) -> tf.data.Dataset:
    """Record `source`, the counters given (the non-None values of `counters`) and the split facts for `dataset`.

    Returns `dataset`.

    Raises:
      ValueError: `source` is not one of `SOURCES`.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    given = tuple(name for name, v in counters.items() if v is not None)
    _FACTS[dataset] = DatasetFacts(source, given, num_epochs, whole_files, reader)
    return dataset


# processing_mode -> how the service shares the data out: "off" (every worker all of it), "files"
# (by files: dynamically or statically), "data" (every worker reads all, keeps every n-th element),
# "hint" (where the dataset holds shard hints).
_POLICY = tf.data.experimental.service.ShardingPolicy
_SHARING = {
    "parallel_epochs": "off",
    "distributed_epoch": "files",
    _POLICY.OFF: "off",
    _POLICY.DYNAMIC: "files",
    _POLICY.FILE: "files",
    # Our datasets always have files for tf.data's auto-shard to find, so it never falls back to DATA.
    _POLICY.FILE_OR_DATA: "files",
    _POLICY.DATA: "data",
    _POLICY.HINT: "hint",
}


def _shown(processing_mode) -> str:
    if isinstance(processing_mode, _POLICY):
        return f"ShardingPolicy.{processing_mode.name}"
    return repr(processing_mode)


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


def check_distributable(dataset: tf.data.Dataset, processing_mode="parallel_epochs") -> None:
    """Raise ValueError if `dataset` (or a dataset it derives from) cannot run under the tf.data service.

    Raises:
      ValueError: it reads Parquet or Arrow shards (make_dataset over them), or it
        updates a counter variable (bad_lines, padded_lines, dropped); or
        `processing_mode` splits by files (distributed_epoch, FILE,
        FILE_OR_DATA, DYNAMIC) and it was made with `num_epochs` other
        than 1, or its TFRecord input shard is every n-th record.
    """
    records = facts(dataset)
    columnar = next((r for r in records if r.source in COLUMNAR_FORMATS and r.reader != "op"), None)
    if columnar is not None:
        name = shard_format(columnar.source).title
        why = f" ({columnar.reader.removeprefix('python (')}" if columnar.reader.startswith("python (") else ""
        alternative = (
            "read them in a way the native Arrow op reads (COO output)"
            if columnar.source == "arrow"
            else "convert them to Arrow shards (python -m pipelines.convert SRC DST --format arrow), which a "
            "native op reads"
        )
        raise ValueError(
            f"transforms.distribute: this dataset reads {name} shards through a tf.py_function{why}, which "
            f"exists only in this Python process and cannot run in a tf.data service worker; {alternative}, "
            "or write TFRecord shards instead (output.format: tfrecord in the ingest config, or "
            "python -m pipelines.convert SRC DST --format tfrecord) and read them with "
            "make_dataset, or read the raw logs with make_log_dataset"
        )
    for record in records:
        for name in record.counters:
            raise ValueError(
                f"transforms.distribute: the {name} counter would stay 0 under the tf.data service (each "
                f"worker updates its own copy of the variable, never yours); {_COUNTER_ALTERNATIVES[name]}"
            )
    try:
        sharing = _SHARING.get(processing_mode)
    except TypeError:  # unhashable: not a mode tf.data knows either, and it says so
        sharing = None
    if sharing != "files":
        return
    static = processing_mode in (_POLICY.FILE, _POLICY.FILE_OR_DATA)
    if static and any(record.reader == "op" for record in records):
        raise ValueError(
            f"transforms.distribute: processing_mode={_shown(processing_mode)} shards by files statically, which "
            "tf.data cannot do for the native Arrow op (it knows only its own file readers); use "
            "'distributed_epoch' (the op's record batches handed out one at a time) or ShardingPolicy.DATA"
        )
    for record in records:
        if record.num_epochs != 1:
            raise ValueError(
                f"transforms.distribute: processing_mode={_shown(processing_mode)} splits an epoch between the "
                f"workers by files only in a dataset made with num_epochs=1; with num_epochs={record.num_epochs} "
                "the range of epochs leads the pipeline, so the service would hand out whole epochs, each read by "
                "one worker; make the dataset with num_epochs=1 and repeat the distributed dataset"
            )
        if not record.whole_files:
            raise ValueError(
                f"transforms.distribute: processing_mode={_shown(processing_mode)} splits the files between the "
                "workers, but this dataset's input shard is every num_shards-th record of all the files (fewer "
                "non-empty files than num_shards) or a range of records (balance='rows'), which a split by files "
                "would break; give every input worker at least one file (balance='files'), or use "
                "ShardingPolicy.DATA"
            )


def distribute(
    dataset: tf.data.Dataset,
    service: str,
    *,
    processing_mode: str | tf.data.experimental.service.ShardingPolicy = "parallel_epochs",
    job_name: str | None = None,
    **kwargs,
) -> tf.data.Dataset:
    """`dataset` read through the tf.data service at `service`, after refusing what cannot run there.

    The check applies to the dataset as `make_dataset`/`make_log_dataset`
    returned it and to datasets derived from it by transformations
    (`.take`, `.map`, `.prefetch`, ...), as far as TensorFlow exposes a
    dataset's inputs; a dataset of ours hidden inside `flat_map` or
    `interleave` is not seen.

    How the workers share the data (`processing_mode`):

    - "parallel_epochs" (`ShardingPolicy.OFF`, the default): every worker
      produces the whole dataset: with n workers each row arrives n times
      per epoch.
    - "distributed_epoch" (`ShardingPolicy.DYNAMIC`): the dispatcher hands
      out the files one at a time to whichever worker asks for more, so the
      workers read an epoch together, each row once (a worker that fails
      mid-file may lose or repeat rows: tf.data's own caveat). The dataset
      must be made with `num_epochs=1` (with more, the epochs lead the
      pipeline and would be handed out whole: refused); for more epochs
      repeat the distributed dataset. What does not hold as without the
      service: the order (each worker shuffles its own records in its own
      buffer, and the workers' batches arrive interleaved as they come);
      one partial last batch per worker rather than per epoch (so
      `drop_remainder` drops up to one per worker); and each repetition
      reads the files in the same permutation with the same seeds. A
      worker reads ahead as far as its shuffle buffer (`shuffle_buffer`
      records) and the reader's interleave (a few files) hold: with few
      files per worker, or files smaller than the buffer, the shares are
      uneven (the first worker to start may take them all).
    - `ShardingPolicy.FILE` (static): worker i of n reads the file numbers
      i, i + n, ... of the permutation, fixed in advance. tf.data needs the
      workers listed in `DispatcherConfig.worker_addresses` and fails at the
      first element with fewer files than workers. Same two refusals as
      "distributed_epoch". `FILE_OR_DATA` acts as FILE: our datasets always
      have files to shard.
    - `ShardingPolicy.DATA`: every worker reads everything and keeps every
      n-th batch: each row once, no reading saved.
    - `ShardingPolicy.HINT`: our datasets hold no shard hint, so unless one
      is added to a derived dataset every worker produces everything.

    Splitting by files also needs whole files per input worker: a TFRecord
    `make_dataset` with fewer non-empty files than `num_shards` reads every
    n-th record of all files, and is refused for the modes that split files.

    Arrow shards read by the native op (`make_dataset`'s default for COO
    output) run under the service where the workers have the op: a worker
    process calls `load_reader_ops()` before it serves. Under
    "distributed_epoch" the dispatcher hands out the op's units (record-batch
    slices, in the epoch's order) rather than files, and each worker batches
    the rows of the units it gets (one partial batch per worker; positions
    it yields do not resume a plan); FILE and FILE_OR_DATA are refused for
    it (tf.data's static file sharding knows only its own readers).

    Args:
      dataset: a `make_dataset` dataset over TFRecord shards or over Arrow
        shards read by the native op, a `make_log_dataset` dataset without
        counters, or any other dataset the service can run.
      service: the dispatcher's address, e.g. "grpc://host:5050".
      processing_mode: one of the modes above, passed to tf.data as is.
      job_name: share one job between clients (see the tf.data service).
      **kwargs: the other arguments of `tf.data.experimental.service.distribute`.

    Returns:
      The distributed dataset, with the elements of `dataset`.

    Raises:
      ValueError (one line): `dataset` reads Parquet shards, or Arrow shards
        the op does not read (their reader is a `tf.py_function` that exists
        only in this process; convert to Arrow, or use TFRecord shards or
        `make_log_dataset`), or it reads Arrow shards through the op under
        static file sharding (FILE, FILE_OR_DATA), or it updates a `bad_lines`,
        `padded_lines` or `dropped` counter (which would stay 0); or the
        mode splits by files and `dataset` was made with `num_epochs` other
        than 1, or its TFRecord input shard is every n-th record.

    Example:
      >>> ds = make_dataset("out/train_tfrecord", 1024, num_epochs=1)  # doctest: +SKIP
      >>> mode = "distributed_epoch"
      >>> ds = transforms.distribute(ds, "grpc://dispatcher:5050", processing_mode=mode)  # doctest: +SKIP
    """
    check_distributable(dataset, processing_mode)
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=processing_mode, service=service, job_name=job_name, **kwargs
        )
    )


def load_reader_ops() -> bool:
    """Loads the native ops (the Arrow dataset op among them) into this process; whether they loaded.

    A tf.data service worker process calls it before serving, so that it can
    run datasets that read Arrow shards through the op.

    Example:
      >>> worker_ready = load_reader_ops()  # then tf.data.experimental.service.WorkerServer(...)
    """
    from ops import _native

    return _native.library() is not None
