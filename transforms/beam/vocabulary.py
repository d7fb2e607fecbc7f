"""ComputeVocabulary / ApplyVocabulary: frequency-ranked vocabularies Keras can load.

ComputeVocabulary counts every value of each feature with a combiner (each
worker counts its batches with `pc.value_counts` before the shuffle, so only
per-worker count tables cross it) and writes one text file per feature, a
token a line, most frequent first (ties by value). `keras.layers.StringLookup`
or `IntegerLookup(vocabulary=path, num_oov_indices=n)` then assigns exactly
the indices ApplyVocabulary does: OOV indices `0..n-1`, the token on line `i`
(from 0) index `n + i`.

TensorFlow reads a vocabulary file a whole line per token and refuses empty
lines, so the empty string, a token holding a newline and one ending in
carriage return cannot be written; they are left out of the file (and so map
to OOV both here and in Keras) and counted in the `unwritable_tokens` metric.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems

from sparse_io.atomic import atomic_write_text
from sparse_io.hashing import fingerprint64, hash_strings, normalize_salt
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import feature_names, replace_column, require_columns
from transforms.beam._counts import CountTable, list_values

__all__ = ["ComputeVocabulary", "ApplyVocabulary", "VocabularyFile", "VocabularyLookup"]

_METRICS = "sparseflow.Vocabulary"


@dataclasses.dataclass(frozen=True)
class VocabularyFile:
    """What ComputeVocabulary wrote for one feature.

    Attributes:
      feature: the column name.
      path: the vocabulary file (one token a line).
      size: tokens in the file.
      num_oov_buckets: the OOV indices a lookup reserves before the tokens.
      dtype: "string" or "int64" (the type of the counted values).
    """

    feature: str
    path: str
    size: int
    num_oov_buckets: int
    dtype: str


def _writable(values: pa.Array) -> np.ndarray:
    """bool mask: tokens a TensorFlow text-file vocabulary can hold as one line."""
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


def _columns_by_feature(batch: pa.RecordBatch, features: Sequence[str], transform: str):
    require_columns(batch, features, transform)
    for name in features:
        yield name, (name, batch.column(name))


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
        path = FileSystems.join(self._output_dir, f"{feature}.txt")
        atomic_write_text(path, _lines(values))
        yield VocabularyFile(feature, path, len(values), self._num_oov, dtype)


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

    Input: PCollection[pa.RecordBatch]. Output: PCollection[VocabularyFile],
    one per feature. Files are written atomically; a feature with no tokens
    gets an empty file.

    Raises: ValueError at construction for bad arguments; while running for a
    missing column or a null id (naming feature and row).

    Example:
      >>> vocab = batches | ComputeVocabulary(["genre"], "/tmp/vocab")  # doctest: +SKIP
      >>> keras.layers.StringLookup(vocabulary="/tmp/vocab/genre.txt")  # doctest: +SKIP
    """

    def __init__(
        self,
        features: str | Sequence[str],
        output_dir: str,
        min_frequency: int = 1,
        top_k: int | None = None,
        num_oov_buckets: int = 1,
    ):
        super().__init__()
        self._features = feature_names(features, "ComputeVocabulary")
        _check_int("min_frequency", min_frequency, 1)
        if top_k is not None:
            _check_int("top_k", top_k, 1)
        _check_int("num_oov_buckets", num_oov_buckets, 0)
        if not output_dir:
            raise ValueError("ComputeVocabulary: output_dir must be a directory path")
        self._output_dir = output_dir
        self._min_frequency = min_frequency
        self._top_k = top_k
        self._num_oov = num_oov_buckets

    def expand(self, batches):
        features = self._features
        return (
            batches
            | "ColumnsByFeature" >> beam.FlatMap(_columns_by_feature, features, "ComputeVocabulary")
            | "Count" >> beam.CombinePerKey(_CountValuesFn())
            | "Write"
            >> beam.ParDo(
                _WriteVocabularyFn(self._output_dir, self._min_frequency, self._top_k, self._num_oov)
            )
        )


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def read_vocabulary(path: str) -> list[str]:
    """The tokens of a vocabulary file, one a line, as TensorFlow's text-file initializer reads them."""
    with FileSystems.open(path) as f:
        text = f.read().decode("utf-8")
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
        if oov_method not in ("floormod", "farmhash"):
            raise ValueError(f"oov_method must be 'floormod' or 'farmhash', got {oov_method!r}")
        self._num_oov = num_oov_buckets
        self._oov_method = oov_method
        self._salt = normalize_salt(salt)
        self._feature = feature
        self._text = pa.array(list(tokens), pa.large_string()) if tokens else pa.array([], pa.large_string())
        self._int_keys: tuple[np.ndarray, np.ndarray] | None = None
        self._str_keys: tuple[np.ndarray, np.ndarray] | None = None

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

    def __call__(self, values: pa.Array, feature: str) -> np.ndarray:
        """int64 indices of flat `values` (strings or integers, no nulls)."""
        n = len(values)
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
        out = np.where(found, order[pos] + self._num_oov if len(keys) else 0, 0).astype(np.int64)
        oov = ~found
        if oov.any():
            out[oov] = self._oov_indices(values, oov, feature)
        return out

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
    def __init__(self, files: dict[str, str] | None, features, num_oov, oov_method, salt):
        self._files = files
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
            self._lookups[key] = VocabularyLookup(
                read_vocabulary(path), num_oov, oov_method=self._oov_method, salt=self._salt, feature=feature
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
    ):
        super().__init__()
        if oov_method not in ("floormod", "farmhash"):
            raise ValueError(
                f"ApplyVocabulary: oov_method must be 'floormod' or 'farmhash', got {oov_method!r}"
            )
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
            self._files = {n: FileSystems.join(vocabularies, f"{n}.txt") for n in self._features}
        else:
            raise ValueError(
                "ApplyVocabulary: vocabularies must be ComputeVocabulary's output, a mapping "
                f"feature -> path or a directory, got {type(vocabularies).__name__}"
            )
        if isinstance(num_oov_buckets, Mapping):
            for name, value in num_oov_buckets.items():
                _check_int(f"num_oov_buckets[{name!r}]", value, 0)
            num_oov_buckets = dict(num_oov_buckets)
        elif num_oov_buckets is not None:
            _check_int("num_oov_buckets", num_oov_buckets, 0)
        self._num_oov = num_oov_buckets
        for path in (self._files or {}).values():
            if FileSystems.get_scheme(path) is None and not os.path.exists(path):
                raise ValueError(f"ApplyVocabulary: vocabulary file {path!r} does not exist")

    def expand(self, batches):
        fn = _ApplyVocabularyFn(self._files, self._features, self._num_oov, self._oov_method, self._salt)
        if self._computed is not None:
            side = beam.pvalue.AsList(self._computed)
            return batches | "Lookup" >> beam.ParDo(fn, computed=side).with_output_types(pa.RecordBatch)
        return batches | "Lookup" >> beam.ParDo(fn).with_output_types(pa.RecordBatch)
