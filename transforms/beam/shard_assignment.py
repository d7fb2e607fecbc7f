"""Which shard each row goes to, and the key it is sorted by there: the first step of `WriteShards`.

`AssignShardsFn` appends two columns to every batch: `SHARD_COLUMN` (int32,
the row's shard in [0, num_shards)) and `ORDER_COLUMN` (int64 >= 0, the sort
key within the shard). Shuffled: both random per row. Unshuffled: the whole
batch to one shard under one key (its digest, so equal batches sort
together), or, with `order_by`, rows grouped by the hash of the first order
column and keyed by `order_code` of its values. With a seed, the random
numbers of a batch come from a generator seeded by the seed and `batch_digest` of
the batch's contents: the same input gives the same shards whatever order
the runner delivers batches in.

Example:
  >>> import pyarrow as pa
  >>> [int(c) for c in order_code(pa.array([-5, 0, 7]))] == sorted(int(c) for c in order_code(pa.array([-5, 0, 7])))
  True
  >>> batch_digest(pa.record_batch({"a": [1, 2]})) == batch_digest(pa.record_batch({"a": [1, 2]}))
  True
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.hashing import hash_strings

__all__ = ["ORDER_COLUMN", "SHARD_COLUMN", "AssignShardsFn", "batch_digest", "order_code"]

# The sort key that travels with each row to its shard: random per row, or per batch without shuffle.
# Rows with equal keys come from identical batches and are identical, so a stable sort by the key alone
# gives the same shard bytes whatever order the runner delivers the parts in.
ORDER_COLUMN = "__sparseflow_order"
SHARD_COLUMN = "__sparseflow_shard"  # each row's shard, until the spill files it under that shard
_DIGEST_MUL = np.uint64(0x9E3779B97F4A7C15)
_MASK64 = (1 << 64) - 1


def batch_digest(batch: pa.RecordBatch) -> int:
    """64 bits that depend on every byte of a batch's buffers (they seed its random numbers).

    Not cryptographic: a position-weighted sum of the buffers' 8-byte words,
    which reads memory once (several times faster than a hash function).
    """
    total = batch.num_rows
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is None or buffer.size == 0:
                continue
            data = np.frombuffer(buffer, dtype=np.uint8)
            cut = data.size - data.size % 8
            words = data[:cut].view("<u8")
            weights = np.arange(1, words.size + 1, dtype=np.uint64) * _DIGEST_MUL
            mixed = int((words * weights).sum(dtype=np.uint64))
            tail = int.from_bytes(data[cut:].tobytes(), "little")
            total = (total * int(_DIGEST_MUL) + mixed + tail) & _MASK64
    return total


def order_code(values: pa.Array) -> np.ndarray:
    """Non-negative int64 codes, non-decreasing in `values` (integers, or strings by their first 8 bytes).

    Equal codes need not mean equal values (long strings, other types all 0):
    the shard writer sorts rows of one code range by the values themselves.
    """
    n = len(values)
    if pa.types.is_integer(values.type):
        raw = pc.fill_null(values.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        return ((raw.view(np.uint64) ^ np.uint64(1 << 63)) >> np.uint64(1)).astype(np.int64)
    if pa.types.is_string(values.type) or pa.types.is_binary(values.type):
        prefix = pc.utf8_slice_codeunits(values, 0, 8) if pa.types.is_string(values.type) else values
        padded = np.zeros((n, 8), dtype=np.uint8)
        for i, text in enumerate(prefix.cast(pa.binary()).to_pylist()):
            head = (text or b"")[:8]
            padded[i, : len(head)] = np.frombuffer(head, dtype=np.uint8)
        return (padded.view(">u8").ravel().astype(np.uint64) >> np.uint64(1)).astype(np.int64)
    return np.zeros(n, dtype=np.int64)


class AssignShardsFn(beam.DoFn):
    """Appends each row's shard (`SHARD_COLUMN`) and sort key (`ORDER_COLUMN`) to its batch."""

    def __init__(self, num_shards: int | None, shuffle: bool, seed: int | None, order_by: tuple[str, ...] = ()):
        self._num_shards = num_shards
        self._shuffle = shuffle
        self._seed = seed
        self._order_by = order_by

    def process(self, batch: pa.RecordBatch, computed_shards=None):
        n = batch.num_rows
        if n == 0:
            return
        shards = self._num_shards or computed_shards
        digest = batch_digest(batch) if self._seed is not None else None
        rng = np.random.default_rng(None if digest is None else [self._seed & (2**64 - 1), digest])
        if not self._shuffle and self._order_by:
            # Whole groups of the first order column per shard (by its hash), in its order.
            first = batch.column(self._order_by[0])
            if not (pa.types.is_integer(first.type) or pa.types.is_string(first.type)):
                first = first.cast(pa.string())
            filled = pc.fill_null(first, pa.scalar(0 if pa.types.is_integer(first.type) else "", first.type))
            target = hash_strings(filled, shards).astype(np.int32)
            keys = order_code(first)
        elif not self._shuffle:
            # The whole batch goes to one shard, in its order; the batch's digest
            # (or a random key) orders the batches within the shard.
            key = digest if digest is not None else int(rng.integers(2**63))
            target = np.full(n, rng.integers(shards), dtype=np.int32)
            keys = np.full(n, key >> 1, dtype=np.int64)
        else:
            target = rng.integers(shards, size=n).astype(np.int32)
            keys = rng.integers(np.iinfo(np.int64).max, size=n, dtype=np.int64)
        # The rows stay where they are: the spill moves each row once, to its shard and key range.
        yield batch.append_column(SHARD_COLUMN, pa.array(target)).append_column(ORDER_COLUMN, pa.array(keys))
