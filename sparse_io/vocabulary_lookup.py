"""Token -> index over Arrow arrays, vectorised: the indices Keras's StringLookup / IntegerLookup give.

A vocabulary (a token a line, as the ingest's ComputeVocabulary writes it)
assigns OOV indices `0..n-1` and the token on line `i` the index `n + i`,
which is what `keras.layers.StringLookup(vocabulary=path, num_oov_indices=n)`
does. Strings are found through a native hash table that compares bytes
(`sparse_io.token_table`; where it cannot be built, through their
Fingerprint64 in a sorted table, then compared byte for byte: its
reference), integers through a sorted array. No TensorFlow and no Beam: the
ingest's workers and `sparse_io.id_maps` use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io import token_table
from sparse_io.hashing import fingerprint64, hash_strings, normalize_salt

__all__ = ["VocabularyLookup", "check_oov_method", "OOV_METHODS"]

OOV_METHODS = ("floormod", "farmhash")


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
        check_oov_method(oov_method, salt)
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


def check_oov_method(oov_method: str, salt) -> None:
    """ValueError unless `oov_method` is one of `OOV_METHODS`, and a salt comes only with "farmhash"."""
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


