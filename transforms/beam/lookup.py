"""ApplyVocabulary: tokens to the indices Keras's StringLookup / IntegerLookup give them.

A vocabulary file (as ComputeVocabulary writes it: a token a line) assigns
OOV indices `0..n-1` and the token on line `i` the index `n + i`, which is
what `keras.layers.StringLookup(vocabulary=path, num_oov_indices=n)` does.
Lookups are vectorised: strings through a native hash table that compares
bytes (`sparse_io.token_table`; where it cannot be built, through their
Fingerprint64 in a sorted table, then compared byte for byte: its
reference), integers through a sorted array.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from sparse_io import token_table
from sparse_io.errors import CorruptFileError
from sparse_io.hashing import fingerprint64, hash_strings, normalize_salt
from sparse_io.paths import join_under
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
    text = read_vocabulary_bytes(path, crc32c).decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class VocabularyLookup:
    """Token -> index for one feature, vectorised; the index Keras's lookup layers give.

    In-vocabulary token on line `i`: `num_oov_buckets + i`. Others: 0 with one
    OOV bucket; with more, `value mod n` for integers (`oov_method="floormod"`,
    Keras's default) or the Fingerprint64 bucket of the text (`"farmhash"`,
    SipHash with a `salt`), as Keras does.

    Strings are found by their Fingerprint64 in a sorted table and then
    compared byte for byte, so a hash collision cannot produce a wrong index.

    Example:
      >>> lookup = VocabularyLookup(["b", "a"], num_oov_buckets=1)
      >>> lookup(pa.array(["a", "zz", "b"]), "f").tolist()
      [2, 0, 1]
    """

    def __init__(
        self,
        tokens: Sequence[str] | Sequence[int],
        num_oov_buckets: int = 1,
        *,
        oov_method: str = "floormod",
        salt: int | Sequence[int] | None = None,
        feature: str | None = None,
    ):
        _check_oov_method(oov_method, salt)
        self._num_oov = num_oov_buckets
        self._oov_method = oov_method
        self._salt = normalize_salt(salt)
        self._feature = feature
        self._text = pa.array(list(tokens), pa.large_string()) if tokens else pa.array([], pa.large_string())
        self._int_keys: tuple[np.ndarray, np.ndarray] | None = None
        self._str_keys: tuple[np.ndarray, np.ndarray] | None = None
        self._table: token_table.TokenTable | None = None

    def __getstate__(self) -> dict:
        # The native table is rebuilt where the lookup is unpickled (it holds a pointer).
        return {**self.__dict__, "_table": None}

    def __len__(self) -> int:
        return len(self._text)

    def _sorted_ints(self) -> tuple[np.ndarray, np.ndarray]:
        if self._int_keys is None:
            try:
                keys = (
                    pc.cast(self._text, pa.int64()).to_numpy() if len(self._text) else np.zeros(0, np.int64)
                )
            except pa.ArrowInvalid as e:
                raise ValueError(
                    f"feature {self._feature!r}: integer ids but the vocabulary has a non-integer token ({e})"
                ) from e
            order = np.argsort(keys, kind="stable")
            self._int_keys = (keys[order], order)
            _check_unique(self._int_keys[0], self._feature)
        return self._int_keys

    def _sorted_hashes(self) -> tuple[np.ndarray, np.ndarray]:
        if self._str_keys is None:
            hashes = fingerprint64(self._text)
            order = np.argsort(hashes, kind="stable")
            self._str_keys = (hashes[order], order)
            _check_unique_tokens(self._text, self._feature)
        return self._str_keys

    def _native_table(self) -> token_table.TokenTable | None:
        """The native exact-match table of the tokens (built once), or None where it cannot run."""
        if self._table is None and token_table.available():
            _check_unique_tokens(self._text, self._feature)
            self._table = token_table.TokenTable(self._text)
        return self._table

    def __call__(self, values: pa.Array, feature: str) -> np.ndarray:
        """int64 indices of flat `values` (strings or integers, no nulls)."""
        n = len(values)
        table = None if pa.types.is_integer(values.type) else self._native_table()
        if table is not None:
            position = table.lookup(values)
            found = position >= 0
            out = np.where(found, position + self._num_oov, 0)
        else:
            found, out = self._search(values, n)
        oov = ~found
        if oov.any():
            out[oov] = self._oov_indices(values, oov, feature)
        return out

    def _search(self, values: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(found, index) by binary search: the reference of the native table, and the path for integers."""
        if pa.types.is_integer(values.type):
            keys, order = self._sorted_ints()
            ids = values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            pos = np.minimum(np.searchsorted(keys, ids), max(len(keys) - 1, 0))
            found = keys[pos] == ids if len(keys) else np.zeros(n, bool)
        else:
            keys, order = self._sorted_hashes()
            hashes = fingerprint64(values)
            # Leftmost slot with this hash; colliding tokens sit next to each other.
            pos = np.minimum(np.searchsorted(keys, hashes), max(len(keys) - 1, 0))
            found = np.zeros(n, bool)
            if len(keys):
                candidate = keys[pos] == hashes
                found = candidate.copy()
                text = values.cast(pa.large_string()) if not pa.types.is_large_string(values.type) else values
                idx = np.flatnonzero(candidate)
                same = pc.equal(text.take(pa.array(idx)), self._text.take(pa.array(order[pos[idx]])))
                found[idx] = same.to_numpy(zero_copy_only=False)
                missed = idx[~found[idx]]
                if missed.size:  # a true 64-bit collision: check the neighbours with the same hash
                    found, pos = _resolve_collisions(
                        keys, order, self._text, text, hashes, missed, found, pos
                    )
        return found, np.where(found, order[pos] + self._num_oov if len(keys) else 0, 0).astype(np.int64)

    def _oov_indices(self, values: pa.Array, oov: np.ndarray, feature: str) -> np.ndarray:
        if self._num_oov == 0:
            first = int(np.argmax(oov))
            raise ValueError(
                f"ApplyVocabulary: feature {feature!r}: value {values[first].as_py()!r} (position {first}) "
                "is not in the vocabulary and num_oov_buckets is 0"
            )
        if self._num_oov == 1:
            return np.zeros(int(oov.sum()), np.int64)
        missing = values.filter(pa.array(oov))
        if pa.types.is_integer(values.type) and self._oov_method == "floormod":
            return np.mod(missing.to_numpy(zero_copy_only=False).astype(np.int64), self._num_oov)
        return hash_strings(missing, self._num_oov, self._salt, feature=feature)


def _check_oov_method(oov_method: str, salt) -> None:
    if oov_method not in ("floormod", "farmhash"):
        raise ValueError(f"oov_method must be 'floormod' or 'farmhash', got {oov_method!r}")
    if salt is not None and oov_method != "farmhash":
        raise ValueError("a salt applies to oov_method='farmhash' only (as in Keras)")


def _check_unique(sorted_keys: np.ndarray, feature: str | None) -> None:
    dup = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
    if dup.size:
        raise ValueError(f"feature {feature!r}: vocabulary token {sorted_keys[dup[0]]!r} appears twice")


def _check_unique_tokens(tokens: pa.Array, feature: str | None) -> None:
    if len(pc.unique(tokens)) != len(tokens):
        counts = pc.value_counts(tokens)
        repeated = counts.filter(pc.greater(counts.field("counts"), 1))
        raise ValueError(
            f"feature {feature!r}: vocabulary token {repeated[0]['values'].as_py()!r} appears twice"
        )


def _resolve_collisions(keys, order, tokens, text, hashes, missed, found, pos):
    found, pos = found.copy(), pos.copy()
    for i in missed:  # runs only for tokens whose 64-bit hash equals another's: practically never
        j = pos[i]
        while j < len(keys) and keys[j] == hashes[i]:
            if tokens[int(order[j])].as_py() == text[int(i)].as_py():
                found[i], pos[i] = True, j
                break
            j += 1
    return found, pos


class _ApplyVocabularyFn(beam.DoFn):
    def __init__(self, files: dict[str, str] | None, features, num_oov, oov_method, salt,
                 checksums: dict[str, str] | None = None):
        self._files = files
        self._checksums = checksums or {}
        self._features = features
        self._num_oov = num_oov  # None, an int, or feature -> int
        self._oov_method = oov_method
        self._salt = salt
        self._lookups: dict[tuple[str, str, int], VocabularyLookup] = {}
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

    def _lookup(self, feature: str, path: str, num_oov: int) -> VocabularyLookup:
        key = (feature, path, num_oov)
        if key not in self._lookups:
            checksum = self._checksums.get(feature) if self._files else None
            self._lookups[key] = VocabularyLookup(
                read_vocabulary(path, checksum), num_oov, oov_method=self._oov_method, salt=self._salt, feature=feature
            )
        return self._lookups[key]

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
            lookup = self._lookup(feature, path, num_oov)
            column = batch.column(feature)
            indices = lookup(list_values(column, feature, "ApplyVocabulary"), feature)
            self._oov_count.inc(int((indices < num_oov).sum()))
            batch = replace_column(batch, feature, _with_values(column, pa.array(indices, pa.int64())))
        yield batch


def _with_values(column: pa.Array, values: pa.Array) -> pa.Array:
    """A list column shaped like `column` holding `values` (those of its non-null rows, in order)."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return values
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    large = pa.types.is_large_list(column.type)
    offsets = np.zeros(len(column) + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    make = pa.LargeListArray if large else pa.ListArray
    mask = column.is_null() if column.null_count else None
    return make.from_arrays(pa.array(offsets), values, mask=mask)


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
      >>> vocab = batches | ComputeVocabulary(["C1"], "/tmp/vocab")  # doctest: +SKIP
      >>> indexed = batches | ApplyVocabulary(vocab)  # doctest: +SKIP
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
        _check_oov_method(oov_method, salt)
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
