"""Key partitions of GroupHistories: how many for a log, and which one each key falls in.

A key's partition is a hash of its value modulo the partition count, the
same on every worker and in every run: it decides which events are built
into histories together, and so the output's batches.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparse_io.hashing import fingerprint64

__all__ = ["partitions_for", "partition_of", "MIN_PARTITIONS", "EVENTS_PER_PARTITION"]

MIN_PARTITIONS = 32  # partitions of a log of up to EVENTS_PER_PARTITION * 32 events
EVENTS_PER_PARTITION = 1_000_000  # past MIN_PARTITIONS, one more partition per this many events


def partitions_for(events: int, events_per_partition: int = EVENTS_PER_PARTITION) -> int:
    """The key partitions of a log of `events` events: 32, and one per `events_per_partition` past that.

    Example:
      >>> partitions_for(0), partitions_for(32_000_000), partitions_for(32_000_001)
      (32, 32, 33)
    """
    return max(MIN_PARTITIONS, -(-events // events_per_partition))


def partition_of(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """int64 partition of each key in `[0, num_partitions)`, stable across workers and runs."""
    if pa.types.is_integer(keys.type):
        x = keys.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
        # splitmix64's finaliser: consecutive ids spread over all partitions.
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    else:
        x = fingerprint64(keys if not pa.types.is_dictionary(keys.type) else keys.dictionary_decode())
    return (x % np.uint64(num_partitions)).astype(np.int64)
