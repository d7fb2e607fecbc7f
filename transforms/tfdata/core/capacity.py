"""COO capacities: how many entries each padded feature holds, resolved by one rule.

A capacity is given per feature (a dict feature -> int) or read from the
stats.json the Beam stage writes beside the shards. For a batch size b,
stats.json's `capacity[b]["max"]` is the sum of the b largest row lengths in
the whole data set: no b rows, consecutive or not, hold more ids, so no batch
of b rows overflows it. `capacity[b]["p99_9"]` is the 99.9th percentile of
the ids in a batch of b random rows: smaller, for `overflow="drop"`.

`make_dataset`, `make_log_dataset` and `pad_to_capacity` all resolve their
`capacities` argument here, and check `overflow` here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

from ops.pad_coo import OVERFLOW_MODES
from sparse_io import output_files
from sparse_io.stats_file import STATS_FORMAT_VERSION, Stats, StatsError

__all__ = [
    "CAPACITY_KINDS",
    "STATS_FILE",
    "capacity_from_stats",
    "check_overflow",
    "load_stats",
    "resolve_capacities",
]

STATS_FILE = output_files.STATS_FILE
CAPACITY_KINDS = ("max", "p99_9")


def load_stats(path: str) -> dict:
    """Reads a stats.json (a file, or the `stats.json` in a shard directory).

    Raises:
      FileNotFoundError: no such file.
      ValueError (`sparse_io.stats_file.StatsError`): not JSON, or not format_version 1.
    """
    stats = Stats.load(path).data
    if stats.get("format_version") != STATS_FORMAT_VERSION:  # written by every ingest: its absence is damage
        raise StatsError(f"{path}: expected a stats.json with format_version {STATS_FORMAT_VERSION} and 'features'")
    return dict(stats)


def _is_stats(value) -> bool:
    """True for a stats.json dict (rather than a dict feature -> capacity)."""
    return isinstance(value, Mapping) and "format_version" in value and "features" in value


def capacity_from_stats(stats: Mapping, feature: str, batch_size: int, *, kind: str = "max") -> int:
    """The COO capacity of `feature` for batches of `batch_size` rows, from stats.json.

    `kind="max"` (the sum of the `batch_size` largest row lengths) is a sound
    bound for any `batch_size` rows. When stats.json has no entry for
    `batch_size`, a sound bound is derived from the sizes it has: a larger
    size's max, k times a smaller size's max (k = ceil(batch_size / size)),
    or batch_size times the most ids in a row; the smallest of these.
    `kind="p99_9"` needs an exact entry.

    Raises:
      ValueError: batch_size not a positive int, unknown feature or kind, an
        entry lacking the key asked for, a batch size of 0 in stats.json, or
        no way to derive the capacity.

    Example:
      >>> s = {"features": {"f": {"ids_per_row": {"max": 3},
      ...      "capacity": {"1024": {"max": 900, "p99_9": 850}}}}}
      >>> [capacity_from_stats(s, "f", b) for b in (1024, 512, 2048)]
      [900, 900, 1800]
    """
    if kind not in CAPACITY_KINDS:
        raise ValueError(f"capacity kind must be one of {CAPACITY_KINDS}, got {kind!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"capacity_from_stats: batch_size must be a positive int, got {batch_size!r}")
    entry = stats.get("features", {}).get(feature)
    if entry is None:
        raise ValueError(f"stats.json has no feature {feature!r}; it has {sorted(stats.get('features', {}))}")
    table = {}
    for size, value in entry.get("capacity", {}).items():
        if int(size) < 1:
            raise ValueError(f"feature {feature!r}: stats.json has a capacity for batch size {size}; sizes are >= 1")
        table[int(size)] = value
    if batch_size in table:
        return _entry(table[batch_size], feature, batch_size, kind)
    if kind != "max":
        raise ValueError(
            f"feature {feature!r}: stats.json has no {kind} capacity for batch size {batch_size} "
            f"(it has {sorted(table)}); only 'max' can be derived for other sizes"
        )
    candidates = []
    for size, value in table.items():
        bound = _entry(value, feature, size, "max")
        candidates.append(bound if size >= batch_size else math.ceil(batch_size / size) * bound)
    most = entry.get("ids_per_row", {}).get("max")
    if most is not None:
        candidates.append(batch_size * int(most))
    if not candidates:
        raise ValueError(f"feature {feature!r}: stats.json gives no capacity and no ids_per_row max")
    return min(candidates)


def _entry(value: Mapping, feature: str, size: int, kind: str) -> int:
    if kind not in value:
        raise ValueError(f"feature {feature!r}: stats.json's capacity for batch size {size} has no {kind!r}")
    return int(value[kind])


def resolve_capacities(
    capacities,
    names: Sequence[str],
    batch_size: int | None,
    *,
    kind: str = "max",
    directory: str | None = None,
    where: str = "capacities",
) -> dict[str, int]:
    """`{name: capacity}` for every feature in `names`.

    Args:
      capacities: a dict feature -> int (extra entries are ignored), a
        stats.json dict, the path of a stats.json or of a directory holding
        one, or "stats": the stats.json in `directory`.
      names: the features that need a capacity.
      batch_size: the batch's row count, for stats.json capacities.
      kind: which stats.json capacity, "max" or "p99_9".
      directory: the shard directory "stats" refers to.
      where: the prefix of error messages.

    Raises:
      ValueError: a feature without a capacity, a capacity that is not an
        int >= 0, stats.json capacities without a batch size, or anything
        `load_stats` or `capacity_from_stats` raises.
    """
    if isinstance(capacities, str):
        if capacities == "stats" and directory is not None:
            capacities = directory
        capacities = load_stats(capacities)
    if _is_stats(capacities):
        if batch_size is None:
            raise ValueError(f"{where}: capacities from stats.json need batch_size (the batch's row count)")
        return {n: capacity_from_stats(capacities, n, batch_size, kind=kind) for n in names}
    if not isinstance(capacities, Mapping):
        raise ValueError(
            f"{where}: capacities must be a dict feature -> int, a stats.json dict or its path, "
            f"got {type(capacities).__name__}"
        )
    missing = sorted(set(names) - set(capacities))
    if missing:
        raise ValueError(f"{where}: no capacity for feature(s) {missing}")
    out = {}
    for n in names:
        cap = capacities[n]
        if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 0:
            raise ValueError(f"feature {n!r}: capacity must be a non-negative int, got {cap!r}")
        out[n] = int(cap)
    return out


def check_overflow(overflow: str, where: str = "overflow") -> None:
    """Raises ValueError unless `overflow` is one of `ops.pad_coo`'s modes ("error", "drop")."""
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"{where}: overflow must be one of {OVERFLOW_MODES}, got {overflow!r}")
