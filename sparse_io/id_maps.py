"""How a raw value becomes a model id: one spec per mapping, applied to Arrow arrays here.

A spec says, once, how raw ids (strings, or integers through their decimal
text) become int64 ids:

* `HashSpec(num_bins, salt, mask_value)`: `keras.layers.Hashing`'s buckets
  (Fingerprint64, or keyed SipHash with a salt);
* `VocabularySpec(tokens, num_oov_buckets, oov_method, salt)`:
  `keras.layers.StringLookup` / `IntegerLookup`'s indices (the token on line
  `i` gets `num_oov_buckets + i`; an unknown id 0, or with several OOV
  buckets `id mod n` for integers ("floormod") or the FarmHash bucket of its
  text ("farmhash")); several features sharing one vocabulary file share
  one spec;
* `CrossSpec(sources, num_bins, max_per_row)` (`sparse_io.crosses`):
  `keras.layers.HashedCrossing`'s ids of several columns' raw values, its
  graph side `transforms.tfdata.crosses.GraphCross`.

Each spec has two implementations that give the same ids for the same
values: `apply_arrow` here (numpy over Arrow buffers, no TensorFlow: what the
Beam ingest runs) and `transforms.tfdata.ids.GraphIdMap` (TensorFlow graph
ops: what `make_log_dataset` and the exported serving signature run).
`spec_of_feature` reads the spec an ingest recorded in schema.json.

Example:
  >>> spec = HashSpec(10)
  >>> spec.apply_arrow(pa.array([["a", "b"], []], pa.list_(pa.string()))).to_pylist()
  [[9, 2], []]
  >>> VocabularySpec(("x", "y")).apply_arrow(pa.array(["y", "q"])).to_pylist()
  [2, 0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from sparse_io.crosses import DEFAULT_MAX_CROSSES_PER_ROW, CrossSpec
from sparse_io.hashing import IdColumn, hash_columns, normalize_salt
from sparse_io.locations import join
from sparse_io.schema import FeatureSpec, SchemaError
from sparse_io.vocabulary_lookup import VocabularyLookup, check_oov_method

__all__ = ["HashSpec", "VocabularySpec", "CrossSpec", "IdSpec", "spec_of_feature", "hash_arrow_columns",
           "vocabulary_tokens"]


def _check_count(value, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class HashSpec:
    """Ids are `keras.layers.Hashing(num_bins, mask_value=mask_value, salt=salt)` buckets of the raw values.

    Attributes:
      num_bins: bucket count, >= 1 (the mask bucket included when `mask_value` is set).
      salt: None (FarmHash64 Fingerprint64) or a Keras salt: an int or two
        (keyed SipHash-2-4); kept as a pair.
      mask_value: the value sent to bucket 0; the others go to `1 + hash % (num_bins - 1)`.
    """

    num_bins: int
    salt: int | tuple[int, int] | None = None
    mask_value: str | int | None = None

    def __post_init__(self) -> None:
        _check_count(self.num_bins, "num_bins", 1)
        object.__setattr__(self, "salt", normalize_salt(self.salt))

    @property
    def id_range(self) -> int:
        """Ids lie in `[0, id_range)`."""
        return self.num_bins

    def apply_arrow(self, column: pa.Array | pa.ChunkedArray, feature: str | None = None) -> pa.Array:
        """int64 ids of a list column (`list<string>`, `list<int*>`) or a flat one, its rows kept.

        Raises:
          ValueError: a null id (naming `feature` and its row) or a type that cannot be hashed.
        """
        return hash_arrow_columns([column], [self], [feature])[0]


def hash_arrow_columns(
    columns: Sequence[pa.Array | pa.ChunkedArray], specs: Sequence[HashSpec], features: Sequence[str | None],
    hashes: list | None = None,
) -> list[pa.Array]:
    """`HashSpec.apply_arrow` of several columns, their ids hashed in one pass per salt and mask value.

    With a list as `hashes`, each column's flat ids and their 64-bit hashes are appended to it in column order
    (as `sparse_io.hashing.hash_columns` gives them).
    """
    groups: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault((spec.salt, spec.mask_value), []).append(i)
    out: list[pa.Array | None] = [None] * len(columns)
    kept: list = [None] * len(columns)
    for (salt, mask_value), members in groups.items():
        found: list | None = [] if hashes is not None else None
        hashed = hash_columns([columns[i] for i in members], [specs[i].num_bins for i in members], salt,
                              mask_value=mask_value, features=[features[i] for i in members], hashes=found)
        for j, (i, column) in enumerate(zip(members, hashed)):
            out[i] = column
            if found is not None:
                kept[i] = found[j]
    if hashes is not None:
        hashes.extend(kept)
    return [column for column in out if column is not None]


@dataclasses.dataclass(frozen=True)
class VocabularySpec:
    """Ids are the indices Keras's `StringLookup` / `IntegerLookup` give over `tokens`.

    Attributes:
      tokens: the vocabulary, in id order (line `i` of the ingest's `vocab/<f>.txt`).
        Integer ids are looked up by their decimal text.
      num_oov_buckets: k, the ids `0..k-1` of unknown values (0: an unknown value is an error).
      oov_method: with k > 1, how an unknown integer finds its bucket: "floormod" (`id mod k`,
        IntegerLookup's default and the ingest's) or "farmhash" (the FarmHash bucket of its
        decimal text). Unknown strings always take the FarmHash bucket (SipHash with a salt).
      salt: Keras's salt of the "farmhash" OOV buckets.
    """

    tokens: tuple[str, ...]
    num_oov_buckets: int = 1
    oov_method: str = "floormod"
    salt: int | tuple[int, int] | None = None
    _lookup: list = dataclasses.field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(str(t) for t in self.tokens))
        _check_count(self.num_oov_buckets, "num_oov_buckets", 0)
        check_oov_method(self.oov_method, self.salt)
        object.__setattr__(self, "salt", normalize_salt(self.salt))

    @property
    def id_range(self) -> int:
        """Ids lie in `[0, id_range)`."""
        return self.num_oov_buckets + len(self.tokens)

    def lookup(self) -> VocabularyLookup:
        """The vectorised Arrow lookup of these tokens (built on first use, once per spec)."""
        if not self._lookup:
            self._lookup.append(VocabularyLookup(list(self.tokens), self.num_oov_buckets,
                                                 oov_method=self.oov_method, salt=self.salt))
        return self._lookup[0]

    def apply_arrow(self, column: pa.Array | pa.ChunkedArray, feature: str | None = None) -> pa.Array:
        """int64 ids of a list column (`list<string>`, `list<int*>`) or a flat one, its rows kept.

        Raises:
          ValueError: a null id, an unknown value with num_oov_buckets 0, a
            repeated token, or integer ids against a non-integer token.
        """
        shape = IdColumn(column, feature)
        return shape.rebuild(self.lookup()(shape.values, feature or "ids"))


IdSpec = HashSpec | VocabularySpec | CrossSpec  # a CrossSpec maps several columns (`sparse_io.crosses`)


def vocabulary_tokens(data: bytes | str) -> tuple[str, ...]:
    """The tokens of a vocabulary file's contents, one a line, as TensorFlow's text-file initializer reads them."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return tuple(line[:-1] if line.endswith("\r") else line for line in lines)


def _read_local(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def spec_of_feature(
    spec: FeatureSpec, vocab_dir: str | None = None, *, read: Callable[[str], bytes] = _read_local
) -> IdSpec | None:
    """The mapping an ingest recorded in schema.json for one sparse feature, or None (ids kept as they are).

    A cross (`cross` in schema.json) is a `CrossSpec` over its sources' raw
    values; a feature with `hash_buckets` was hashed; one with `num_oov_buckets` was
    looked up in `vocab_dir/<name>.txt` (`<shared_vocabulary>.txt` for a shared one) (read with `read`, so remote
    filesystems can be passed in). The vocabulary's integer OOV ids follow
    the ingest's rule ("floormod").

    Raises:
      SchemaError: a vocabulary feature whose file is absent, or one whose
        token count disagrees with schema.json's `vocabulary_size`.
    """
    if spec.cross and spec.hash_buckets:  # FeatureSpec refuses a cross without hash_buckets
        return CrossSpec(spec.cross, spec.hash_buckets, spec.cross_max_per_row or DEFAULT_MAX_CROSSES_PER_ROW)
    if spec.hash_buckets:
        return HashSpec(spec.hash_buckets, spec.salt)
    if spec.num_oov_buckets is None:
        return None
    if vocab_dir is None:
        raise SchemaError(f"feature {spec.name!r}: looked up in a vocabulary, but no vocabulary directory was given")
    file_name = spec.shared_vocabulary or spec.name  # a shared vocabulary: one file for several features
    path = join(vocab_dir, f"{file_name}.txt")
    try:
        tokens = vocabulary_tokens(read(path))
    except FileNotFoundError:
        raise SchemaError(f"feature {spec.name!r}: its vocabulary {path} is missing") from None
    vocabulary = VocabularySpec(tokens, spec.num_oov_buckets)
    if spec.vocabulary_size is not None and vocabulary.id_range != spec.vocabulary_size:
        raise SchemaError(f"feature {spec.name!r}: {path} gives {vocabulary.id_range} ids with its OOV buckets, "
                          f"schema.json's vocabulary_size says {spec.vocabulary_size}")
    return vocabulary
