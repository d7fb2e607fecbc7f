"""ComputeVocabulary: frequency-ranked vocabulary files Keras can load.

ComputeVocabulary counts every value of each feature with a combiner (each
worker counts its batches with `pc.value_counts` before the shuffle, so only
per-worker count tables cross it) and writes one text file per feature, a
token a line, most frequent first (ties by value). `keras.layers.StringLookup`
or `IntegerLookup(vocabulary=path, num_oov_indices=n)` then assigns exactly
the indices ApplyVocabulary (`transforms.beam.lookup`) does: OOV indices
`0..n-1`, the token on line `i` (from 0) index `n + i`.

TensorFlow reads a vocabulary file a whole line per token and refuses empty
lines, so the empty string, a token holding a newline and one ending in
carriage return cannot be written; they are left out of the file (and so map
to OOV both here and in Keras) and counted in the `unwritable_tokens` metric.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.atomic import atomic_write_text
from sparse_io.id_space import vocabulary_fingerprint
from sparse_io.paths import join_under
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import feature_names, require_columns
from transforms.beam._counts import CountTable, list_values

__all__ = ["ComputeVocabulary", "VocabularyFile", "check_int"]

_METRICS = "sparseflow.ComputeVocabulary"


@dataclasses.dataclass(frozen=True)
class VocabularyFile:
    """What ComputeVocabulary wrote for one feature.

    Attributes:
      feature: the column name.
      path: the vocabulary file (one token a line).
      size: tokens in the file.
      num_oov_buckets: the OOV indices a lookup reserves before the tokens.
      dtype: "string" or "int64" (the type of the counted values).
      id_space: the fingerprint of the file's bytes and OOV count
        (`sparse_io.id_space.vocabulary_fingerprint`).
      shared: the shared vocabulary's name when the file was counted over
        several features (`path` is then `<shared>.txt`), else None.
    """

    feature: str
    path: str
    size: int
    num_oov_buckets: int
    dtype: str
    id_space: str = ""
    shared: str | None = None


def _writable(values: pa.Array) -> np.ndarray:
    """A bool mask of the tokens a TensorFlow text-file vocabulary can hold as one line."""
    if pa.types.is_integer(values.type):
        return np.ones(len(values), dtype=bool)
    text = values.cast(pa.large_binary())
    bad = pc.or_(
        pc.equal(pc.binary_length(text), 0),
        pc.or_(pc.match_substring(text, "\n"), pc.ends_with(text, "\r")),
    )
    return ~bad.to_numpy(zero_copy_only=False)


def _lines(tokens: pa.Array) -> str:
    """The tokens as text, one a line (joined in Arrow, not token by token in Python)."""
    if not len(tokens):
        return ""
    text = tokens.cast(pa.large_string())
    one_row = pa.LargeListArray.from_arrays(pa.array([0, len(text)], pa.int64()), text)
    return pc.binary_join(one_row, pa.scalar("\n", pa.large_string()))[0].as_py() + "\n"


class _CountValuesFn(beam.CombineFn):
    """Combiner: list-column arrays of one feature -> a CountTable of their values."""

    def __init__(self, transform: str = "ComputeVocabulary"):
        self._transform = transform

    def create_accumulator(self) -> CountTable:
        return CountTable()

    def add_input(self, accumulator: CountTable, element: tuple[str, pa.Array]) -> CountTable:
        feature, column = element
        accumulator.add(list_values(column, feature, self._transform))
        return accumulator

    def merge_accumulators(self, accumulators) -> CountTable:
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            merged.merge(other)
        return merged

    def compact(self, accumulator: CountTable) -> CountTable:
        accumulator.table()
        return accumulator

    def extract_output(self, accumulator: CountTable) -> CountTable:
        return accumulator


def _columns_by_feature(batch: pa.RecordBatch, features: Sequence[str], transform: str,
                        shared: Mapping[str, str] | None = None):
    require_columns(batch, features, transform)
    for name in features:
        # A shared vocabulary's members are counted under its name: one count table for all of them.
        yield (shared or {}).get(name, name), (name, batch.column(name))


def _members(vocab: VocabularyFile, groups: Mapping[str, Sequence[str]]):
    """The file as each feature looks it up: a shared vocabulary once per member feature."""
    members = groups.get(vocab.feature)
    if members is None:
        yield vocab
        return
    for member in members:
        yield dataclasses.replace(vocab, feature=member, shared=vocab.feature)


class _WriteVocabularyFn(beam.DoFn):
    def __init__(self, output_dir: str, min_frequency: int, top_k: int | None, num_oov_buckets: int):
        self._output_dir = output_dir
        self._min_frequency = min_frequency
        self._top_k = top_k
        self._num_oov = num_oov_buckets
        self._unwritable = beam.metrics.Metrics.counter(_METRICS, "unwritable_tokens")

    def process(self, element: tuple[str, CountTable]):
        feature, counts = element
        table = counts.sorted(self._min_frequency)
        values = table.column("value").combine_chunks()
        dtype = "int64" if pa.types.is_integer(values.type) else "string"
        keep = _writable(values)
        if not keep.all():
            self._unwritable.inc(int((~keep).sum()))
            values = values.filter(pa.array(keep))
        if self._top_k is not None:
            values = values.slice(0, self._top_k)
        path = join_under(self._output_dir, f"{feature}.txt")
        text = _lines(values)
        atomic_write_text(path, text, output_root=self._output_dir)
        fingerprint = vocabulary_fingerprint(text, self._num_oov)
        yield VocabularyFile(feature, path, len(values), self._num_oov, dtype, fingerprint)


class ComputeVocabulary(beam.PTransform):
    """Counts each feature's values and writes a Keras-loadable vocabulary file per feature.

    Tokens are ordered by frequency (descending), ties by value (ascending:
    byte order for strings); tokens seen fewer than `min_frequency` times are
    dropped, then only the first `top_k` kept.

    Args:
      features: list<string>/list<int*> (or flat) column names to count.
      output_dir: directory for `<feature>.txt` (local or any Beam filesystem).
      min_frequency: minimum count for a token to be kept.
      top_k: keep at most this many tokens (None: all).
      num_oov_buckets: OOV indices a lookup reserves (recorded in the output
        for ApplyVocabulary; pass the same as Keras `num_oov_indices`).
      shared: feature -> shared vocabulary name: the features of one name are
        counted together into `<name>.txt` (one id space).

    Input: PCollection[pa.RecordBatch]. Output: PCollection[VocabularyFile],
    one per feature (the members of a shared vocabulary each get its file).
    Files are written atomically; a feature with no tokens gets an empty file.

    Raises: ValueError at construction for bad arguments, among them a
    feature name that would put its file outside `output_dir`
    (`sparse_io.paths.join_under`); while running for a missing column or a
    null id (naming feature and row).

    Example:
      >>> import os, tempfile
      >>> from transforms.testing import test_pipeline
      >>> out = tempfile.mkdtemp()
      >>> with test_pipeline() as p:
      ...     batches = p | beam.Create([pa.record_batch({"genre": [["drama", "comedy"], ["drama"]]})])
      ...     vocab = batches | ComputeVocabulary(["genre"], out)
      >>> open(os.path.join(out, "genre.txt")).read().split()  # count descending: keras StringLookup reads it
      ['drama', 'comedy']
    """

    def __init__(
        self,
        features: str | Sequence[str],
        output_dir: str,
        min_frequency: int = 1,
        top_k: int | None = None,
        num_oov_buckets: int = 1,
        shared: Mapping[str, str] | None = None,
    ):
        super().__init__()
        self._features = feature_names(features, "ComputeVocabulary")
        self._shared = {f: v for f, v in (shared or {}).items() if f in self._features}
        self._groups: dict[str, list[str]] = {}
        for name in self._features:
            if name in self._shared:
                self._groups.setdefault(self._shared[name], []).append(name)
        unshared = set(self._features) - set(self._shared)
        clash = sorted(unshared & set(self._groups))
        if clash:
            raise ValueError(f"ComputeVocabulary: {clash[0]!r} is both a feature and a shared vocabulary's name")
        check_int("min_frequency", min_frequency, 1)
        if top_k is not None:
            check_int("top_k", top_k, 1)
        check_int("num_oov_buckets", num_oov_buckets, 0)
        if not output_dir:
            raise ValueError("ComputeVocabulary: output_dir must be a directory path")
        for name in [*self._features, *self._groups]:  # a name that would leave output_dir fails here, before any write
            join_under(output_dir, f"{name}.txt")
        self._output_dir = output_dir
        self._min_frequency = min_frequency
        self._top_k = top_k
        self._num_oov = num_oov_buckets

    def expand(self, batches):
        features = self._features
        return (
            batches
            | "ColumnsByFeature" >> beam.FlatMap(_columns_by_feature, features, "ComputeVocabulary", self._shared)
            | "Count" >> beam.CombinePerKey(_CountValuesFn())
            | "Write"
            >> beam.ParDo(
                _WriteVocabularyFn(self._output_dir, self._min_frequency, self._top_k, self._num_oov)
            )
            | "PerFeature" >> beam.FlatMap(_members, self._groups)
        )


def check_int(name: str, value, low: int) -> None:
    """Raises ValueError naming `name` unless `value` is an integer (not a bool) >= `low`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
