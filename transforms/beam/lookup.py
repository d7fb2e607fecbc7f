"""ApplyVocabulary: tokens to the indices Keras's StringLookup / IntegerLookup give them.

A vocabulary file (as ComputeVocabulary writes it: a token a line) assigns
OOV indices `0..n-1` and the token on line `i` the index `n + i`, which is
what `keras.layers.StringLookup(vocabulary=path, num_oov_indices=n)` does.
The lookup itself is `sparse_io.vocabulary_lookup.VocabularyLookup`, the
Arrow side of `sparse_io.id_maps.VocabularySpec`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from sparse_io.errors import CorruptFileError
from sparse_io.hashing import normalize_salt
from sparse_io.id_maps import VocabularySpec, vocabulary_tokens
from sparse_io.paths import join_under
from sparse_io.vocabulary_lookup import VocabularyLookup, check_oov_method
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import feature_names, replace_column, require_columns
from transforms.beam._counts import list_values
from transforms.beam.vocabulary import check_int

__all__ = ["ApplyVocabulary", "VocabularyLookup", "read_vocabulary", "read_vocabulary_bytes"]

_METRICS = "sparseflow.ApplyVocabulary"


def read_vocabulary_bytes(path: str, crc32c: str | None = None) -> bytes:
    """A vocabulary file's bytes; with `crc32c` (8 hex digits), only when they have that CRC-32C.

    Raises:
      CorruptFileError: the bytes have another checksum (the file changed
        since it was verified).
    """
    with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read()
    if crc32c is not None:
        import google_crc32c

        found = f"{google_crc32c.value(data):08x}"
        if found != crc32c:
            raise CorruptFileError(path, f"has checksum {found}, not the {crc32c} verified when the ingest began "
                                   "(the vocabulary changed meanwhile)")
    return data


def read_vocabulary(path: str, crc32c: str | None = None) -> list[str]:
    """The tokens of a vocabulary file, one a line, as TensorFlow's text-file initializer reads them.

    `crc32c`: as `read_vocabulary_bytes`'s.
    """
    return list(vocabulary_tokens(read_vocabulary_bytes(path, crc32c)))


class _ApplyVocabularyFn(beam.DoFn):
    def __init__(self, files: dict[str, str] | None, features, num_oov, oov_method, salt,
                 checksums: dict[str, str] | None = None):
        self._files = files
        self._checksums = checksums or {}
        self._features = features
        self._num_oov = num_oov  # None, an int, or feature -> int
        self._oov_method = oov_method
        self._salt = salt
        self._specs: dict[tuple[str, str, int], VocabularySpec] = {}
        self._oov_count = beam.metrics.Metrics.counter(_METRICS, "oov_ids")

    def _buckets(self, feature: str, recorded: int) -> int:
        if self._num_oov is None:
            return recorded
        if isinstance(self._num_oov, int):
            return self._num_oov
        return self._num_oov.get(feature, recorded)

    def setup(self):
        # Vocabularies known by path are loaded once per worker, before any batch.
        for feature, path in (self._files or {}).items():
            self._lookup(feature, path, self._buckets(feature, 1))

    def _lookup(self, feature: str, path: str, num_oov: int) -> VocabularySpec:
        key = (feature, path, num_oov)
        if key not in self._specs:
            checksum = self._checksums.get(feature) if self._files else None
            spec = VocabularySpec(read_vocabulary(path, checksum), num_oov, oov_method=self._oov_method,
                                  salt=self._salt)
            spec.lookup()  # built here, in setup for known paths, not on the first batch
            self._specs[key] = spec
        return self._specs[key]

    def process(self, batch: pa.RecordBatch, computed=None):
        if computed is not None:
            files = {v.feature: (v.path, self._buckets(v.feature, v.num_oov_buckets)) for v in computed}
            if self._features is not None:
                missing = [f for f in self._features if f not in files]
                if missing:
                    raise ValueError(f"ApplyVocabulary: no vocabulary was computed for feature(s) {missing}")
                files = {f: files[f] for f in self._features}
        else:
            files = {f: (p, self._buckets(f, 1)) for f, p in self._files.items()}
        require_columns(batch, files, "ApplyVocabulary")
        for feature, (path, num_oov) in files.items():
            column = batch.column(feature)
            list_values(column, feature, "ApplyVocabulary")  # a null id is named as ApplyVocabulary's error
            ids = self._lookup(feature, path, num_oov).apply_arrow(column, feature)
            flat = pc.list_flatten(ids) if pa.types.is_list(ids.type) or pa.types.is_large_list(ids.type) else ids
            self._oov_count.inc(int(pc.sum(pc.less(flat, num_oov)).as_py() or 0))
            batch = replace_column(batch, feature, ids)
        yield batch


class ApplyVocabulary(beam.PTransform):
    """Replaces tokens by their vocabulary index, exactly as Keras's lookup layers do.

    Args:
      vocabularies: the output of ComputeVocabulary in the same pipeline (a
        PCollection[VocabularyFile], used as a side input), or a mapping
        feature -> vocabulary file path, or a directory holding `<feature>.txt`
        files (then `features` names them).
      features: with a directory, the features to look up.
      num_oov_buckets: OOV indices (Keras `num_oov_indices`): an int for all
        features or a mapping; by default what ComputeVocabulary recorded (1
        for paths).
      oov_method: "floormod" (Keras's default for integers: `id mod n`) or
        "farmhash" (hash the decimal text); strings always hash.
      salt: Keras's `salt` for the "farmhash" OOV buckets.
      checksums: feature -> CRC-32C (8 hex digits) a vocabulary given by path
        must have when loaded (a `CorruptFileError` otherwise): the bytes
        verified before the pipeline began are the bytes looked up.

    Input/output: PCollection[pa.RecordBatch]; each looked-up column becomes
    `list<int64>` (or `int64` when flat). Vocabularies given as paths are
    loaded in `setup()`, once per worker.

    Raises: ValueError for an OOV value when num_oov_buckets is 0, a missing
    column, a null id, or a vocabulary with a repeated token.

    Example:
      >>> import tempfile
      >>> from apache_beam.testing.util import assert_that
      >>> from transforms.beam.vocabulary import ComputeVocabulary
      >>> from transforms.testing import equal_to_rows, test_pipeline
      >>> with test_pipeline() as p:
      ...     batches = p | beam.Create([pa.record_batch({"C1": [["a", "b"], ["a"], ["zz"]]})])
      ...     vocab = batches | ComputeVocabulary(["C1"], tempfile.mkdtemp())
      ...     indexed = batches | ApplyVocabulary(vocab)  # "a": line 0, "b": line 1, after one OOV index
      ...     _ = assert_that(indexed, equal_to_rows([{"C1": [1, 2]}, {"C1": [1]}, {"C1": [3]}]))
    """

    def __init__(
        self,
        vocabularies,
        features: str | Sequence[str] | None = None,
        num_oov_buckets: int | Mapping[str, int] | None = None,
        *,
        oov_method: str = "floormod",
        salt: int | Sequence[int] | None = None,
        checksums: Mapping[str, str] | None = None,
    ):
        super().__init__()
        check_oov_method(oov_method, salt)
        self._checksums = dict(checksums or {})
        self._salt = normalize_salt(salt)
        self._oov_method = oov_method
        self._computed = None
        self._files = None
        self._features = None if features is None else feature_names(features, "ApplyVocabulary")
        if isinstance(vocabularies, beam.pvalue.PCollection):
            self._computed = vocabularies
        elif isinstance(vocabularies, Mapping):
            self._files = dict(vocabularies)
            if self._features is not None:
                self._files = {f: self._files[f] for f in self._features}
        elif isinstance(vocabularies, str):
            if self._features is None:
                raise ValueError("ApplyVocabulary: with a vocabulary directory, name the features")
            self._files = {n: join_under(vocabularies, f"{n}.txt") for n in self._features}
        else:
            raise ValueError(
                "ApplyVocabulary: vocabularies must be ComputeVocabulary's output, a mapping "
                f"feature -> path or a directory, got {type(vocabularies).__name__}"
            )
        if isinstance(num_oov_buckets, Mapping):
            for name, value in num_oov_buckets.items():
                check_int(f"num_oov_buckets[{name!r}]", value, 0)
            num_oov_buckets = dict(num_oov_buckets)
        elif num_oov_buckets is not None:
            check_int("num_oov_buckets", num_oov_buckets, 0)
        self._num_oov = num_oov_buckets
        for path in (self._files or {}).values():
            if FileSystems.get_scheme(path) is None and not os.path.exists(path):
                raise ValueError(f"ApplyVocabulary: vocabulary file {path!r} does not exist")

    def expand(self, batches):
        fn = _ApplyVocabularyFn(self._files, self._features, self._num_oov, self._oov_method, self._salt,
                                self._checksums)
        if self._computed is not None:
            side = beam.pvalue.AsList(self._computed)
            return batches | "Lookup" >> beam.ParDo(fn, computed=side).with_output_types(pa.RecordBatch)
        return batches | "Lookup" >> beam.ParDo(fn).with_output_types(pa.RecordBatch)
