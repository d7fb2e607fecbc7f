"""Groups of equal 64-bit values: each distinct one once, in the order first met, with its count and positions.

The numpy and Arrow reference of the raw-value counts' sums (`transforms.beam._fingerprint_counts`), which
run natively in `sparse_io.raw_value_sums` where it builds: one dictionary encoding, `np.bincount` and two
scatters.

Example:
  >>> groups, counts, first, last = group_fingerprints(np.array([7, 3, 7, 9], np.int64))
  >>> groups.tolist(), counts.tolist(), first.tolist(), last.tolist()
  ([7, 3, 9], [2, 1, 1], [0, 1, 3], [2, 1, 3])
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["group_fingerprints"]

Groups = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _checked(values: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    values = np.ascontiguousarray(values)
    values = values.view(np.int64) if values.dtype == np.uint64 else values.astype(np.int64, copy=False)
    if values.ndim != 1:
        raise ValueError(f"group_fingerprints: values must be 1-D, got shape {values.shape}")
    weights = np.zeros(0, np.int64) if weights is None else np.ascontiguousarray(weights, dtype=np.int64)
    if weights.ndim != 1 or len(weights) > len(values):
        raise ValueError(f"group_fingerprints: {len(weights)} weights for {len(values)} values")
    return values, weights


def group_fingerprints(values: np.ndarray, weights: np.ndarray | None = None) -> Groups:
    """`(groups, counts, first, last)` of `values` (int64 or uint64 [n]), each int64 [d] for d distinct values.

    `groups`: the distinct values in the order first met (as int64); `counts`: how often each occurs, where
    the first `len(weights)` values count `weights[i]` each instead of 1; `first` / `last`: the positions of
    each one's first and last occurrence.

    Raises:
      ValueError: `values` not 1-D, or more weights than values.
    """
    values, weights = _checked(values, weights)
    if not len(values):
        return tuple(np.zeros(0, np.int64) for _ in range(4))  # type: ignore[return-value]
    encoded = pc.dictionary_encode(pa.array(values))
    index = encoded.indices.to_numpy()
    distinct = len(encoded.dictionary)
    weighted = len(weights)
    counts = np.bincount(index[weighted:], minlength=distinct)
    if weighted:
        counts += np.bincount(index[:weighted], weights=weights, minlength=distinct).astype(np.int64)
    positions = np.arange(len(index))
    first = np.empty(distinct, np.int64)
    first[index[::-1]] = positions[::-1]  # the last write to a slot is its first position
    last = np.empty(distinct, np.int64)
    last[index] = positions
    return encoded.dictionary.to_numpy().astype(np.int64, copy=False), counts.astype(np.int64), first, last
