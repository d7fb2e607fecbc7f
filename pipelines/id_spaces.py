"""One id space across ingests: what schema.json records of it, and reusing another ingest's (`--vocab_from`).

The ingest records each sparse feature's id space in schema.json
(`sparse_io.id_space`): hash settings (bucket count, salt) for hashed
features; `vocabulary_size` (tokens plus OOV buckets), `num_oov_buckets` and
the count of OOV ids for vocabulary features. With `vocab_from: DIR`, an
ingest (held-out days, tomorrow's logs) takes every sparse feature's id
space from the ingest output DIR instead of building its own: the same bucket
count and salt, the very vocabulary files (copied to its own `vocab/`, so the
fingerprints match byte for byte); values DIR's vocabulary never saw go to the
OOV buckets and are counted (`oov_ids` in schema.json and stats.json).

Example::

    python -m pipelines.ingest --input 'day_1*.tsv' --config c.yaml --output out/train
    python -m pipelines.ingest --input 'day_2*.tsv' --config c.yaml --output out/heldout --vocab_from out/train
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipelines.config import FeaturePlan, IngestConfig
from pipelines.errors import UsageError
from sparse_io.atomic import atomic_write_text
from sparse_io.id_space import hash_fingerprint
from sparse_io.schema import SCHEMA_FILE, Schema, SchemaError
from transforms.beam._counts import list_values

__all__ = ["ReusedVocabulary", "adopt_id_spaces", "hash_updates", "vocabulary_updates", "CopyVocabularies",
           "CountOovIds"]


@dataclasses.dataclass(frozen=True)
class ReusedVocabulary:
    """A vocabulary taken from another ingest: its file there, OOV count, size and fingerprint."""

    feature: str
    path: str
    num_oov_buckets: int
    vocabulary_size: int
    id_space: str | None


def _load_source(source_dir: str) -> Schema:
    path = FileSystems.join(source_dir, SCHEMA_FILE)
    if not FileSystems.exists(path):
        raise UsageError(f"--vocab_from {source_dir!r}: no {SCHEMA_FILE} there; give an ingest output directory")
    try:
        return Schema.load(path)
    except SchemaError as e:
        raise UsageError(f"--vocab_from {source_dir!r}: {e}") from e


def adopt_id_spaces(config: IngestConfig, source_dir: str, vocab_dir: str = "vocab"
                    ) -> tuple[IngestConfig, dict[str, ReusedVocabulary]]:
    """`config` with every planned sparse feature's id settings taken from the ingest output `source_dir`.

    Returns the adjusted config (hashed features get the source's bucket count
    and salt; vocabulary features are no longer counted) and the vocabularies
    to reuse, by feature.

    Raises:
      UsageError: `source_dir` is not an ingest output, or lacks a feature of
        the config, or records no id space for it.
    """
    source = _load_source(source_dir)
    plans, reused = [], {}
    for plan in config.features:
        if plan.name not in source:
            raise UsageError(f"--vocab_from {source_dir!r}: feature {plan.name!r} is not in its {SCHEMA_FILE}")
        spec = source[plan.name]
        if spec.hash_buckets:
            plans.append(FeaturePlan(plan.name, hash_buckets=spec.hash_buckets, salt=spec.salt))
        elif spec.vocabulary_size:
            path = FileSystems.join(source_dir, vocab_dir, f"{plan.name}.txt")
            if not FileSystems.exists(path):
                raise UsageError(f"--vocab_from {source_dir!r}: feature {plan.name!r} has no vocabulary file {path}")
            num_oov = 1 if spec.num_oov_buckets is None else spec.num_oov_buckets
            plans.append(FeaturePlan(plan.name, num_oov_buckets=num_oov))
            reused[plan.name] = ReusedVocabulary(plan.name, path, num_oov, spec.vocabulary_size, spec.id_space)
        else:
            raise UsageError(f"--vocab_from {source_dir!r}: feature {plan.name!r} has neither hash_buckets nor "
                             f"vocabulary_size in its {SCHEMA_FILE}")
    return dataclasses.replace(config, features=tuple(plans)), reused


def hash_updates(buckets: int, salt) -> dict:
    """schema.json fields of a feature hashed into `buckets` with `salt`."""
    update = {"hash_buckets": buckets, "id_space": hash_fingerprint(buckets, salt)}
    if salt is not None:
        update["salt"] = salt
    return update


def vocabulary_updates(vocab) -> tuple[str, dict]:
    """(feature, schema.json fields) of a vocabulary (a `VocabularyFile` or a `ReusedVocabulary`).

    `vocabulary_size` is the id range a table needs: tokens plus OOV buckets,
    at least 1 so that a feature with no ids still has a (never used) row.
    """
    if isinstance(vocab, ReusedVocabulary):
        size = vocab.vocabulary_size
    else:
        size = max(1, vocab.size + vocab.num_oov_buckets)
    return vocab.feature, {"vocabulary_size": size, "num_oov_buckets": vocab.num_oov_buckets,
                           "id_space": vocab.id_space}


class _CopyVocabularyFn(beam.DoFn):
    def __init__(self, vocab_dir: str):
        self._vocab_dir = vocab_dir

    def process(self, vocab: ReusedVocabulary):
        with FileSystems.open(vocab.path) as f:
            text = f.read().decode("utf-8")
        atomic_write_text(FileSystems.join(self._vocab_dir, f"{vocab.feature}.txt"), text)
        yield vocabulary_updates(vocab)


class CopyVocabularies(beam.PTransform):
    """Copies reused vocabulary files into this ingest's `vocab/`; yields (feature, schema.json fields)."""

    def __init__(self, reused: dict[str, ReusedVocabulary], vocab_dir: str):
        super().__init__()
        self._reused = sorted(reused.values(), key=lambda v: v.feature)
        self._vocab_dir = vocab_dir

    def expand(self, pbegin):
        return pbegin | "Vocabularies" >> beam.Create(self._reused) | "Copy" >> beam.ParDo(
            _CopyVocabularyFn(self._vocab_dir))


def _oov_counts(batch: pa.RecordBatch, num_oov: dict[str, int], counted_as: dict[str, str]):
    columns = list(num_oov.items()) + [(column, num_oov[f]) for column, f in counted_as.items()]
    for column, buckets in columns:
        ids = list_values(batch.column(column), column, "CountOovIds").to_numpy(zero_copy_only=False)
        yield counted_as.get(column, column), int(np.count_nonzero(ids < buckets))


class CountOovIds(beam.PTransform):
    """Counts, per vocabulary feature, the looked-up ids that fell in its OOV buckets.

    Input: PCollection[pa.RecordBatch] after ApplyVocabulary. Output:
    (feature, {"oov_ids": count}) for every feature of `num_oov` (0 when no
    batch held it). `counted_as` maps more columns looked up in a feature's
    vocabulary (a history's `target_<item>`) to that feature: their OOV ids
    count towards it.
    """

    def __init__(self, num_oov: dict[str, int], counted_as: dict[str, str] | None = None):
        super().__init__()
        self._num_oov = dict(num_oov)
        self._counted_as = dict(counted_as or {})
        unknown = sorted(set(self._counted_as.values()) - set(self._num_oov))
        if unknown:
            raise ValueError(f"CountOovIds: counted_as names feature(s) {unknown} without OOV buckets")

    def expand(self, batches):
        zeros = batches.pipeline | "Zeros" >> beam.Create([(f, 0) for f in sorted(self._num_oov)])
        counted = batches | "Count" >> beam.FlatMap(_oov_counts, self._num_oov, self._counted_as)
        return ((zeros, counted) | "Both" >> beam.Flatten() | "Sum" >> beam.CombinePerKey(sum)
                | "AsUpdate" >> beam.MapTuple(lambda feature, n: (feature, {"oov_ids": n})))
