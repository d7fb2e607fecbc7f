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

DIR must be a committed output, and what is taken from it is verified first:
its schema.json and every vocabulary file used must match DIR's manifest
(size and CRC-32C) and each vocabulary the id space schema.json records for
it. The new output's vocabulary sizes and fingerprints are computed from the
bytes it copies, and both the copy and the lookup check that those bytes are
the ones verified (a file changed meanwhile is a `CorruptFileError`).

Example::

    python -m pipelines.ingest --input 'day_1*.tsv' --config c.yaml --output out/train
    python -m pipelines.ingest --input 'day_2*.tsv' --config c.yaml --output out/heldout --vocab_from out/train
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import google_crc32c
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipelines.config import FeaturePlan, IngestConfig
from pipelines.config_derived import reuse_derived
from pipelines.errors import UsageError
from sparse_io.atomic import atomic_output
from sparse_io.id_space import hash_fingerprint, vocabulary_fingerprint
from sparse_io.manifest import ManifestError, read_manifest, read_verified
from sparse_io.output_files import VOCAB_DIR
from sparse_io.schema import SCHEMA_FILE, Schema, SchemaError
from transforms.beam._counts import list_values
from transforms.beam.lookup import read_vocabulary_bytes

__all__ = ["ReusedVocabulary", "adopt_id_spaces", "vocabulary_fields", "hash_updates", "vocabulary_updates",
           "CopyVocabularies", "CountOovIds"]


@dataclasses.dataclass(frozen=True)
class ReusedVocabulary:
    """A vocabulary taken from another ingest: its file there, OOV count, size, fingerprint and CRC-32C.

    `vocabulary_size` and `id_space` are those of the file's bytes as verified
    (`crc32c`, 8 hex digits), which match what the source's schema.json records.
    """

    feature: str
    path: str
    num_oov_buckets: int
    vocabulary_size: int
    id_space: str | None
    crc32c: str = ""
    shared: str | None = None  # the shared vocabulary's name: the file is `<shared>.txt`

    @property
    def file_name(self) -> str:
        """The vocabulary file's name without `.txt`: the shared vocabulary's, or the feature's own."""
        return self.shared or self.feature


def _refused(source_dir: str, problem) -> UsageError:
    return UsageError(f"--vocab_from {source_dir!r}: {problem}")


def _load_source(source_dir: str) -> tuple[Schema, dict]:
    """The source's schema (from its verified schema.json bytes) and manifest."""
    path = FileSystems.join(source_dir, SCHEMA_FILE)
    if not FileSystems.exists(path):
        raise _refused(source_dir, f"no {SCHEMA_FILE} there; give an ingest output directory")
    try:
        manifest = read_manifest(source_dir)
        text = read_verified(source_dir, SCHEMA_FILE, manifest)
        return Schema.from_json(text.decode("utf-8")), manifest
    except (ManifestError, SchemaError, UnicodeDecodeError) as e:
        raise _refused(source_dir, e) from e


def vocabulary_fields(data: bytes, num_oov_buckets: int) -> tuple[int, str]:
    r"""(vocabulary_size, id_space) of a vocabulary file's bytes: tokens plus OOV buckets (at least 1), fingerprint.

    Tokens are counted as `transforms.beam.lookup.read_vocabulary` reads them:
    one a line, a last line without its newline included.

    Example:
      >>> vocabulary_fields(b"a\nb\n", 1)[0]
      3
    """
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return max(1, lines + num_oov_buckets), vocabulary_fingerprint(data, num_oov_buckets)


def _reuse_vocabulary(source_dir: str, manifest: dict, spec, vocab_dir: str) -> ReusedVocabulary:
    file_name = spec.shared_vocabulary or spec.name
    relative = f"{vocab_dir}/{file_name}.txt"
    path = FileSystems.join(source_dir, vocab_dir, f"{file_name}.txt")
    if not FileSystems.exists(path):
        raise _refused(source_dir, f"feature {spec.name!r} has no vocabulary file {path}")
    try:
        data = read_verified(source_dir, relative, manifest)
    except ManifestError as e:
        raise _refused(source_dir, e) from e
    num_oov = 1 if spec.num_oov_buckets is None else spec.num_oov_buckets
    size, fingerprint = vocabulary_fields(data, num_oov)
    # The manifest proves the file is what was committed; schema.json's record proves it is the vocabulary the
    # ids were made with (a file edited and committed again matches its manifest but not this).
    if spec.id_space is not None and spec.id_space != fingerprint or size != spec.vocabulary_size:
        raise _refused(source_dir, f"{relative} is not the vocabulary whose id space {SCHEMA_FILE} records for "
                       f"{spec.name!r} ({size} ids, {fingerprint}; {SCHEMA_FILE}: {spec.vocabulary_size} ids, "
                       f"{spec.id_space})")
    return ReusedVocabulary(spec.name, path, num_oov, size, fingerprint, f"{google_crc32c.value(data):08x}",
                            spec.shared_vocabulary)


def adopt_id_spaces(config: IngestConfig, source_dir: str, vocab_dir: str = VOCAB_DIR
                    ) -> tuple[IngestConfig, dict[str, ReusedVocabulary]]:
    """`config` with every planned sparse feature's id settings taken from the ingest output `source_dir`.

    Returns the adjusted config (hashed features get the source's bucket count
    and salt; vocabulary features are no longer counted) and the vocabularies
    to reuse, by feature.

    Raises:
      UsageError: `source_dir` is not a committed ingest output, its
        schema.json or a vocabulary file used differs from its manifest (or a
        vocabulary from the id space schema.json records), or it lacks a
        feature of the config, or records no id space for it.
    """
    source, manifest = _load_source(source_dir)
    plans, reused = [], {}
    for plan in config.features:
        if plan.name not in source:
            raise _refused(source_dir, f"feature {plan.name!r} is not in its {SCHEMA_FILE}")
        spec = source[plan.name]
        if spec.hash_buckets:
            plans.append(FeaturePlan(plan.name, hash_buckets=spec.hash_buckets, salt=spec.salt))
        elif spec.vocabulary_size:
            vocabulary = _reuse_vocabulary(source_dir, manifest, spec, vocab_dir)
            plans.append(FeaturePlan(plan.name, num_oov_buckets=vocabulary.num_oov_buckets,
                                     shared_vocabulary=spec.shared_vocabulary))
            reused[plan.name] = vocabulary
        else:
            raise _refused(source_dir, f"feature {plan.name!r} has neither hash_buckets nor vocabulary_size in its "
                           f"{SCHEMA_FILE}")
    crosses = tuple(adopt_cross(plan, source, source_dir) for plan in config.crosses)
    try:  # bucket boundaries and scale parameters are taken as they are, like the vocabularies
        derived = reuse_derived(config.derived, source)
    except (ValueError, SchemaError) as e:
        raise _refused(source_dir, e) from None
    return dataclasses.replace(config, features=tuple(plans), crosses=crosses, derived=derived), reused


def adopt_cross(plan, source: Schema, source_dir: str):
    """A cross of the config with the bucket count and per-row cap of the same cross in `source` (its schema).

    Raises:
      UsageError: `source` has no such feature, or it is not a cross of the same columns in the same order.
    """
    from sparse_io.crosses import CrossSpec

    theirs = source[plan.name] if plan.name in source else None
    if theirs is None or theirs.cross is None:
        raise _refused(source_dir, f"cross {plan.name!r} is not a cross in its {SCHEMA_FILE}")
    if tuple(theirs.cross) != plan.spec.sources:
        raise _refused(source_dir, f"cross {plan.name!r} crosses {list(theirs.cross)} there, "
                                   f"{list(plan.spec.sources)} here")
    spec = CrossSpec(plan.spec.sources, theirs.hash_buckets, theirs.cross_max_per_row or plan.spec.max_per_row)
    return dataclasses.replace(plan, spec=spec)


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
    fields = {"vocabulary_size": size, "num_oov_buckets": vocab.num_oov_buckets, "id_space": vocab.id_space}
    if vocab.shared:
        fields["shared_vocabulary"] = vocab.shared
    return vocab.feature, fields


class _CopyVocabularyFn(beam.DoFn):
    def __init__(self, vocab_dir: str):
        self._vocab_dir = vocab_dir

    def process(self, vocabs: list[ReusedVocabulary]):
        """Copies one file, then yields the schema.json fields of each feature looked up in it."""
        first = vocabs[0]
        data = read_vocabulary_bytes(first.path, first.crc32c)
        with atomic_output(FileSystems.join(self._vocab_dir, f"{first.file_name}.txt")) as f:
            f.write(data)
        # The size and fingerprint of the bytes copied: equal to the source's, since the checksums agree.
        size, fingerprint = vocabulary_fields(data, first.num_oov_buckets)
        for vocab in vocabs:  # a shared vocabulary: one file, several features
            yield vocabulary_updates(dataclasses.replace(vocab, vocabulary_size=size, id_space=fingerprint))


class CopyVocabularies(beam.PTransform):
    """Copies reused vocabulary files into this ingest's `vocab/`; yields (feature, schema.json fields)."""

    def __init__(self, reused: dict[str, ReusedVocabulary], vocab_dir: str):
        super().__init__()
        files: dict[str, list[ReusedVocabulary]] = {}
        for vocab in sorted(reused.values(), key=lambda v: v.feature):
            files.setdefault(vocab.file_name, []).append(vocab)
        self._reused = [files[name] for name in sorted(files)]
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
